"""A pull request's head against its merge-base on one machine x config, over its interleaved sessions.

Each session measures the two commits A B A B ... on one agent (the claim leases both jobs), so
both runs of a pair share the host's moment. On a noisy backend a session takes at least the pairs
whose test can reach the first look's level for the strictest of Holm's steps over every metric
perfci alerts on (:func:`session_pairs`). The calls are :func:`perfci_core.analysis.pull_verdict.verdicts`:
each look at its share of alpha, one level over all alerting metrics of all the machine's configs,
"unchanged" when two one-sided tests show every metric within its margin, else "undecided" (another
session, up to ``Settings.pull_sessions``). ``sim`` decides on one session by the exact-change rule.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from sqlalchemy.orm import Session

from perfci_core import metrics as catalogue
from perfci_core.analysis.min_effect import min_effect_of_series
from perfci_core.analysis.paired import least_kept, min_attainable_p
from perfci_core.analysis.pull_verdict import MetricSessions, look_level, verdicts

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
    verdict: str  # regression / improvement / undecided (pull_verdict.Call)
    why: str = ""


class Measured(NamedTuple):
    """One session: its pair of jobs and their successful runs."""

    pair: pull_sql.Pair
    base: pull_sql.RunValues
    head: pull_sql.RunValues

    @property
    def interleaved(self) -> bool:
        return self.head.paired_with == self.pair.base_job and self.base.paired_with == self.pair.head_job


def session_pairs(session: Session, machine_id: int, config_id: int, sessions: int) -> int | None:
    """The pairs of one session on a noisy backend: at least those whose test can reach the first look's
    level at Holm's strictest step over every alerting metric of the backend, in each of the machine's enabled
    configs, with the most pairs left out as bursts. None: the config's repetitions (``sim``: one
    decides). An ``auto`` config runs on the best backend the machine's agents offer."""
    config = config_sql.by_id(session, config_id)
    if config is None:
        return None
    backend = machine_sql.auto_backend(session, machine_id) if config.backend == "auto" else config.backend
    if backend not in NOISY:
        return None
    family = sum(1 for m in catalogue.CATALOGUE.values() if m.alerts and catalogue.Backend(backend) in m.backends)
    strictest = look_level(1, sessions) / max(1, family) / max(1, len(config_sql.enabled_ids(session)))
    pairs = config.repetitions
    while min_attainable_p(least_kept(pairs)) > strictest:
        pairs += 1
    return pairs


def compare_sessions(session: Session, pr: PullRequest, measured: list[Measured], config: str, sessions: int,
                     configs: int = 1, equivalence: float = 0.0) -> tuple[list[Row], int, float]:
    """The rows of the metrics that moved (or stayed undecided) over every session so far, how many
    were shown unchanged, and the widest margin they were shown within (relative). ``configs``: the
    machine's configs this pull request is measured on, which share the look's level."""
    interleaved = all(m.interleaved for m in measured)
    medians: dict[str, tuple[dict[str, float], dict[str, float]]] = defaultdict(lambda: ({}, {}))
    keys = set.intersection(*(set(m.base.values) & set(m.head.values) for m in measured))
    evidence: list[MetricSessions] = []
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
        effect = 0.0 if backend == catalogue.Backend.SIM.value else min_effect_of_series(
            _base_series(session, pr, measured[0].pair, metric, backend), f"{pr.base_branch} {metric}/{backend}").value
        evidence.append(MetricSessions(config, metric, backend, a, b, interleaved and a.size == b.size, effect))
    rows, same, margin = [], 0, 0.0
    for v in verdicts(evidence, len(measured), sessions, 1.0 / max(1, configs), equivalence):
        e = v.sessions
        if v.call == "unchanged":
            same += 1
            margin = max(margin, v.margin) if e.alerts else margin
            continue
        rows.append(Row(config, e.metric, e.backend, v.test.before_median, v.test.after_median, v.test.rel_change * 100.0,
                        v.call))
    whys = Whys(session, measured[0].base.run_id, measured[0].head.run_id, medians)
    for row in rows:  # each row explains its own metric
        row.why = whys.of(row.metric, row.backend)
    return rows, same, margin


def _finite_pairs(base: list[float | None], head: list[float | None], interleaved: bool) -> tuple[np.ndarray, np.ndarray]:
    if interleaved and len(base) == len(head):  # keep the pairs together: drop a pair with a missing side
        kept = [(x, y) for x, y in zip(base, head) if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)]
        return np.array([x for x, _ in kept], dtype=float), np.array([y for _, y in kept], dtype=float)
    clean = lambda v: np.array([x for x in v if x is not None and math.isfinite(x)], dtype=float)  # noqa: E731
    return clean(base), clean(head)


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
