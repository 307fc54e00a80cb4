"""Verdict-quality benchmark: perfci's detector against CSIT jumpavg, Apache Otava and a
Perfherder-style sliding t-test on one labelled corpus.

    .venv/bin/python benchmarks/detection/run.py [--quick] [--extra FILE.json ...] [--seed N]

Corpus: synthetic series (200-2000 commits; per-run noise 0.3-3.7 % that is normal, heavy-tailed,
bimodal, with +20 % outlier runs or slow drift; 1-7 repetitions per commit; labelled steps of
0.5-10 % in both directions; plus deterministic ``sim`` series) and any labelled series given
with ``--extra`` (the hook for series measured from the real dataplane):

    {"series": [{"name": "...", "metric": "ipp", "backend": "sim",
                 "points": [{"commit": "...", "values": [..]}, ...],
                 "steps": [index of the first commit of each new level, ...]}]}

Scoring, per detector: a detection is correct when it is at a labelled step's first commit
(``exact``) — the table also reports ``+/-1``. Each labelled step is matched at most once; every
unmatched detection is a false alert. Delay: commits after the step that had to be measured
before the detector reported it (within +/-1), checked at growing prefixes of the series.

Peers run from PyPI in virtual environments this script creates under ``--cache-dir``
(default ``~/.cache/perfci-bench``), each talking JSON over a subprocess; one that cannot be
installed is reported and skipped.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
import venv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "server"), str(ROOT / "agents")]

from perfci_core.analysis import detect  # noqa: E402

HERE = Path(__file__).resolve().parent
DELAY_CHECKS = [2, 3, 5, 8, 13, 21, 34]
DELAY_CONTEXT = 200  # commits before the step given to a detector when measuring delay
PEERS = {"jumpavg": "jumpavg", "otava": "apache-otava"}


@dataclass
class Series:
    name: str
    metric: str
    backend: str
    points: list[list[float]]
    steps: list[int]
    family: str = "extra"
    commits: list[str] = field(default_factory=list)

    def __post_init__(self):
        if not self.commits:
            self.commits = [f"{self.name}-{i}" for i in range(len(self.points))]


# ----------------------------------------------------------------------------- corpus

def _steps(rng: np.random.Generator, n: int) -> dict[int, float]:
    count = max(1, int(rng.integers(1, 2 + n // 250)))
    out: dict[int, float] = {}
    tries = 0
    while len(out) < count and tries < 1000:
        tries += 1
        k = int(rng.integers(50, n - 25))
        if all(abs(k - j) >= 60 for j in out):
            size = math.exp(rng.uniform(math.log(0.005), math.log(0.10)))
            out[k] = size * (1 if rng.random() < 0.5 else -1)
    return dict(sorted(out.items()))


def synth_series(rng: np.random.Generator, idx: int, family: str, n: int) -> Series:
    steps = _steps(rng, n)
    metric = ["cpp", "pps", "ipp", "eipc"][idx % 4]
    level = np.full(n, 100.0 if metric != "pps" else 1.0e7)
    for k, r in steps.items():
        level[k:] *= 1 + r
    if family == "sim":
        pts = [[float(v)] for v in np.round(level * 1e6) / 1e6]
        return Series(f"s{idx:03d}-sim", "ipp", "sim", pts, list(steps), family)
    cv = float(rng.choice([0.003, 0.01, 0.02, 0.037]))
    reps_kind = rng.integers(0, 4)
    reps = {0: np.full(n, 1), 1: np.full(n, 3), 2: np.full(n, 5), 3: rng.integers(1, 8, n)}[int(reps_kind)]
    if family == "drift":
        # slow drift: up to +/-2 % per 1000 commits, plus a small random walk
        level = level * (1 + rng.uniform(-0.02, 0.02) * np.arange(n) / 1000
                         + np.cumsum(rng.normal(0, cv / 100, n)))
    pts = []
    for lv, r in zip(level, reps):
        e = cv * rng.standard_normal(int(r))
        if family == "heavy":
            e = cv * rng.standard_t(3, int(r)) / math.sqrt(3.0) + 0.19 * (rng.random(int(r)) < 0.02)
        elif family == "bimodal":
            e = e + 2.5 * cv * (rng.random(int(r)) < 0.25)
        elif family == "outliers":
            e = e + 0.20 * (rng.random(int(r)) < 0.03) * rng.choice([-0.5, 1.0], int(r))
        pts.append([float(v) for v in lv * (1 + e)])
    return Series(f"s{idx:03d}-{family}", metric, "tsc" if metric in ("cpp", "pps") else "pmu",
                  pts, list(steps), family)


def build_corpus(quick: bool, seed: int, extra: list[Path]) -> list[Series]:
    rng = np.random.default_rng(seed)
    families = ["normal", "heavy", "bimodal", "outliers", "drift", "sim"]
    per_family = 4 if quick else 6
    lengths = (200, 800) if quick else (200, 2000)
    corpus = []
    for f in families:
        for _ in range(per_family):
            n = int(rng.integers(lengths[0], lengths[1] + 1))
            corpus.append(synth_series(rng, len(corpus), f, n))
    for path in extra:
        for s in json.loads(path.read_text())["series"]:
            corpus.append(Series(s["name"], s["metric"], s["backend"], [p["values"] for p in s["points"]],
                                 list(s["steps"]), "extra", [p["commit"] for p in s["points"]]))
    return corpus


# ----------------------------------------------------------------------------- detectors

def perfci_changes(s: Series, points: list[list[float]] | None = None) -> list[int]:
    pts = s.points if points is None else points
    r = detect(list(zip(s.commits, pts)), s.metric, s.backend)
    return [c.index for c in r.changes]


def perfherder_changes(s: Series, points: list[list[float]] | None = None,
                       back: int = 12, fore: int = 12, t_threshold: float = 7.0, min_change: float = 0.02) -> list[int]:
    """Sliding Welch t-test over per-commit values (Perfherder's analyze: 12 back, 12 forward,
    |t| > 7 and a change of at least 2 %), the best t of each run of candidates."""
    pts = s.points if points is None else points
    y = np.array([float(np.median(p)) for p in pts])
    n = y.size
    t = np.zeros(n)
    for i in range(back, n - 1):
        b, f = y[max(0, i - back):i], y[i:i + fore]
        if f.size < 2:
            continue
        vb, vf = b.var(ddof=1), f.var(ddof=1)
        den = math.sqrt(vb / b.size + vf / f.size)
        mb = b.mean()
        rel = (f.mean() - mb) / abs(mb) if mb else 0.0
        if abs(rel) < min_change:
            continue
        t[i] = math.inf if den == 0 else abs(f.mean() - mb) / den
    out, i = [], 0
    while i < n:
        if t[i] > t_threshold:
            j = i
            while j + 1 < n and t[j + 1] > t_threshold:
                j += 1
            out.append(i + int(np.argmax(t[i:j + 1])))
            i = j + 1
        else:
            i += 1
    return out


def _delay(fn, s: Series, step: int) -> int | None:
    start = max(0, step - DELAY_CONTEXT)
    for c in DELAY_CHECKS:
        if step + c >= len(s.points):
            return None
        cps = fn(s, s.points[start:step + c + 1]) if fn is perfherder_changes else fn(
            Series(s.name, s.metric, s.backend, s.points[start:step + c + 1], [], s.family,
                   s.commits[start:step + c + 1]))
        if any(abs(start + k - step) <= 1 for k in cps):
            return c
    return None


def local_run(fn, corpus: list[Series]) -> tuple[list[list[int]], list[int | None]]:
    changes = [fn(s) for s in corpus]
    delays = [_delay(fn, s, k) for s in corpus for k in s.steps]
    return changes, delays


# ----------------------------------------------------------------------------- peers

def peer_python(tool: str, cache: Path) -> tuple[Path | None, str]:
    env_dir = cache / f"venv-{tool}"
    py = env_dir / "bin" / "python"
    marker = env_dir / ".installed"
    if marker.exists():
        return py, ""
    try:
        if not py.exists():
            venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
        r = subprocess.run([str(py), "-m", "pip", "install", "-q", PEERS[tool]],
                           capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            return None, f"pip install {PEERS[tool]} failed: {r.stderr.strip()[-300:]}"
        marker.write_text(PEERS[tool])
        return py, ""
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"could not create the {tool} environment: {e}"


def peer_run(tool: str, py: Path, corpus: list[Series]) -> tuple[list[list[int]], list[int | None]]:
    delay_jobs = []
    for i, s in enumerate(corpus):
        for k in s.steps:
            checks = [c for c in DELAY_CHECKS if k + c < len(s.points)]
            delay_jobs.append({"series": i, "step": k, "start": max(0, k - DELAY_CONTEXT), "checks": checks})
    job = {"tool": tool, "series": [s.points for s in corpus], "delay": delay_jobs}
    r = subprocess.run([str(py), str(HERE / "peer_worker.py")], input=json.dumps(job),
                       capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip()[-500:])
    ans = json.loads(r.stdout)
    return ans["changes"], ans["delay"]


# ----------------------------------------------------------------------------- scoring

def score(corpus: list[Series], changes: list[list[int]], tol: int) -> tuple[int, int, int]:
    tp = fp = fn = 0
    for s, found in zip(corpus, changes):
        unmatched = list(s.steps)
        for k in found:
            hit = next((t for t in unmatched if abs(t - k) <= tol), None)
            if hit is None:
                fp += 1
            else:
                tp += 1
                unmatched.remove(hit)
        fn += len(unmatched)
    return tp, fp, fn


def prf(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    p = tp / (tp + fp) if tp + fp else 1.0
    r = tp / (tp + fn) if tp + fn else 1.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smaller corpus (about two minutes)")
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--extra", type=Path, action="append", default=[], help="labelled series (JSON)")
    ap.add_argument("--cache-dir", type=Path,
                    default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "perfci-bench")
    ap.add_argument("--no-peers", action="store_true", help="skip jumpavg and Otava")
    args = ap.parse_args(argv)

    corpus = build_corpus(args.quick, args.seed, args.extra)
    commits = sum(len(s.points) for s in corpus)
    steps = sum(len(s.steps) for s in corpus)
    print(f"corpus: {len(corpus)} series, {commits} commits, {steps} labelled steps "
          f"(families: {', '.join(sorted({s.family for s in corpus}))})")

    results: dict[str, tuple[list[list[int]], list[int | None], float]] = {}
    notes = []
    for name, fn in (("perfci", perfci_changes), ("perfherder t-test", perfherder_changes)):
        t0 = time.time()
        ch, dl = local_run(fn, corpus)
        results[name] = (ch, dl, time.time() - t0)
    if not args.no_peers:
        args.cache_dir.mkdir(parents=True, exist_ok=True)
        for tool in ("jumpavg", "otava"):
            py, why = peer_python(tool, args.cache_dir)
            if py is None:
                notes.append(f"{tool}: NOT RUN - {why}")
                continue
            t0 = time.time()
            try:
                ch, dl = peer_run(tool, py, corpus)
            except (RuntimeError, subprocess.SubprocessError, ValueError) as e:
                notes.append(f"{tool}: NOT RUN - {e}")
                continue
            label = "jumpavg (CSIT)" if tool == "jumpavg" else "Apache Otava"
            results[label] = (ch, dl, time.time() - t0)

    head = (f"{'detector':<18} {'prec':>6} {'recall':>6} {'F1':>6} {'FA/1k':>6} | {'prec±1':>6} "
            f"{'rec±1':>6} {'F1±1':>6} {'FA/1k±1':>7} | {'delay med':>9} {'p90':>4} {'found':>7} | {'sec':>5}")
    print(head)
    print("-" * len(head))
    for name, (ch, dl, secs) in results.items():
        tp, fp, fn = score(corpus, ch, 0)
        p, r, f1 = prf(tp, fp, fn)
        tp1, fp1, fn1 = score(corpus, ch, 1)
        p1, r1, f11 = prf(tp1, fp1, fn1)
        found = [d for d in dl if d is not None]
        med = f"{np.median(found):.0f}" if found else "-"
        p90 = f"{np.percentile(found, 90):.0f}" if found else "-"
        print(f"{name:<18} {p:6.3f} {r:6.3f} {f1:6.3f} {1000 * fp / commits:6.2f} | {p1:6.3f} {r1:6.3f} "
              f"{f11:6.3f} {1000 * fp1 / commits:7.2f} | {med:>9} {p90:>4} {len(found):>3}/{len(dl):<3} | {secs:5.1f}")
    for n in notes:
        print(n)
    print("exact: detection at the labelled first commit; ±1: within one commit. FA/1k: false alerts per "
          "1000 commits. delay: commits measured after the step before it was reported (checked at "
          f"{DELAY_CHECKS}), over the steps found.")
    per_family(corpus, results)
    return 0


def per_family(corpus: list[Series], results) -> None:
    fams = sorted({s.family for s in corpus})
    print("\nF1 (exact) by noise family:")
    print(f"{'detector':<18} " + " ".join(f"{f:>9}" for f in fams))
    for name, (ch, _, _) in results.items():
        cells = []
        for f in fams:
            idx = [i for i, s in enumerate(corpus) if s.family == f]
            sub = [corpus[i] for i in idx]
            cells.append(prf(*score(sub, [ch[i] for i in idx], 0))[2])
        print(f"{name:<18} " + " ".join(f"{c:9.3f}" for c in cells))


if __name__ == "__main__":
    sys.exit(main())
