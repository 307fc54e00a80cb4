"""A pull request's head against its merge-base on one machine x config, over its interleaved sessions.

Each session measures the two commits A B A B ... on one agent (the claim leases both jobs), so
both runs of a pair share the host's moment. On a noisy backend a session takes at least the
pairs whose signed-rank test can reach its look's level (a config's 5 never can: 2 / 2^5 = 0.06).
While a metric perfci alerts on stays undecided, the head gets another session, up to
``Settings.pull_sessions``; every look tests all the pairs so far, at its share of alpha under the
Pocock-type spending bisect uses (:mod:`perfci_core.analysis.sequential`), so the looks together
call an unchanged head DIFFERENT at most alpha of the time. ``sim`` decides on one session by the
exact-change rule.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from sqlalchemy.orm import Session

from perfci_core import metrics as catalogue
from perfci_core.analysis.compare import DEFAULT_ALPHA, Comparison, Kind, Verdict, compare
from perfci_core.analysis.min_effect import min_effect_of_series
from perfci_core.analysis.paired import paired_compare, pairs_needed
from perfci_core.analysis.sequential import look_alpha

from ..configs import repository as config_sql
from ..machines import repository as machine_sql
from ..models import PullRequest
from ..repos import repository as repo_sql
from ..results import repository as result_sql
from . import repository as pull_sql
from .why import Whys

SERIES_COMMITS = 50  # base-branch commits the minimum effect is learned from
NOISY = (catalogue.Backend.PMU.value, catalogue.Backend.TSC.value)


@dataclass
class Row:
    """One metric of one machine x config that moved (or could not be decided)."""

    config: str
    metric: str
    backend: str
    base: float
    head: float
    change_pct: float
    verdict: str  # regression / improvement / undecided
    why: str = ""


class Measured(NamedTuple):
    """One session: its pair of jobs and their successful runs."""

    pair: pull_sql.Pair
    base: pull_sql.RunValues
    head: pull_sql.RunValues

    @property
    def interleaved(self) -> bool:
        return self.head.paired_with == self.pair.base_job and self.base.paired_with == self.pair.head_job


def level(look: int, sessions: int) -> float:
    """The alpha of the ``look``-th session's test (1-based) when a head may take ``sessions``."""
    return look_alpha(DEFAULT_ALPHA, min(look, sessions), sessions)


def session_pairs(session: Session, machine_id: int, config_id: int, sessions: int) -> int | None:
    """The pairs of one session on a noisy backend: at least those whose signed-rank test can reach the first
    look's level (9 when a head may take 3 sessions). None: the config's repetitions (``sim``: one decides). An
    ``auto`` config runs on the best backend the machine's agents offer."""
    config = config_sql.by_id(session, config_id)
    if config is None:
        return None
    backend = machine_sql.auto_backend(session, machine_id) if config.backend == "auto" else config.backend
    if backend not in NOISY:
        return None
    return max(config.repetitions, pairs_needed(level(1, sessions)))


def compare_sessions(session: Session, pr: PullRequest, measured: list[Measured], config: str,
                     sessions: int) -> tuple[list[Row], int]:
    """The rows of the metrics that moved (or stayed undecided) over every session so far, and how
    many stayed the same."""
    interleaved = all(m.interleaved for m in measured)
    alpha = level(len(measured), sessions)
    rows, same = [], 0
    medians: dict[str, tuple[dict[str, float], dict[str, float]]] = defaultdict(lambda: ({}, {}))
    keys = set.intersection(*(set(m.base.values) & set(m.head.values) for m in measured))
    for (metric, backend) in sorted(keys):
        if metric not in catalogue.CATALOGUE:
            continue
        sides = [_finite_pairs(m.base.values[(metric, backend)], m.head.values[(metric, backend)], interleaved) for m in measured]
        a, b = np.concatenate([x for x, _ in sides]), np.concatenate([y for _, y in sides])
        if not a.size or not b.size:
            continue
        medians[backend][0][metric], medians[backend][1][metric] = float(np.median(a)), float(np.median(b))
        if not catalogue.CATALOGUE[metric].alerts:
            continue  # context (4K aliases move with layout): named in the whys it explains, never a row
        result = _test(session, pr, measured[0].pair, metric, backend, a, b, interleaved, alpha)
        if result.verdict is Verdict.DIFFERENT:
            verdict = "regression" if result.kind is Kind.REGRESSION else "improvement"
        elif result.verdict is Verdict.UNKNOWN and backend != catalogue.Backend.SIM.value:
            verdict = "undecided"
        else:
            same += 1
            continue
        rows.append(Row(config, metric, backend, result.before_median, result.after_median, result.rel_change * 100.0, verdict))
    whys = Whys(session, measured[0].base.run_id, measured[0].head.run_id, medians)
    for row in rows:  # each row explains its own metric
        row.why = whys.of(row.metric, row.backend)
    return rows, same


def _finite_pairs(base: list[float | None], head: list[float | None], interleaved: bool) -> tuple[np.ndarray, np.ndarray]:
    if interleaved and len(base) == len(head):  # keep the pairs together: drop a pair with a missing side
        kept = [(x, y) for x, y in zip(base, head) if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)]
        return np.array([x for x, _ in kept], dtype=float), np.array([y for _, y in kept], dtype=float)
    clean = lambda v: np.array([x for x in v if x is not None and math.isfinite(x)], dtype=float)  # noqa: E731
    return clean(base), clean(head)


def _test(session: Session, pr: PullRequest, pair: pull_sql.Pair, metric: str, backend: str, a: np.ndarray, b: np.ndarray,
          interleaved: bool, alpha: float) -> Comparison:
    """The paired test on interleaved sides (two-sample otherwise) at ``alpha``, at the minimum effect
    learned from the base branch's series on this machine x config; the exact rule on sim."""
    if backend == catalogue.Backend.SIM.value:
        return compare(a, b, metric, backend=backend)
    effect = min_effect_of_series(_base_series(session, pr, pair, metric, backend), f"{pr.base_branch} {metric}/{backend}").value
    if interleaved and a.size == b.size:
        return paired_compare(a, b, metric, backend=backend, alpha=alpha, min_effect=effect)
    return compare(a, b, metric, backend=backend, alpha=alpha, min_effect=effect)


def _base_series(session: Session, pr: PullRequest, pair: pull_sql.Pair, metric: str, backend: str) -> list[tuple[str, list[float]]]:
    """The base branch's last measured commits up to the merge-base: the noise the minimum effect is learned from."""
    branch = repo_sql.branch(session, pr.repository_id, pr.base_branch)
    at = repo_sql.position_of(session, branch.id, pr.base_commit_id) if branch is not None and pr.base_commit_id else None
    if branch is None or at is None:
        return []
    points: dict[int, tuple[str, list[float]]] = {}
    for v in result_sql.series_values(session, branch.id, pair.machine_id, pair.config_id, metric, backend,
                                      max(0, at - SERIES_COMMITS), at):
        points.setdefault(v.position, (v.sha, []))[1].append(v.value)
    return [points[p] for p in sorted(points)]
