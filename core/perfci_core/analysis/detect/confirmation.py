"""Confirmation of a suspect by the interleaved sessions of its bracket (docs/design.md,
"Deciding a regression"): a commit before the suspect's located range and one after it, measured
A B A B ... in one session on one agent per look, so a host drifting between jobs moves both
sides of a pair alike.

A bracket is judged on its sessions' own pairs only, never on the jobs that located the suspect:
the paired test (:func:`..paired.paired_compare`) of every pair so far at the look's share of
``Settings.confirm_alpha`` (Pocock-type spending over ``confirm_looks`` sessions). DIFFERENT
confirms a change when the commits' own medians around the bracket lean the same way at
``suspect_alpha``: the two are independent data, so a level that never moved passes both at most
``suspect_alpha x confirm_alpha`` of the time (5e-5 at the defaults, within the search's 1e-4).
SAME rejects it (the confirmation stops early); UNKNOWN asks another session until the looks are
spent."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from perfci_core import metrics as catalogue

from ..compare import Comparison, Verdict, compare
from ..paired import paired_compare
from ..sequential import look_alpha
from ..changepoints import ChangePoint
from ..series import CleanSeries, to_scale
from .settings import Settings

Sessions = Mapping[tuple[int, int], list[tuple[np.ndarray, np.ndarray]]]

State = Literal["confirmed", "rejected", "pending", "exhausted"]


@dataclass(frozen=True)
class Bracket:
    """What a bracket's sessions say (``before`` and ``after``: positions in the commits' own series)."""

    before: int
    after: int
    looks: int  # sessions judged (at most confirm_looks)
    test: Comparison  # every pair so far, at the last look's level
    state: State

    def holds(self, k: int) -> bool:
        """A change first seen at ``k`` lies inside this bracket."""
        return self.before < k <= self.after


def look_level(look: int, settings: Settings) -> float:
    """The level of a bracket's ``look``-th session (1-based)."""
    looks = max(1, settings.confirm_looks)
    return look_alpha(settings.confirm_alpha, min(max(look, 1), looks), looks, "pocock")


def judge(sessions: Sessions, own: CleanSeries, bounds: Sequence[int], m: catalogue.Metric | None,
          min_effect: float, settings: Settings) -> list[Bracket]:
    """Every bracket among ``sessions`` (by the positions in ``own`` of the two commits each
    measured). ``bounds``: the changes the search found (first-bad positions): a bracket holding
    one is that change's, and the lean is read between them."""
    out: list[Bracket] = []
    for (a, b), measured in sorted(sessions.items()):
        if any(a < c <= b for c in bounds):
            continue
        measured = measured[:max(1, settings.confirm_looks)]
        before = np.concatenate([u for u, _ in measured])
        after = np.concatenate([v for _, v in measured])
        test = paired_compare(before, after, m, alpha=look_level(len(measured), settings), min_effect=min_effect)
        if test.verdict is Verdict.DIFFERENT:
            state: State = "confirmed" if _leans(own, a, b, bounds, m, test, settings) else "rejected"
        elif test.verdict is Verdict.SAME:
            state = "rejected"
        else:
            state = "pending" if len(measured) < settings.confirm_looks else "exhausted"
        out.append(Bracket(a, b, len(measured), test, state))
    return out


def own_sessions(full: CleanSeries, own: CleanSeries) -> Sessions:
    """The series' sessions by the positions in ``own`` of the two commits they measured."""
    at = {c: i for i, c in enumerate(own.commits)}
    out: dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray]]] = {}
    for (x, y), measured in full.sessions().items():
        a, b = at.get(full.commits[x]), at.get(full.commits[y])
        if a is not None and b is not None:
            out[a, b] = measured
    return out


def _sides(own: CleanSeries, a: int, b: int, bounds: Sequence[int], window: int) -> tuple[int, int]:
    """The first commit of the left side of a bracket and the end of its right side: up to
    ``window`` commits each way, never across another change."""
    start = max([0, a - window + 1, *(c for c in bounds if c <= a)])
    stop = min([len(own), b + window, *(c for c in bounds if c > b)])
    return start, stop


def _leans(own: CleanSeries, a: int, b: int, bounds: Sequence[int], m: catalogue.Metric | None,
           test: Comparison, settings: Settings) -> bool:
    """The commits' own medians before the bracket (its ``before`` included) against those from its
    ``after`` on differ at ``suspect_alpha`` in the sessions' direction."""
    start, stop = _sides(own, a, b, bounds, settings.search.window)
    lean = compare(own.medians[start:a + 1], own.medians[b:stop], m, alpha=settings.suspect_alpha)
    return lean.p_value <= settings.suspect_alpha and np.sign(lean.rel_change) == np.sign(test.rel_change)




def located(own: CleanSeries, bracket: Bracket, bounds: Sequence[int], settings: Settings) -> tuple[ChangePoint, int, int]:
    """A confirmed bracket's change, with the bracket's inside as its range, and the stretch
    ``[start, stop)`` its pin may read. Its commit: the middle of an inside of at most three
    commits (within one commit of any of them), else the split of the inside that fits the commits'
    own medians around it best (two levels, least squares on the search scale, each commit weighed
    by its repetitions)."""
    a, b = bracket.before, bracket.after
    start, stop = _sides(own, a, b, bounds, settings.search.window)
    if b - a <= 3:
        return ChangePoint((a + 1 + b) // 2, a + 1, b, bracket.test), start, stop
    y, w = to_scale(own.medians)[start:stop], own.counts[start:stop]
    cw, cy, cyy = (np.concatenate([[0.0], np.cumsum(v)]) for v in (w, w * y, w * y * y))

    def sse(i: int, j: int) -> float:
        return float(cyy[j] - cyy[i] - (cy[j] - cy[i]) ** 2 / (cw[j] - cw[i]))

    best = min(range(a + 1, b + 1), key=lambda k: (sse(0, k - start) + sse(k - start, stop - start), k))
    return ChangePoint(best, a + 1, b, bracket.test), start, stop
