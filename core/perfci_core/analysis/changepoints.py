"""Change points over the commit order: minimum-description-length grouping, then a significance
test on every boundary.

Why MDL grouping (CSIT's jumpavg family) rather than E-divisive means (Otava):

- It is *exact*: optimal partitioning by dynamic programming finds the grouping of minimum total
  code length over all groupings (with PELT pruning, about linear time), where E-divisive is a
  greedy bisection whose windowed variant (Otava's 50-point windows) can split a long stable run
  at window edges and needs permutations or a t-test per split.
- It is cheap to extend: appending one point adds one DP step (:class:`Segmenter`), and a
  detection searches on from the last one's search (:class:`SearchMemo`; ``detect``'s module
  doc, incremental).
- It consumes the per-metric noise model directly. jumpavg estimates a standard deviation per
  group, which collapses on short groups (and so over-splits noisy data); here the noise is one
  robust number learned from the whole series (``noise.diff_sigma`` of the per-commit medians),
  scaled per commit by its repetition count, so a group's code length depends only on how far
  its points sit from its mean.

Code length (nats) of a grouping = sum over groups of [ data: sum w_i (y_i - mean)^2 / 2 ]
plus a per-group model cost ``penalty = ln N + ln(R / sigma) + 0.5 ln N`` (where the boundary is,
the group mean to a precision of sigma / sqrt n over the range R of the series), the usual
two-part MDL code with Gaussian data given the model (constants common to all groupings dropped).

Robustness before the search (the heavy upper tail in docs/design.md, "These machines"): a Hampel-style clip replaces
a point that is more than ``clip`` noise-sigmas away from *both* the median of the 3 points
before it and the median of the 3 after it by the nearer median +/- clip sigma, and gives it a
hundredth of the weight. A lone outlier cannot buy a group of its own nor drag a boundary next
to it; a step is left intact (its points agree with one side).
Groups shorter than ``min_segment`` points are not allowed, so a change at the tip of the series
is reported once ``min_segment`` commits confirm it.

Every boundary the search proposes must then pass :func:`compare.compare` on the per-commit
medians of up to ``window`` commits on each side (two-sample rank tests, ``alpha``, and the
learned minimum effect). A boundary that fails is removed — the weakest first — and its
neighbours are re-tested on the merged groups (Otava's merge step). The local window keeps slow
drift from being reported as a step: across a boundary, drift moves the level by only
slope x window.

The location is a range when the data cannot pin it: every boundary position whose two-group
code length is within ``location_nats`` of the best, between the neighbouring change points.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np

from perfci_core import metrics as catalogue

from .compare import Comparison, Verdict, compare

HAMPEL_HALF_WINDOW = 3
OUTLIER_WEIGHT = 0.01


@dataclass(frozen=True)
class SearchSettings:
    min_segment: int = 3
    clip: float = 3.0
    penalty_factor: float = 1.0
    window: int = 50
    alpha: float = 1e-4
    location_nats: float = 3.0


@dataclass(frozen=True)
class ChangePoint:
    index: int  # first point of the new level
    range_start: int  # earliest position the change can be at (index of a point)
    range_end: int  # latest position (inclusive)
    test: Comparison  # per-commit medians, up to `window` commits each side


def hampel_clip(y: np.ndarray, sigma: np.ndarray, clip: float) -> np.ndarray:
    """Clip points far from both their left and right neighbourhood medians (see module doc)."""
    y = np.asarray(y, dtype=float)
    n = y.size
    h = HAMPEL_HALF_WINDOW
    if n < 2:
        return y.copy()
    left, right = _neighbour_medians(y, h)
    d_left = np.where(np.isnan(left), np.inf, np.abs(y - left))
    d_right = np.where(np.isnan(right), np.inf, np.abs(y - right))
    use_left = d_left <= d_right
    ref = np.where(use_left, left, right)
    dist = np.minimum(d_left, d_right)
    limit = clip * np.asarray(sigma, dtype=float)
    out = np.where(dist > limit, ref + np.copysign(limit, y - ref), y)
    return out


def _neighbour_medians(y: np.ndarray, h: int) -> tuple[np.ndarray, np.ndarray]:
    """Per point i: the median of y[i-h:i] and of y[i+1:i+1+h] (fewer points at the two ends,
    NaN where there are none). One np.median over the full windows and a few small ones at the
    ends: np.nanmedian over NaN-padded windows gives the same values at several times the cost."""
    n = y.size
    left, right = np.full(n, np.nan), np.full(n, np.nan)
    if n > h:
        full = np.median(np.lib.stride_tricks.sliding_window_view(y, h), axis=1)  # full[j] = median(y[j:j+h])
        left[h:] = full[:n - h]
        right[:n - h] = full[1:]
    for i in range(1, min(h, n)):  # windows cut by the start (none before point 0)
        left[i] = np.median(y[:i])
    for i in range(max(0, n - h), n - 1):  # ... and by the end (none after the last point)
        right[i] = np.median(y[i + 1:])
    return left, right


class _Costs:
    """Weighted within-group squared error, O(1) per group from cumulative sums."""

    def __init__(self, y: np.ndarray, w: np.ndarray):
        self.s0 = np.concatenate([[0.0], np.cumsum(w)])
        self.s1 = np.concatenate([[0.0], np.cumsum(w * y)])
        self.s2 = np.concatenate([[0.0], np.cumsum(w * y * y)])

    def __call__(self, start: np.ndarray | int, stop: int) -> np.ndarray:
        s0 = self.s0[stop] - self.s0[start]
        s1 = self.s1[stop] - self.s1[start]
        s2 = self.s2[stop] - self.s2[start]
        return np.maximum(s2 - s1 * s1 / s0, 0.0) / 2.0  # nats


def mdl_penalty(n: int, y_range_sigmas: float, factor: float = 1.0) -> float:
    """Model cost of one more group, in nats (see module doc)."""
    return factor * (1.5 * math.log(max(n, 2)) + math.log(max(y_range_sigmas, 1.0)))


class Segmenter:
    """Optimal partitioning (PELT pruning) of standardised points that can be extended by new
    points and cut back to a prefix: what :func:`segment` computes, kept between detections so a
    series that gained a few points is searched over those points only (:class:`SearchMemo`).

    The state after points [0, m) depends on those points, the penalty and the minimum group
    length only, so extending it gives exactly what a search over all the points gives.
    Cutting back keeps every group start with a finite code length as a candidate: a superset
    of what pruning kept, which cannot change the optimum (a pruned start is strictly worse).

    Pruning: a group start ``e`` whose best code length to ``t`` is already worse than ``t``'s
    own can never be optimal again — but only from ``t + min_segment`` on, when a group can
    start at ``t``; until then ``e`` stays a candidate (dropping it at ``t``, the textbook rule,
    loses the optimum now and then when groups have a minimum length).

    Detection runs it several times per series and upload, so the loop keeps its numpy calls
    few: the candidates live in one array in ascending order (the ones too recent to start a
    group are its last few entries), and the cost of :class:`_Costs` is written out inline.
    """

    def __init__(self, penalty: float, min_segment: int):
        self.penalty, self.min_segment = penalty, max(1, min_segment)
        self.y = self.w = np.empty(0)  # the points searched so far and their weights
        self.s0 = self.s1 = self.s2 = np.zeros(1)  # cumulative sums (_Costs) over them
        self.best = np.array([-penalty])  # best[t]: code length of the best grouping of [0, t)
        self.last = np.zeros(1, dtype=np.intp)  # last[t]: where that grouping's last group starts
        self.cands = np.zeros(1, dtype=np.intp)  # the group starts still worth trying
        self.beaten: dict[int, np.ndarray] = {}  # time -> the starts beaten then (dropped L points later)

    def __len__(self) -> int:
        return self.y.size

    def truncate(self, m: int) -> None:
        """Forget every point from ``m`` on."""
        if m >= len(self):
            return
        self.y, self.w = self.y[:m], self.w[:m]
        self.s0, self.s1, self.s2 = self.s0[:m + 1], self.s1[:m + 1], self.s2[:m + 1]
        self.best, self.last = self.best[:m + 1], self.last[:m + 1]
        self.cands = np.flatnonzero(np.isfinite(self.best))
        self.beaten = {}

    def extend(self, y: np.ndarray, w: np.ndarray) -> Segmenter:
        """Search on over ``y`` (weights ``w``: 1 / variance per point), appended to the points so far."""
        m, L, penalty = len(self), self.min_segment, self.penalty
        y, w = np.asarray(y, dtype=float), np.asarray(w, dtype=float)
        if not y.size:
            return self
        self.y, self.w = np.concatenate([self.y, y]), np.concatenate([self.w, w])
        # running on from the last sum, so the sums are those of one pass over every point
        self.s0 = np.concatenate([self.s0, np.cumsum(np.concatenate([self.s0[-1:], w]))[1:]])
        self.s1 = np.concatenate([self.s1, np.cumsum(np.concatenate([self.s1[-1:], w * y]))[1:]])
        self.s2 = np.concatenate([self.s2, np.cumsum(np.concatenate([self.s2[-1:], w * y * y]))[1:]])
        n = len(self)
        s0, s1, s2 = self.s0, self.s1, self.s2
        best = np.concatenate([self.best, np.full(n - m, np.inf)])
        last = np.concatenate([self.last, np.zeros(n - m, dtype=np.intp)])
        cands = np.empty(n + 1, dtype=np.intp)  # cands[:size]: the group starts still worth trying
        size = self.cands.size
        cands[:size] = self.cands
        beaten = self.beaten
        for t in range(max(L, m + 1), n + 1):
            drop = beaten.pop(t - L, None)
            if drop is not None and drop.size:
                live = cands[:size][~np.isin(cands[:size], drop, assume_unique=True)]
                size = live.size
                cands[:size] = live
            ready = size
            while ready and cands[ready - 1] > t - L:  # a group from there would be shorter than L
                ready -= 1
            if ready:
                e = cands[:ready]
                d0, d1, d2 = s0[t] - s0[e], s1[t] - s1[e], s2[t] - s2[e]
                partial = best[e] + np.maximum(d2 - d1 * d1 / d0, 0.0) / 2.0  # serves the choice and the pruning
                j = int(partial.argmin())
                best[t], last[t] = partial[j] + penalty, e[j]
                beaten[t] = e[partial > best[t]]
            if best[t] < np.inf:
                cands[size] = t
                size += 1
        self.best, self.last, self.cands = best, last, cands[:size].copy()
        return self

    def bounds(self) -> list[int]:
        """The first index of every group after the first, in order."""
        if len(self) < 2 * self.min_segment:
            return []
        out = []
        t = len(self)
        while t > 0:
            t = int(self.last[t])
            if t > 0:
                out.append(t)
        return sorted(out)


def segment(y: np.ndarray, weights: np.ndarray, penalty: float, min_segment: int) -> list[int]:
    """Optimal partitioning of standardised ``y`` (:class:`Segmenter`, in one pass): the first
    index of every group after the first, in order. ``weights`` are 1 / variance per point (in
    standardised units)."""
    return Segmenter(penalty, min_segment).extend(y, weights).bounds()


class SearchMemo:
    """One series' main search, kept from one detection to the next (:class:`Segmenter`).

    A detection hands it the points it is about to search; the memo keeps the longest prefix
    it has already searched with the very same inputs (standardised values, weights, penalty,
    minimum group length) and searches on from there. Anything else — a re-measured commit,
    a moved window start, a re-learned noise — differs in those inputs and is searched again
    from where it differs, so a memo never changes what the search proposes.
    """

    def __init__(self) -> None:
        self.segmenter: Segmenter | None = None
        self.reused = 0  # points whose search was kept (detections that used this memo, summed)
        self.searched = 0  # points searched

    def search(self, y: np.ndarray, w: np.ndarray, penalty: float, min_segment: int) -> list[int]:
        seg = self.segmenter
        if seg is None or seg.penalty != penalty or seg.min_segment != max(1, min_segment):
            seg = self.segmenter = Segmenter(penalty, min_segment)
        k = min(len(seg), y.size)
        differs = np.flatnonzero((seg.y[:k] != y[:k]) | (seg.w[:k] != w[:k]))
        seg.truncate(int(differs[0]) if differs.size else k)
        self.reused += len(seg)
        self.searched += y.size - len(seg)
        return seg.extend(y[len(seg):], w[len(seg):]).bounds()


def location_range(cost: _Costs, a: int, k: int, b: int, min_segment: int, nats: float) -> tuple[int, int]:
    """Contiguous positions around ``k`` whose split of [a, b) costs within ``nats`` of ``k``'s."""
    lo_k, hi_k = a + min_segment, b - min_segment
    if hi_k < lo_k:
        return k, k
    ks = np.arange(lo_k, hi_k + 1)
    total = cost(a, ks) + cost(ks, b)
    base = total[k - lo_k]
    ok = total <= base + nats
    lo = hi = k - lo_k
    while lo > 0 and ok[lo - 1]:
        lo -= 1
    while hi + 1 < ok.size and ok[hi + 1]:
        hi += 1
    return int(ks[lo]), int(ks[hi])


