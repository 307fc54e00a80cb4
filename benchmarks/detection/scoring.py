"""Scoring of the detection benchmark (run.py): detections against labelled steps, per seed, and
the tables that print them (mean and range over seeds; a paired comparison of two variants).

A detection is correct when it is at a labelled step's first commit (tolerance 0) or within one
commit (tolerance 1); each step is matched at most once; every unmatched detection is a false alert.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np


class Series(Protocol):
    """What scoring reads of a labelled series (run.py's Series has it)."""

    points: list[list[float]]
    steps: list[int]
    sizes: dict[int, float]

SIZE_BINS = [(0.0, 0.01), (0.01, 0.02), (0.02, 0.03), (0.03, 0.05), (0.05, 1.0)]


def match(steps: list[int], found: list[int], tol: int) -> tuple[set[int], int]:
    """(the steps matched, the number of false alerts)."""
    unmatched, fp = list(steps), 0
    for k in found:
        hit = next((t for t in unmatched if abs(t - k) <= tol), None)
        if hit is None:
            fp += 1
        else:
            unmatched.remove(hit)
    return set(steps) - set(unmatched), fp


def prf(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    p = tp / (tp + fp) if tp + fp else 1.0
    r = tp / (tp + fn) if tp + fn else 1.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def figures(corpus: list[Series], changes: list[list[int]], delays: list[list[int | None]]) -> dict[str, float]:
    """One seed's figures of one detector on one table's series."""
    commits = sum(len(s.points) for s in corpus)
    out: dict[str, float] = {}
    for tol, tag in ((0, ""), (1, "±1")):
        tp = fp = fn = 0
        for s, found in zip(corpus, changes):
            hit, false = match(s.steps, found, tol)
            tp, fp, fn = tp + len(hit), fp + false, fn + len(s.steps) - len(hit)
        p, r, f1 = prf(tp, fp, fn)
        out |= {f"prec{tag}": p, f"recall{tag}": r, f"F1{tag}": f1, f"FA/1k{tag}": 1000 * fp / commits}
    found = [d for ds in delays for d in ds if d is not None]
    out["delay"] = float(np.median(found)) if found else math.nan
    return out


def recall_by_size(corpus: list[Series], changes: list[list[int]]) -> list[tuple[int, int]]:
    """(steps found within ±1, steps) per SIZE_BINS."""
    counts = [[0, 0] for _ in SIZE_BINS]
    for s, found in zip(corpus, changes):
        hit, _ = match(s.steps, found, 1)
        for k in s.steps:
            b = next(i for i, (lo, hi) in enumerate(SIZE_BINS) if lo <= abs(s.sizes.get(k, 0.05)) < hi)
            counts[b][0] += k in hit
            counts[b][1] += 1
    return [tuple(c) for c in counts]


def cell(values: list[float], fmt: str) -> str:
    v = [x for x in values if not math.isnan(x)]
    if not v:
        return "-"
    if len(v) == 1:
        return format(v[0], fmt)
    return f"{format(float(np.mean(v)), fmt)} ({format(min(v), fmt)}-{format(max(v), fmt)})"


COLUMNS = (("F1", ".3f"), ("prec", ".3f"), ("recall", ".3f"), ("FA/1k", ".2f"),
           ("F1±1", ".3f"), ("recall±1", ".3f"), ("FA/1k±1", ".2f"), ("delay", ".1f"))


def print_table(title: str, rows: dict[str, list[dict[str, float]]], secs: dict[str, float]) -> None:
    print(f"\n{title}")
    cells = {name: [cell([f[c] for f in per_seed], fmt) for c, fmt in COLUMNS] for name, per_seed in rows.items()}
    widths = [max(len(c), *(len(v[i]) for v in cells.values())) for i, (c, _) in enumerate(COLUMNS)]
    head = f"{'detector':<16} " + " ".join(f"{c:>{w}}" for (c, _), w in zip(COLUMNS, widths)) + f" {'sec':>6}"
    print(head)
    print("-" * len(head))
    for name, row in cells.items():
        print(f"{name:<16} " + " ".join(f"{v:>{w}}" for v, w in zip(row, widths)) + f" {secs[name]:6.0f}")


def size_recall(counts: list[tuple[int, int]]) -> dict[str, float]:
    """Recall within ±1 of the 2-3 % steps and of the steps of 3 % or more, with their counts,
    from :func:`recall_by_size`'s counts (the sizes the recall targets name)."""
    two, big = counts[2], [sum(c[i] for c in counts[3:]) for i in (0, 1)]
    return {"recall±1 2-3%": two[0] / two[1] if two[1] else math.nan,
            "recall±1 >=3%": big[0] / big[1] if big[1] else math.nan,
            "found 2-3%": two[0], "steps 2-3%": two[1], "found >=3%": big[0], "steps >=3%": big[1]}


PAIRED_COLUMNS = (("F1", ".3f", 1), ("F1±1", ".3f", 1), ("FA/1k", ".2f", -1), ("FA/1k±1", ".2f", -1),
                  ("recall±1 2-3%", ".3f", 1), ("recall±1 >=3%", ".3f", 1))  # (figure, format, sign of better)


def print_paired(title: str, base: str, other: str, rows: dict[str, list[dict[str, float]]]) -> None:
    """Seed by seed, ``other`` against ``base`` (both measured on the same corpora): the mean
    difference with its range, and on how many seeds ``other`` was better, worse or equal."""
    print(f"\n{title}: {other} - {base}, per seed (the same corpus for both)")
    for name, fmt, better in PAIRED_COLUMNS:
        pairs = [(b[name], o[name]) for b, o in zip(rows[base], rows[other])
                 if not (math.isnan(b[name]) or math.isnan(o[name]))]
        diffs = [o - b for b, o in pairs]
        ahead = sum(better * d > 1e-12 for d in diffs)
        behind = sum(better * d < -1e-12 for d in diffs)
        print(f"  {name:<14} {base} {cell([b for b, _ in pairs], fmt)}, {other} {cell([o for _, o in pairs], fmt)}; "
              f"difference {cell(diffs, '+' + fmt)}; {other} better on {ahead}, worse on {behind}, "
              f"equal on {len(diffs) - ahead - behind} of {len(diffs)} seeds")
    for key in ("2-3%", ">=3%"):
        counts = {n: (sum(f[f"found {key}"] for f in rows[n]), sum(f[f"steps {key}"] for f in rows[n])) for n in (base, other)}
        print(f"  pooled recall±1 {key}: " + ", ".join(f"{n} {h}/{t}" for n, (h, t) in counts.items()))
