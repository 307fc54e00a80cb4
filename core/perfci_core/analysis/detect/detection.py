"""``detect``: the changes, suspects and creeps of one series (docs/design.md, "Deciding a
regression", where each rule and its level are explained)."""

from __future__ import annotations

from bisect import bisect_left
from typing import Iterable, Sequence

import numpy as np

from perfci_core import metrics as catalogue

from ..changepoints import Frame, Proposal, SearchMemo, find_exact_changes
from ..noise import diff_sigma, learned_min_effect
from ..series import CleanSeries, Point, clean, resolve_metric, to_scale
from . import confirmation, creep, locate
from .findings import Creep, DetectionResult
from .settings import Settings
from .suspects import NOISE_FLOOR, loose_boundaries, suspects


def _metric(metric: str | catalogue.Metric, settings: Settings, notes: list[str]) -> tuple[str, catalogue.Metric | None]:
    if isinstance(metric, catalogue.Metric):
        return metric.name, metric
    try:
        return metric, resolve_metric(metric)
    except KeyError:
        if settings.unknown_metric == "report":
            notes.append(f"unknown metric {metric!r}: changes reported without a better-direction")
            return metric, None
        raise


def series_noise(s: CleanSeries, learn: slice = slice(None)) -> tuple[float, np.ndarray]:
    """Relative per-commit-median noise of a series and each point's noise on the search scale,
    both learned on the points ``learn`` (default: all). A point with fewer repetitions than is
    typical for the series is noisier: its sigma is scaled by sqrt(typical count / its count)."""
    scaled = to_scale(s.medians)
    sigma = max(diff_sigma(scaled[learn]), NOISE_FLOOR)
    typical = float(np.median(s.counts[learn]))
    return sigma, sigma * np.sqrt(typical / s.counts)


def window_start(position: int, block: int) -> int:
    """First position of a window that may start at ``position`` at the earliest: the next
    multiple of ``block`` (incremental.py)."""
    return -(-position // block) * block if block > 0 else position


def learned_part(positions: Sequence[int], block: int) -> int:
    """How many leading points the main search learns its frame on: those before the newest
    block, or every point while fewer than four blocks of them are there."""
    if block <= 0 or not positions:
        return len(positions)
    stop = bisect_left(positions, positions[-1] // block * block)
    return stop if stop >= 4 * block else len(positions)


def detect(
    series: CleanSeries | Sequence[Point | tuple[str, float | Iterable[float]]],
    metric: str | catalogue.Metric,
    backend: catalogue.Backend | str,
    settings: Settings = Settings(),
    memo: SearchMemo | None = None,
) -> DetectionResult:
    """Regressions and improvements of one series (commit order, every repetition; jobs of a
    confirmation session carry its key, :class:`..series.Point`). ``memo``: the series' main
    search at its previous detection, updated (incremental.py)."""
    notes: list[str] = []
    name, m = _metric(metric, settings, notes)
    be = catalogue.Backend(backend)
    full = series if isinstance(series, CleanSeries) else clean(series)
    notes.extend(full.notes)
    s = full.own()  # the commits' own jobs: what locates a change; the sessions only confirm
    if len(s) < 2:
        notes.append(f"{len(s)} usable point(s): no verdict before two commits are measured")
        return DetectionResult(name, be.value, (), len(s), 0.0, 0.0, tuple(notes))
    if be is catalogue.Backend.SIM:
        return _exact(s, name, be, m, settings, notes)

    noise, point_sigma = series_noise(s)
    min_effect = learned_min_effect(noise, settings.min_change, settings.noise_factor)
    scaled = to_scale(s.medians)
    learned = learned_part(s.positions, settings.block)
    frame = None  # learned on every point
    if learned < len(s):
        _, point_sigma = series_noise(s, slice(learned))
        frame = Frame.of(scaled[:learned], point_sigma[:learned], settings.search)
    proposal = Proposal(s.medians, scaled, point_sigma, settings.search, frame=frame, memo=memo)  # one search, two alphas
    cps, ramps, explained = creep.find(s, proposal, point_sigma, proposal.validated(m, min_effect, settings.search.alpha),
                                       m, min_effect, settings)
    bounds = [cp.index for cp in cps]
    changes, unpinned = [], []
    for i, cp in enumerate(cps):
        a = bounds[i - 1] if i > 0 else 0
        b = bounds[i + 1] if i + 1 < len(bounds) else len(s)
        check, pinned = locate.pin(s, a, cp.index, b, m, min_effect, settings)
        changes.append(locate.change_at(s, cp, name, be, check, pinned))
        if not pinned:
            unpinned.append(cp)
    brackets = confirmation.judge(confirmation.own_sessions(full, s), s, bounds, m, min_effect, settings)
    for bracket in brackets:
        if bracket.state == "confirmed":
            cp, start, stop = confirmation.located(s, bracket, bounds, settings)
            check, pinned = locate.pin(s, start, cp.index, stop, m, min_effect, settings)
            changes.append(locate.change_at(s, cp, name, be, check, pinned, widen=0, confirmed=True))
    changes.sort(key=lambda c: c.index)
    covered = [(cp.range_start, cp.range_end) for cp in cps + explained]
    loose = [cp for cp in loose_boundaries(s, proposal, m, min_effect, settings)
             if creep.suspect_holds(ramps, s, cp, m, min_effect, settings)]
    found = suspects(s, loose, covered, brackets, unpinned, name, be, settings)
    creeps = tuple(Creep(r.kind, name, be.value, s.positions[r.start], s.positions[r.end], s.commits[r.start],
                         s.commits[r.end], r.rel_change, r.p_value) for r in ramps)
    return DetectionResult(name, be.value, tuple(changes), len(s), noise, min_effect, tuple(notes), found, creeps)


def _exact(s: CleanSeries, name: str, be: catalogue.Backend, m: catalogue.Metric | None, settings: Settings,
           notes: list[str]) -> DetectionResult:
    """Deterministic series: the exact-change rule between consecutive commits."""
    cps = find_exact_changes(s.medians, m, settings.tolerance)
    changes = tuple(locate.change_at(s, cp, name, be, None, pinned=True) for cp in cps)
    for i, x in enumerate(s.samples):
        if np.ptp(x) > settings.tolerance * max(abs(float(np.median(x))), 1e-300):
            notes.append(f"{s.commits[i]}: deterministic repetitions differ (median used)")
    return DetectionResult(name, be.value, changes, len(s), 0.0, settings.tolerance, tuple(notes))
