"""A commit's series verdict on a machine, decided from the alerts and handed to the forge.

``failure`` while an untriaged regression alert group of that machine implicates the commit (it
lies in the group's range, last good .. first bad), else ``pending`` while a pending suspect of
that machine names it (its confirmation rounds decide; the CI gate answers ``pending`` too), else
it depends on the commit's baseline: ``success`` when an earlier commit of one of its branches is
measured on the machine (there was something to compare with, and nothing moved), ``pending``
while one is being measured, ``neutral`` when none is or will be ("no baseline": never green by
absence). :func:`..forge.statuses.write_verdicts` stores and delivers it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from sqlalchemy.orm import Session

from perfci_core.metrics import change_text

from ..forge.statuses import write_verdicts
from ..machines import repository as machine_sql
from ..models import AlertGroup, BenchConfig, CommitState, StatusScope, Suspect
from ..settings import Settings
from . import repository as alert_sql

NO_REGRESSION = "no untriaged performance regression"


def record_verdicts(session: Session, machine_id: int, commit_ids: Iterable[int], settings: Settings) -> list[int]:
    """Write the series verdict of each commit on the machine; queue a post for each one that
    changed. Set-based: one query for the implicating groups of every commit, one for the pending
    suspects, one for the baselines, then :func:`write_verdicts`. Returns the ids of the statuses
    that will be posted."""
    ids = sorted(set(commit_ids))
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
        groups = groups_of.get(commit_id, [])
        if groups:
            key = tuple(g.id for g in groups)
            if key not in named:
                named[key] = _name_regression(session, groups)
            wanted[commit_id] = (CommitState.FAILURE, named[key])
        elif commit_id in suspects_of:
            wanted[commit_id] = (CommitState.PENDING, _name_suspect(suspects_of[commit_id]))
        else:
            baseline = baselines.get(commit_id)
            if baseline is not None and baseline.measured:
                wanted[commit_id] = (CommitState.SUCCESS, NO_REGRESSION)
            elif baseline is not None and baseline.waiting_for:
                wanted[commit_id] = (CommitState.PENDING, f"waiting for its baseline {baseline.waiting_for[:12]} to be measured")
            else:
                wanted[commit_id] = (CommitState.NEUTRAL, f"no baseline yet: no earlier commit of its branch measured on {machine}")
    return write_verdicts(session, machine_id, StatusScope.SERIES, wanted, settings)


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


def _name_suspect(suspects: list[Suspect]) -> str:
    """"confirming a suspected regression: cpp +2.10%" — the strongest suspect (lowest p) first."""
    lead = min(suspects, key=lambda s: s.p_value)
    text = f"confirming a suspected {lead.direction}: {lead.metric} {lead.change_pct:+.2f}%"
    if len(suspects) > 1:
        text += f", +{len(suspects) - 1} more"
    return text
