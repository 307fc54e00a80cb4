"""Creeps: a level that moves gradually over many commits is one finding over a range, not a
staircase of step alerts that each blame one commit (docs/design.md, "Deciding a regression").

The search over commits fits flat levels, so it cuts a ramp into steps. Each run of neighbouring
boundaries that move the same way is tested against a ramp: one slope between two kinks (at least
``Settings.creep_commits`` apart) plus any of those boundaries as steps on top of it, chosen
greedily by description length on the search's own points (the ramp costs one group's penalty and
``ln N`` per kink inside the run's stretch). When that beats the steps alone and the trend over the
ramp (Kendall's tau, the steps taken out) passes the search's alpha, the ramp is a creep; the steps on
top of it are what the search itself finds and validates on the stretch's medians with the ramp
taken out (so they are located there, not where the staircase cut the ramp). A suspect inside a
creep is held to the search's boundary test with the ramp taken out, at its own level."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
# scipy (about a second to import) is imported by the functions that use it: the API, the agent and
# the CLI import this module for its types and rules, most of them never for a test.

from perfci_core import metrics as catalogue

from ..changepoints import ChangePoint, Frame, Proposal
from ..compare import Kind, Verdict, compare, kind_of
from ..series import CleanSeries, to_scale
from .settings import Settings

GRID = 50  # kink positions tried per stretch (every commit of a shorter one)


@dataclass(frozen=True)
class Ramp:
    start: int  # the ramp rises from commit ``start`` to commit ``end`` (indices of the own series)
    end: int
    slope: float  # per commit, on the search's scale (log of the medians when they are positive)
    steps: tuple[int, ...]  # boundaries kept as steps on top of it
    rel_change: float
    p_value: float
    kind: Kind

    def holds(self, k: int) -> bool:
        return self.start < k <= self.end

    def detrended(self, medians: np.ndarray, logs: bool) -> np.ndarray:
        x = np.clip(np.arange(medians.size), self.start, self.end) - self.start
        return medians * np.exp(-self.slope * x) if logs else medians - self.slope * x


class _Sums:
    """Prefix sums over the points' weights, positions and values: a fit's sums over any stretch in O(1)."""

    def __init__(self, z: np.ndarray, w: np.ndarray):
        i = np.arange(z.size, dtype=float)
        self.w, self.wi, self.wii, self.y, self.yi, self.yy = (
            np.concatenate([[0.0], np.cumsum(v)]) for v in (w, w * i, w * i * i, w * z, w * i * z, w * z * z))

    @staticmethod
    def _span(cum: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        return np.where(hi > lo, cum[np.maximum(hi, lo)] - cum[lo], 0.0)

    def fit(self, bounds: Sequence[int], s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each ramp (s, e) (integer arrays): the squared error of levels between ``bounds``
        plus one common slope over x = clip(i, s, e), and that slope."""
        fs, fe = s.astype(float), e.astype(float)
        sxx = sxy = syy = 0.0
        for u, v in zip(bounds[:-1], bounds[1:]):
            u_, v_ = np.full_like(s, u), np.full_like(s, v)
            p1 = (u_, np.minimum(v_, s))
            p2 = (np.maximum(u_, s), np.minimum(v_, e))
            p3 = (np.maximum(u_, e), v_)
            w1, w3 = self._span(self.w, *p1), self._span(self.w, *p3)
            sw = self.w[v] - self.w[u]
            sy = self.y[v] - self.y[u]
            sx = fs * w1 + self._span(self.wi, *p2) + fe * w3
            sxx_ = fs * fs * w1 + self._span(self.wii, *p2) + fe * fe * w3
            sxy_ = fs * self._span(self.y, *p1) + self._span(self.yi, *p2) + fe * self._span(self.y, *p3)
            sxx = sxx + sxx_ - sx * sx / sw
            sxy = sxy + sxy_ - sx * sy / sw
            syy = syy + (self.yy[v] - self.yy[u]) - sy * sy / sw
        sxx = np.maximum(sxx, 1e-300)
        return np.maximum(syy - sxy * sxy / sxx, 0.0), sxy / sxx


def find(own: CleanSeries, proposal: Proposal, point_sigma: np.ndarray, cps: list[ChangePoint],
         m: catalogue.Metric | None, min_effect: float,
         settings: Settings) -> tuple[list[ChangePoint], list[Ramp], list[ChangePoint]]:
    """The changes that stay steps (on a creep: found again with the ramp taken out), the creeps,
    and the boundaries a creep replaces (module doc). ``point_sigma``: the search's per-point noise."""
    if not settings.creeps or not cps or proposal.frame is None or not proposal.z.size:
        return cps, [], []
    z, w = proposal.z, proposal.w
    sums = _Sums(z, w)
    n, penalty = z.size, proposal.frame.penalty
    logs = bool((own.medians > 0).all())
    steps: list[ChangePoint] = []
    explained: list[ChangePoint] = []
    ramps: list[Ramp] = []
    i = 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and np.sign(cps[j + 1].test.rel_change) == np.sign(cps[i].test.rel_change):
            j += 1
        a = cps[i - 1].index if i > 0 else 0
        b = cps[j + 1].index if j + 1 < len(cps) else n
        group = cps[i:j + 1]
        found = _ramp(own, sums, a, b, group, penalty, logs, m, min_effect, settings, proposal.frame, point_sigma)
        if found is None:
            steps += group
        else:
            ramp, on_top = found
            ramps.append(ramp)
            steps += on_top
            explained += group
        i = j + 1
    return steps, ramps, explained


