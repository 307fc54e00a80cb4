"""A commit's series verdict on a machine, decided from its own measurement and the alerts, and
handed to the forge (:func:`..forge.statuses.write_verdicts` stores and delivers it).

Only a commit with its own series jobs on the machine (round 0: a push's, a backfill's, a bisect
step's) gets one, and only once they are measured can it be green or red (docs/forges.md):

- ``pending`` while any of them is queued or running (never green before measured);
- ``neutral`` when none of them produced a result (it did not build, its runs failed);
- ``failure`` while an untriaged regression alert group of that machine implicates the commit
  (it lies in the group's range, last good .. first bad) and the change is the commit's own;
- ``pending`` while such a group waits for a merged-in parent's measurement to tell whose change
  it is, or while a pending suspect of that machine names it (its confirmation rounds decide);
- ``success`` naming the origin when the only such groups are later sightings of a change another
  commit carries first (:mod:`.origins`: a merge of it, a copy of it);
- then by its baseline: ``success`` when an earlier commit of one of its branches is measured on
  the machine (there was something to compare with, and nothing of its own moved), ``pending``
  while one is being measured, ``neutral`` when none is or will be ("no baseline").
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from sqlalchemy.orm import Session

from perfci_core.metrics import change_text

from ..forge.statuses import SERIES, write_verdicts
from ..jobs.service import measuring
from ..machines import repository as machine_sql
from ..models import AlertGroup, BenchConfig, CommitState, Suspect
from ..settings import Settings
from . import repository as alert_sql

NO_REGRESSION = "no untriaged performance regression"
NO_BASELINE = "no baseline yet"  # decided again by detection on its branch: an earlier commit may be measured or placed since


def record_verdicts(session: Session, machine_id: int, commit_ids: Iterable[int], settings: Settings) -> list[int]:
    """Write the series verdict of each commit on the machine; queue a post for each one that
    changed. Set-based: one query for the commits' own jobs, one for the implicating groups of
    every commit, one for the pending suspects, one for the baselines, then :func:`write_verdicts`.
    Returns the ids of the statuses that will be posted."""
    own = alert_sql.own_measurements(session, sorted(set(commit_ids)), machine_id)
    ids = sorted(own)  # a commit without its own measurement here (a fork's head, a merge-base) has no series verdict
    if not ids:
        return []
    machine = machine_sql.name_of(session, machine_id)
    groups_of = alert_sql.implicating_groups_by_commit(session, ids, machine_id)
    suspects_of: dict[int, list[Suspect]] = {}
    for suspect in alert_sql.pending_suspects(session, ids, [machine_id]):
        for commit_id in {suspect.suspect_commit_id, *suspect.commit_ids}:
            suspects_of.setdefault(commit_id, []).append(suspect)
    baselines = alert_sql.baselines(session, ids, machine_id)
    named: dict[tuple[int, ...], str] = {}  # a batch's commits mostly share the same few groups
    wanted: dict[int, tuple[CommitState, str]] = {}
    for commit_id in ids:
        mine = own[commit_id]
        groups = groups_of.get(commit_id, [])
        if mine.active:
            wanted[commit_id] = measuring(machine)
        elif not mine.done:
            wanted[commit_id] = (CommitState.NEUTRAL, f"not measured on {machine}: {mine.failure}")
        elif own_groups := [g for g in groups if g.origin_commit_id is None and g.awaiting_commit_id is None]:
            key = tuple(g.id for g in own_groups)
            if key not in named:
                named[key] = _name_regression(session, own_groups)
            wanted[commit_id] = (CommitState.FAILURE, named[key])
        elif awaiting := [g for g in groups if g.awaiting_commit_id is not None]:
            sha = alert_sql.commits_by_id(session, [awaiting[0].awaiting_commit_id])[awaiting[0].awaiting_commit_id].sha
            wanted[commit_id] = (CommitState.PENDING, f"measuring its merged-in parent {sha[:12]}: whose change it is")
        elif copies := _untriaged_copies(session, groups):  # the same change landed again: it still costs what it did
            wanted[commit_id] = (CommitState.FAILURE, copies)
        elif commit_id in suspects_of:
            wanted[commit_id] = (CommitState.PENDING, _name_suspect(suspects_of[commit_id]))
        else:
            baseline = baselines.get(commit_id)
            if groups:  # every implicating group is a later sighting of another commit's change
                wanted[commit_id] = (CommitState.SUCCESS, _name_sighting(session, groups))
            elif baseline is not None and baseline.measured:
                wanted[commit_id] = (CommitState.SUCCESS, NO_REGRESSION)
            elif baseline is not None and baseline.waiting_for:
                wanted[commit_id] = (CommitState.PENDING, f"waiting for its baseline {baseline.waiting_for[:12]} to be measured")
            else:
                wanted[commit_id] = (CommitState.NEUTRAL, f"{NO_BASELINE}: no earlier commit of its branch measured on {machine}")
    return write_verdicts(session, machine_id, SERIES, wanted, settings)


def _name_regression(session: Session, groups: list[AlertGroup]) -> str:
    """"regression: ipp +2.9% (self-64B, sim), alert 7" — the largest regressing metric first."""
    alerts = [a for a in alert_sql.alerts_of_groups(session, [g.id for g in groups]) if a.direction == "regression"]
    if not alerts:
        return f"regression: alert {groups[0].id}"
    lead = max(alerts, key=lambda a: abs(a.change_pct) if math.isfinite(a.change_pct) else math.inf)
    config = alert_sql.names(session, BenchConfig, [lead.config_id]).get(lead.config_id, "")
    text = f"regression: {lead.metric} {change_text(lead.change_pct)} ({config}, {lead.backend}), alert {lead.group_id}"
    more = len(alerts) - 1
    if more:
        text += f", +{more} more metric{'s' if more > 1 else ''}"
    return text


def _untriaged_copies(session: Session, sightings: list[AlertGroup]) -> str | None:
    """"regression: a copy of 1a2b3c4d5e6f, alert 7" when a sighting copies a change (a cherry-pick,
    a rebase) whose own group is still untriaged; None otherwise (a merge only carries it along)."""
    for group in sightings:
        if group.origin_group_id is None:
            continue
        first_bad = alert_sql.commits_by_id(session, [group.first_bad_commit_id])[group.first_bad_commit_id]
        origin = alert_sql.group_by_id(session, group.origin_group_id)
        if origin is not None and origin.status == "untriaged" and len(first_bad.parents) < 2:
            sha = alert_sql.commits_by_id(session, [origin.first_bad_commit_id])[origin.first_bad_commit_id].sha
            return f"regression: a copy of {sha[:12]}, alert {origin.id}"
    return None


def _name_sighting(session: Session, groups: list[AlertGroup]) -> str:
    """"no regression of its own: carries alert 7 (regression at 1a2b3c4d5e6f)" — the change came with another commit."""
    lead = groups[0]
    origin = alert_sql.commits_by_id(session, [lead.origin_commit_id])[lead.origin_commit_id]
    if lead.origin_group_id is not None:
        return f"no regression of its own: carries alert {lead.origin_group_id} (the change of {origin.sha[:12]})"
    return f"no regression of its own: the change comes with {origin.sha[:12]}"


def _name_suspect(suspects: list[Suspect]) -> str:
    """"confirming a suspected regression: cpp +2.10%" — the strongest suspect (lowest p) first."""
    lead = min(suspects, key=lambda s: s.p_value)
    text = f"confirming a suspected {lead.direction}: {lead.metric} {lead.change_pct:+.2f}%"
    if len(suspects) > 1:
        text += f", +{len(suspects) - 1} more"
    return text
