"""Whose change an alert group is: a change belongs to the first commit that carries it.

A group's first bad commit may only carry a change another commit made (docs/forges.md, "Whose
change it is"):

- **a merge** (more than one parent) carries whatever its merged-in parents carry; its own change is
  what it differs from *both* parents. The group is the merged-in parent's when that parent, measured
  on the same machine and config, already stands at the changed level of every metric of the group
  (nearer the level after the change than before it). While a merged-in parent that perfci knows is
  not measured, the group waits for it (``awaiting_commit_id``; its commits' verdicts are pending);
- **a copy** (a cherry-pick, a rebase) has the same git patch id as the commit it copies: the group
  is a sighting of the original's group on that machine, when the original is still on its branch;
- **the same commit on another branch** (a branch rebased onto it): the group made first, on the
  branch that had the commit first, is the change's; a later one is its sighting.

A sighting keeps its rows (detection finds the change again at every run) but names its origin
(``origin_commit_id``, and ``origin_group_id`` when the origin has a group of its own): it fails no
status, is not listed as a new alert, and shows on the origin's page.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence

import numpy as np
from sqlalchemy.orm import Session

from ..jobs import service as job_service
from ..models import Alert, AlertGroup, Commit
from ..settings import Settings
from . import repository as alert_sql

log = logging.getLogger(__name__)


def classify(session: Session, group: AlertGroup, members: Sequence[Alert], settings: Settings) -> None:
    """Set whose change the group is (see the module doc)."""
    origin, origin_group, awaiting = None, None, None
    commit = session.get(Commit, group.first_bad_commit_id)
    assert commit is not None, "a group is deleted with its first bad commit"
    if (first := alert_sql.group_of_same_commit(session, group)) is not None:  # the same commit, alerted on another branch first
        origin, origin_group = commit.id, first.id
    elif len(commit.parents) > 1:
        for parent in alert_sql.commits_with_shas(session, commit.repository_id, commit.parents[1:]):
            carried = _carries(session, group.machine_id, parent, members, settings)
            if carried is None:
                awaiting = parent.id
                break
            if carried:
                origin, origin_group = parent.id, alert_sql.group_carried_by(session, group, parent.id, _keys(members))
                break
    elif commit.patch_id:
        twin = alert_sql.group_of_copy(session, group, commit)
        if twin is not None:
            origin, origin_group = twin.first_bad_commit_id, twin.id
    if (group.origin_commit_id, group.origin_group_id, group.awaiting_commit_id) != (origin, origin_group, awaiting):
        log.info("alert group %s at commit %s: origin commit %s (group %s), awaiting %s", group.id, commit.sha[:12], origin,
                 origin_group, awaiting)
        group.origin_commit_id, group.origin_group_id, group.awaiting_commit_id = origin, origin_group, awaiting


def _keys(members: Iterable[Alert]) -> set[tuple[int, str, str]]:
    return {(a.config_id, a.metric, a.backend) for a in members}


def _carries(session: Session, machine_id: int, parent: Commit, members: Sequence[Alert], settings: Settings) -> bool | None:
    """Whether the merged-in ``parent`` already stands at the changed level of every member (None:
    it is not measured there yet; its measurement is queued if it had none)."""
    for config_id in sorted({a.config_id for a in members}):
        values = alert_sql.own_values(session, parent.id, machine_id, config_id)
        mine = [a for a in members if a.config_id == config_id]
        if not all((a.metric, a.backend) in values for a in mine):
            job_service.schedule_for(session, [parent.id], [machine_id], [config_id], settings)
            return None
        for alert in mine:
            level = float(np.median(values[(alert.metric, alert.backend)]))
            if not math.isfinite(level) or abs(level - alert.after_median) > abs(level - alert.before_median):
                return False
    return True


def recheck_awaiting(session: Session, machine_id: int, measured: Iterable[int], settings: Settings) -> set[int]:
    """The groups of the machine that waited for one of these (now measured) commits are classified
    again; returns the commits whose verdicts follow them."""
    commits: set[int] = set()
    for group in alert_sql.groups_awaiting(session, machine_id, list(measured)):
        classify(session, group, alert_sql.alerts_of_groups(session, [group.id]), settings)
        commits.update(alert_sql.range_commits(session, group))
    return commits


def reclassify(session: Session, groups: Iterable[AlertGroup], settings: Settings) -> set[int]:
    """Classify these groups again (their origin's group was dropped: a force push took the
    original away); returns the commits whose verdicts follow them."""
    commits: set[int] = set()
    for group in groups:
        classify(session, group, alert_sql.alerts_of_groups(session, [group.id]), settings)
        commits.update(alert_sql.range_commits(session, group))
    return commits
