"""Perfherder's change detection, ported from Treeherder's `perfalert.detect_changes` and the
alert filter of `perf/alerts.py` (written for this benchmark; same rules and defaults):

- each commit (push) holds all its values (Treeherder: one per job, retriggers add values);
- at commit i the back window takes commits i-1, i-2, ... while it holds fewer than
  ``max_back_window`` values and spans at most min(max(quiet, min_back_window), max_back_window)
  commits, where ``quiet`` counts the commits since the last t above the threshold (the window
  grows while nothing moves and shrinks back after a change); the fore window takes commits
  i, i+1, ... until it holds ``fore_window`` values;
- t = Welch's statistic of the two windows, their averages weighted linearly (the nearest commit
  weighs 1, the farthest 1/n), the variances taken around those averages;
- a commit is a change when both windows are full (``min_back_window`` and ``fore_window``
  values), |t| > ``t_threshold`` and its t is not below either neighbour's;
- the alert is kept when the unweighted averages of the two windows differ by at least
  ``alert_threshold`` % (Treeherder's PERFHERDER_REGRESSION_THRESHOLD, 2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MIN_BACK_WINDOW, MAX_BACK_WINDOW, FORE_WINDOW, T_THRESHOLD, ALERT_THRESHOLD_PCT = 12, 24, 12, 7.0, 2.0


def _stats(window: Sequence[Sequence[float]], linear: bool) -> tuple[float, int, float]:
    """(average, value count, sample variance around that average); ``window`` nearest first."""
    n = len(window)
    values = [v for commit in window for v in commit]
    if not values:
        return 0.0, 0, 0.0
    weights = [(n - i) / n if linear else 1.0 for i in range(n)]
    total = sum(w * sum(commit) for w, commit in zip(weights, window))
    avg = total / sum(w * len(commit) for w, commit in zip(weights, window))
    var = sum((v - avg) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
    return avg, len(values), var


def _t(back: Sequence[Sequence[float]], fore: Sequence[Sequence[float]]) -> float:
    if not back or not fore:
        return 0.0
    a1, n1, v1 = _stats(back, linear=True)
    a2, n2, v2 = _stats(fore, linear=True)
    if a2 == a1:
        return 0.0
    if v1 == 0 and v2 == 0:
        return math.inf
    return abs(a2 - a1) / math.sqrt(v1 / n1 + v2 / n2)


def detect_changes(points: Sequence[Sequence[float]], min_back_window: int = MIN_BACK_WINDOW,
                   max_back_window: int = MAX_BACK_WINDOW, fore_window: int = FORE_WINDOW,
                   t_threshold: float = T_THRESHOLD, alert_threshold_pct: float = ALERT_THRESHOLD_PCT) -> list[int]:
    """Positions of the commits Perfherder would alert on (the first commit of a new level)."""
    n = len(points)
    t = [0.0] * n
    full = [False] * n
    pct = [0.0] * n
    quiet = 0
    for i in range(1, n):
        back, held, j = [], 0, i - 1
        span = min(max(quiet, min_back_window), max_back_window)
        while held < max_back_window and j >= 0 and i - j <= span:
            back.append(points[j])
            held += len(points[j])
            j -= 1
        fore, ahead, k = [], 0, i
        while ahead < fore_window and k < n:
            fore.append(points[k])
            ahead += len(points[k])
            k += 1
        t[i] = _t(back, fore)
        quiet = 0 if t[i] > t_threshold else quiet + 1
        full[i] = held >= min_back_window and ahead >= fore_window
        before, after = _stats(back, linear=False)[0], _stats(fore, linear=False)[0]
        pct[i] = 100.0 * abs(after - before) / before if before else 0.0
    return [i for i in range(1, n)
            if full[i] and t[i] > t_threshold and t[i - 1] <= t[i] and (i + 1 == n or t[i + 1] <= t[i])
            and pct[i] >= alert_threshold_pct]
