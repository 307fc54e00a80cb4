"""Suspects: places where a change is likely but the commits' own measurements cannot confirm it
(docs/design.md, "Deciding a regression"). A boundary of the suspects' own search (the newest
``suspect_tail`` commits at ``suspect_penalty``, and again on each commit's best repetition over
the newest ``best_tail``) that passes its test at ``suspect_alpha`` with the learned minimum effect,
and that no change covers, is a suspect; its confirmation measures its bracket."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from perfci_core import metrics as catalogue

from ..changepoints import ChangePoint, Proposal
from ..compare import Kind
from ..noise import diff_sigma
from ..series import CleanSeries, to_scale
from .confirmation import Bracket
from .findings import Suspect
from .settings import Settings

NOISE_FLOOR = 1e-6  # relative; a noisy-backend series that never moved still gets a finite scale


def loose_boundaries(own: CleanSeries, proposal: Proposal, m: catalogue.Metric | None, min_effect: float,
                     settings: Settings) -> list[ChangePoint]:
    """The boundaries of the suspects' searches (medians, then best repetitions) that pass their
    test at ``suspect_alpha``, in series order."""
    if settings.max_suspects <= 0 or settings.suspect_alpha <= settings.search.alpha:
        return []
    if settings.suspect_penalty != settings.search.penalty_factor:
        proposal = proposal.with_tail(replace(settings.search, penalty_factor=settings.suspect_penalty),
                                      settings.suspect_tail)
    loose = proposal.validated(m, min_effect, settings.suspect_alpha)
    best = _best_proposal(own, m, settings)
    if best is not None:
        extra = [cp for cp in best.validated(m, min_effect, settings.suspect_alpha)
                 if all(abs(cp.index - x.index) > 1 for x in loose)]
        loose = sorted(loose + extra, key=lambda cp: cp.index)
    return loose


def _best_proposal(own: CleanSeries, m: catalogue.Metric | None, settings: Settings) -> Proposal | None:
    """The suspects' search over the newest commits again, on each commit's best repetitions
    (:meth:`..series.CleanSeries.bests`) instead of its median: on a shared host a step hides in
    the median of three runs when one or two of them were slowed down, never in the fastest."""
    if not settings.best_runs or m is None or len(own) < 2 * settings.search.min_segment:
        return None
    values = own.bests(m.direction is catalogue.Direction.LOWER_IS_BETTER)
    scaled = to_scale(values)
    sigma = max(diff_sigma(scaled), NOISE_FLOOR)
    jobs = own.job_counts()
    point_sigma = sigma * np.sqrt(float(np.median(jobs)) / jobs)
    return Proposal(values, scaled, point_sigma, replace(settings.search, penalty_factor=settings.suspect_penalty),
                    tail=settings.best_tail)


def suspects(own: CleanSeries, loose: Sequence[ChangePoint], covered: Sequence[tuple[int, int]],
             brackets: Sequence[Bracket], unpinned: Sequence[ChangePoint], name: str, be: catalogue.Backend,
             settings: Settings) -> tuple[Suspect, ...]:
    """The suspects: the boundaries of ``loose`` that no change covers (``covered``: first-bad
    ranges) and no bracket has decided, each with its bracket (the one its sessions are measured
    on, or a new one around its located range); and the ``unpinned`` changes with the commits
    around them. Strongest first, at most ``max_suspects``."""
    if settings.max_suspects <= 0 or settings.suspect_alpha <= settings.search.alpha:
        return ()
    n = len(own)
    out: list[Suspect] = []
    for cp in loose:
        if any(lo - 1 <= cp.index <= hi + 1 for lo, hi in covered):
            continue
        held = [br for br in brackets if br.holds(cp.index)]
        if any(br.state in ("confirmed", "rejected") for br in held):
            continue
        if held:
            br = max(held, key=lambda x: x.looks)
            a, b, looks = br.before, br.after, br.looks
        else:  # the located range (at most a commit either side of the suspect), one commit wider each way
            a = max(0, max(cp.range_start, cp.index - 1) - 1 - settings.bracket_slack)
            b = min(n - 1, min(cp.range_end, cp.index + 1) + settings.bracket_slack)
            looks = 0
        out.append(Suspect("unconfirmed", _kind(cp), name, be.value, own.commits[cp.index],
                           (own.commits[a], own.commits[b]), cp.test.rel_change, cp.test.p_value, looks))
    for cp in unpinned:
        around = _around(n, cp.index, cp.range_start, cp.range_end, settings.suspect_commits)
        out.append(Suspect("unpinned", _kind(cp), name, be.value, own.commits[cp.index],
                           tuple(own.commits[i] for i in around), cp.test.rel_change, cp.test.p_value))
    out.sort(key=lambda x: (x.p_value, -abs(x.rel_change)))
    return tuple(out[:settings.max_suspects])


def _kind(cp: ChangePoint) -> Kind:
    return cp.test.kind if cp.test.kind is not Kind.NONE else Kind.CHANGE


def _around(n: int, k: int, lo: int, hi: int, most: int) -> range:
    """Commits to re-measure for a change at ``k`` located in [lo, hi]: the commit before the range
    to the commit after it, and at least ``k - 2`` to ``k + 2``, at most ``most`` of them centred
    on ``k``."""
    lo, hi = max(0, min(lo, k - 1) - 1), min(n - 1, max(hi, k + 1) + 1)
    half = max(1, most // 2)
    lo, hi = max(lo, k - half), min(hi, k + half)
    return range(lo, hi + 1)