def _ramp(own: CleanSeries, sums: _Sums, a: int, b: int, group: list[ChangePoint], penalty: float, logs: bool,
          m: catalogue.Metric | None, min_effect: float, settings: Settings, frame: Frame,
          point_sigma: np.ndarray) -> tuple[Ramp, list[ChangePoint]] | None:
    """The creep of one run of same-direction boundaries on the stretch [a, b) and the steps on top
    of it, or None when steps explain the stretch better (module doc)."""
    length = settings.creep_commits
    if b - a < length + 1:
        return None
    ks = [cp.index for cp in group]
    stair = _stair_error(sums, a, ks, b) / 2.0 + len(ks) * penalty
    grid = np.unique(np.linspace(a, b, min(GRID, b - a) + 1).round().astype(int))
    s, e = (x.ravel() for x in np.meshgrid(grid, grid, indexing="ij"))
    ok = e - s >= length
    s, e = s[ok], e[ok]
    if not s.size:
        return None
    kinks = math.log(max(own.medians.size, 2)) * ((s > a).astype(float) + (e < b).astype(float))

    def best(chosen: list[int]) -> tuple[float, int]:
        sse, _ = sums.fit([a, *sorted(chosen), b], s, e)
        cost = sse / 2.0 + penalty + kinks + len(chosen) * penalty
        k = int(np.argmin(cost))
        return float(cost[k]), k

    chosen: list[int] = []
    cost, at = best(chosen)
    while True:
        trials = [(best(chosen + [k]), k) for k in ks if k not in chosen]
        if not trials:
            break
        (c, where), k = min(trials)
        if c >= cost:
            break
        chosen, cost, at = chosen + [k], c, where
    if cost >= stair:
        return None
    start, end = int(s[at]), int(e[at])
    _, slope = sums.fit([a, *sorted(chosen), b], np.array([start]), np.array([end]))
    ramp = Ramp(start, min(end, own.medians.size - 1), float(slope[0]) * frame.unit, (), 0.0, 1.0, Kind.NONE)
    flat = ramp.detrended(own.medians, logs)
    on_top = [ChangePoint(cp.index + a, cp.range_start + a, cp.range_end + a, cp.test) for cp in
              Proposal(flat[a:b], to_scale(flat[a:b]), point_sigma[a:b], settings.search, frame=frame).validated(
                  m, min_effect, settings.search.alpha)]
    kept = tuple(cp.index for cp in on_top)
    trend = _trend(own.medians, flat, a, b, ramp, kept)
    move = math.expm1(ramp.slope * (ramp.end - ramp.start)) if logs else ramp.slope * (ramp.end - ramp.start) / abs(
        float(np.median(own.medians[a:b])) or 1.0)
    if trend > settings.search.alpha or abs(move) < min_effect:
        return None
    level = float(own.medians[ramp.start])
    kind = kind_of(m, level, level * (1.0 + move)) if m is not None else Kind.CHANGE
    return Ramp(ramp.start, ramp.end, ramp.slope, kept, move, trend, kind), on_top


def _stair_error(sums: _Sums, a: int, ks: Sequence[int], b: int) -> float:
    edges = [a, *ks, b]
    total = 0.0
    for u, v in zip(edges[:-1], edges[1:]):
        sw, sy = sums.w[v] - sums.w[u], sums.y[v] - sums.y[u]
        total += (sums.yy[v] - sums.yy[u]) - sy * sy / sw
    return max(total, 0.0)


def _step_holds(flat: np.ndarray, a: int, k: int, b: int, m: catalogue.Metric | None, min_effect: float, alpha: float,
                settings: Settings) -> bool:
    """The search's boundary test at ``k`` on medians with the ramp taken out."""
    window = settings.search.window
    return compare(flat[max(a, k - window):k], flat[k:min(b, k + window)], m, alpha=alpha,
                   min_effect=min_effect).verdict is Verdict.DIFFERENT


def _trend(medians: np.ndarray, flat: np.ndarray, a: int, b: int, ramp: Ramp, steps: Sequence[int]) -> float:
    """Kendall's tau test of the medians over the ramp's commits against their order, each kept
    step's move taken out (its size read on the medians with the ramp taken out, between its
    neighbouring steps)."""
    logs = bool((medians > 0).all())
    to = np.log if logs else (lambda v: np.asarray(v, dtype=float))
    y, level = to(medians[a:b]).copy(), to(flat[a:b])
    edges = [0, *(k - a for k in steps), b - a]
    for i, k in enumerate(edges[1:-1], start=1):
        y[k:] -= float(np.median(level[k:edges[i + 1]]) - np.median(level[edges[i - 1]:k]))
    lo, hi = ramp.start - a, ramp.end + 1 - a
    y = y[max(0, lo):max(0, hi)]
    if y.size < 3:
        return 1.0
    from scipy import stats
    return float(stats.kendalltau(np.arange(y.size), y).pvalue)


def suspect_holds(ramps: Sequence[Ramp], own: CleanSeries, cp: ChangePoint, m: catalogue.Metric | None,
                  min_effect: float, settings: Settings) -> bool:
    """A suspect inside a creep is one when it also passes its test at ``suspect_alpha`` with the
    ramp taken out; elsewhere it is one as it is."""
    logs = bool((own.medians > 0).all())
    for ramp in ramps:
        if ramp.holds(cp.index):
            flat = ramp.detrended(own.medians, logs)
            return _step_holds(flat, 0, cp.index, len(own), m, min_effect, settings.suspect_alpha, settings)
    return True