@dataclass(frozen=True)
class Frame:
    """What turns a series' points into the search's standardised ones, and the penalty of one
    more group: learned on a reference part of the series (by default all of it). Detection
    learns it on the points before the newest block (``detect.Settings.block``), so it stays
    the same while a block fills and a :class:`SearchMemo` can keep the search of the rest."""

    centre: float  # subtracted from the scaled points (numerics only: code lengths ignore it)
    unit: float  # the points are divided by it (numerics only: the weights follow)
    penalty: float  # nats per group: mdl_penalty over the reference part

    @classmethod
    def of(cls, scaled: np.ndarray, point_sigma: np.ndarray, settings: SearchSettings) -> Frame:
        return _framed(scaled, point_sigma, settings)[0]


def _framed(scaled: np.ndarray, point_sigma: np.ndarray, settings: SearchSettings,
            frame: Frame | None = None) -> tuple[Frame, np.ndarray, np.ndarray]:
    """The frame (learned on these points unless given) and the points standardised in it,
    clipped (:func:`hampel_clip`), with their weights."""
    centre, unit = (frame.centre, frame.unit) if frame else (float(np.median(scaled)), float(np.median(point_sigma)))
    z = (scaled - centre) / unit
    zs = point_sigma / unit
    clipped = hampel_clip(z, zs, settings.clip)
    w = 1.0 / (zs * zs)
    w[clipped != z] *= OUTLIER_WEIGHT  # an outlier must not pull a boundary towards itself
    if frame is None:
        frame = Frame(centre, unit, mdl_penalty(scaled.size, float(np.ptp(clipped)), settings.penalty_factor))
    return frame, clipped, w


