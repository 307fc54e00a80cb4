"""Creeps in production: what detection reports as a slow move over a range of commits
(analysis.detect.Creep) is kept per series, apart from alerts and from the commits' verdicts.

Each detection of a branch x machine x config replaces, for every series it analysed, the stored
creeps whose last commit lies in its window with those it sees now; older ones stay as history.
A creep seen again (same direction, overlapping range) keeps its row and its first-seen time,
with its range and size brought up to date."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from perfci_core.analysis import Creep as Found

from ..models import Creep

log = logging.getLogger(__name__)

Series = tuple[str, str]  # (metric, backend)
_DIRECTIONS = {"regression", "improvement"}


def record(session: Session, branch_id: int, machine_id: int, config_id: int, seen: Mapping[Series, Sequence[Found]],
           at: Mapping[str, tuple[int, int]], own_from: int | None = None) -> int:
    """Store the creeps of the analysed series ``seen`` (every series detection analysed, empty
    when it saw none); ``at``: the window's commits (sha -> (commit id, position)). Creeps that end
    before ``own_from`` are the base branch's. Returns how many creeps were new."""
    if not seen:
        return 0
    position = {commit_id: pos for commit_id, pos in at.values()}
    stored: dict[Series, list[Creep]] = {}
    for row in session.scalars(select(Creep).where(Creep.branch_id == branch_id, Creep.machine_id == machine_id,
                                                   Creep.config_id == config_id).order_by(Creep.id)):
        if row.last_commit_id in position:  # a creep before the window is history: kept as it is
            stored.setdefault((row.metric, row.backend), []).append(row)
    new = 0
    for series, creeps in seen.items():
        rows = stored.get(series, [])
        for creep in creeps:
            first, last = at[creep.first], at[creep.last]
            if own_from is not None and last[1] < own_from:
                continue
            direction = creep.kind.value if creep.kind.value in _DIRECTIONS else "change"
            same = next((r for r in rows if r.direction == direction
                         and position.get(r.first_commit_id, -1) <= last[1] and position[r.last_commit_id] >= first[1]), None)
            if same is None:
                session.add(Creep(branch_id=branch_id, machine_id=machine_id, config_id=config_id, metric=series[0],
                                  backend=series[1], first_commit_id=first[0], last_commit_id=last[0], direction=direction,
                                  change_pct=creep.percent, p_value=creep.p_value))
                new += 1
                log.info("detection: creep of %s/%s %+.2f%% over commits %s..%s (branch %s x machine %s x config %s), "
                         "no single commit to blame", *series, creep.percent, creep.first[:12], creep.last[:12],
                         branch_id, machine_id, config_id)
                continue
            rows.remove(same)
            same.first_commit_id, same.last_commit_id = first[0], last[0]
            same.change_pct, same.p_value = creep.percent, creep.p_value
        for gone in rows:  # in the window, and no longer seen there
            log.info("detection: creep of %s/%s %+.2f%% (branch %s x machine %s x config %s) no longer seen", *series,
                     gone.change_pct, branch_id, machine_id, config_id)
            session.delete(gone)
    return new