class Proposal:
    """The boundaries the MDL search proposes for a series, before any test: computed once and
    validated at several alphas (detection: the alert's alpha, then the suspects' looser one on
    :meth:`with_tail`, its newest points searched again at a lower penalty)."""

    def __init__(self, medians: np.ndarray, scaled: np.ndarray, point_sigma: np.ndarray,
                 settings: SearchSettings = SearchSettings(), tail: int | None = None,
                 frame: Frame | None = None, memo: SearchMemo | None = None):
        """``tail``: search only the newest ``tail`` points (no boundary is proposed before them).
        ``frame``: learned elsewhere (default: on every point). ``memo``: this series' search at
        its previous detection, searched on from (it never changes the boundaries)."""
        self.medians, self.settings = medians, settings
        self.n = n = medians.size
        self.bounds: list[int] = []
        self.z = self.w = np.empty(0)  # the clipped points and their weights, once searched
        self.frame = frame
        if n < 2 * settings.min_segment:
            return
        frame, self.z, self.w = _framed(scaled, point_sigma, settings, frame)
        self.frame = frame
        start = 0 if tail is None else max(0, n - tail)
        z, w = self.z[start:], self.w[start:]
        found = (memo.search(z, w, frame.penalty, settings.min_segment) if memo is not None
                 else segment(z, w, frame.penalty, settings.min_segment))
        self.bounds = [start + b for b in found]

    def on(self, medians: np.ndarray, scaled: np.ndarray, point_sigma: np.ndarray) -> Proposal:
        """This proposal's boundaries over other values of the same points, standardised in the
        same frame: what :meth:`with_tail` then searches again and :meth:`validated` tests."""
        out = copy.copy(self)
        out.medians = medians
        if self.z.size:
            _, out.z, out.w = _framed(scaled, point_sigma, self.settings, self.frame)
        return out

    def with_tail(self, settings: SearchSettings, tail: int) -> Proposal:
        """This proposal's boundaries before the last ``tail`` points, and a search at ``settings``
        (another penalty) over those points: what a second search over the whole series would
        propose near its end, at a fraction of its cost (the same clipped points, the same n)."""
        out = copy.copy(self)
        out.settings = settings
        if self.z.size < 2 * settings.min_segment:
            return out
        start = max(0, self.n - tail)
        pen = mdl_penalty(self.n, float(np.ptp(self.z)), settings.penalty_factor)
        out.bounds = [b for b in self.bounds if b < start] + [
            start + b for b in segment(self.z[start:], self.w[start:], pen, settings.min_segment)]
        return out

    def validated(self, metric: catalogue.Metric | None, min_effect: float, alpha: float) -> list[ChangePoint]:
        """The proposed boundaries that pass their rank test at ``alpha``; a failing one is removed
        (the weakest first) and its neighbours are re-tested on the merged groups."""
        if not self.bounds:
            return []
        n, window, medians = self.n, self.settings.window, self.medians
        bounds = list(self.bounds)

        def test(i: int) -> Comparison:
            a = bounds[i - 1] if i > 0 else 0
            b = bounds[i + 1] if i + 1 < len(bounds) else n
            k = bounds[i]
            return compare(medians[max(a, k - window):k], medians[k:min(b, k + window)], metric,
                           alpha=alpha, min_effect=min_effect)

        tests = [test(i) for i in range(len(bounds))]
        while True:
            failing = [i for i, t in enumerate(tests) if t.verdict is not Verdict.DIFFERENT]
            if not failing:
                break
            worst = max(failing, key=lambda i: (tests[i].p_value, -abs(tests[i].rel_change)))
            del bounds[worst]
            del tests[worst]
            for i in (worst - 1, worst):
                if 0 <= i < len(bounds):
                    tests[i] = test(i)

        cost = _Costs(self.z, self.w)
        out = []
        for i, k in enumerate(bounds):
            a = bounds[i - 1] if i > 0 else 0
            b = bounds[i + 1] if i + 1 < len(bounds) else n
            lo, hi = location_range(cost, a, k, b, self.settings.min_segment, self.settings.location_nats)
            out.append(ChangePoint(k, lo, hi, tests[i]))
        return out


def find_change_points(
    medians: np.ndarray,
    scaled: np.ndarray,
    point_sigma: np.ndarray,
    metric: catalogue.Metric | None,
    min_effect: float,
    settings: SearchSettings = SearchSettings(),
) -> list[ChangePoint]:
    """Validated change points of a noisy series at ``settings.alpha``.

    ``medians``: per-commit medians (metric units, for the tests); ``scaled``: the same on the
    search scale (``series.to_scale``); ``point_sigma``: noise of each scaled point (> 0).
    """
    return Proposal(medians, scaled, point_sigma, settings).validated(metric, min_effect, settings.alpha)


def find_exact_changes(medians: np.ndarray, metric: catalogue.Metric | None,
                       tolerance: float) -> list[ChangePoint]:
    """Deterministic series: every step between consecutive commits beyond ``tolerance``."""
    out = []
    for k in range(1, medians.size):
        c = compare([medians[k - 1]], [medians[k]], metric, backend=catalogue.Backend.SIM, tolerance=tolerance)
        if c.verdict is Verdict.DIFFERENT:
            out.append(ChangePoint(k, k, k, c))
    return out
