"""Reconciliation: the changes detection found in one series, written into the alert groups of a
branch x machine (see :mod:`.detection`)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from ..models import Alert, AlertDirection, AlertGroup, AlertStatus, Branch
from ..settings import Settings
from . import explanation, origins
from . import repository as alert_sql
from . import series_repository as series_sql

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Found:
    """One change of one series, located on the branch."""

    config_id: int
    metric: str
    backend: str
    direction: str
    last_good: tuple[int, int]  # (commit id, branch position)
    first_bad: tuple[int, int]
    before_median: float
    after_median: float
    change_pct: float
    confidence: float
    p_value: float | None

    @property
    def key(self) -> tuple[int, str, str]:
        return (self.config_id, self.metric, self.backend)


@dataclass
class Outcome:
    """What a detection run did; ``commits`` need their verdict (commit status) refreshed."""

    found: int = 0
    created: int = 0
    updated: int = 0
    dropped: int = 0
    confirm_jobs: int = 0  # confirmation rounds queued for suspects
    creeps: int = 0  # creeps seen for the first time
    groups: set[int] = field(default_factory=set)
    commits: set[int] = field(default_factory=set)

    def as_dict(self) -> dict[str, Any]:
        return {"found": self.found, "created": self.created, "updated": self.updated, "dropped": self.dropped,
                "confirm_jobs": self.confirm_jobs, "creeps": self.creeps, "groups": sorted(self.groups), "commits": len(self.commits)}


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> int:
    """Commits two ranges (last good position, first bad position] have in common."""
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


class Book:
    """The alert groups of one branch x machine, held while detection reconciles series with them
    (the advisory lock keeps other tasks out)."""

    def __init__(self, session: Session, branch_id: int, machine_id: int):
        self.session, self.branch_id, self.machine_id = session, branch_id, machine_id
        groups = alert_sql.groups_of(session, branch_id, machine_id)
        alerts = alert_sql.alerts_of_groups(session, [g.id for g in groups])
        commit_ids = [c for g in groups for c in (g.last_good_commit_id, g.first_bad_commit_id)]
        commit_ids += [c for a in alerts for c in (a.last_good_commit_id, a.first_bad_commit_id)]
        self.pos = series_sql.positions_of(session, branch_id, commit_ids)
        # A triaged group about commits a force push took off the branch stays as history, out of reach.
        self.groups = {g.id: g for g in groups if g.first_bad_commit_id in self.pos}
        self.alerts = [a for a in alerts if a.group_id in self.groups and a.first_bad_commit_id in self.pos]
        self.old_ranges = {g.id: self.range_of(g) for g in self.groups.values()}
        self.touched: set[int] = set()
        branch = session.get(Branch, branch_id)
        assert branch is not None
        self.repository_id = branch.repository_id
        self.first_own_position = branch.first_own_position

    def range_of(self, row: AlertGroup | Alert) -> tuple[int, int]:
        lg = self.pos.get(row.last_good_commit_id, -1) if row.last_good_commit_id is not None else -1
        return (lg, self.pos[row.first_bad_commit_id])

    def members(self, group_id: int) -> list[Alert]:
        return [a for a in self.alerts if a.group_id == group_id]

    def reconcile(self, key: tuple[int, str, str], found: list[Found], judge_from: int, outcome: Outcome,
                  judge_to: int | None = None) -> None:
        """Update the series' alerts with what detection found; an untriaged alert it no longer
        finds is dropped when its first bad commit is in [judge_from, judge_to)."""
        mine = [a for a in self.alerts if (a.config_id, a.metric, a.backend) == key]
        used: set[int] = set()
        for f in sorted(found, key=lambda f: f.first_bad[1]):
            rng = (f.last_good[1], f.first_bad[1])
            same = [a for a in mine if a.id not in used and _overlap(self.range_of(a), rng)]
            if same:
                alert = max(same, key=lambda a: _overlap(self.range_of(a), rng))
                used.add(alert.id)
                if not self._fill(alert, f):
                    continue  # nothing new: no re-explanation, no verdict to refresh
                outcome.updated += 1
            else:
                alert = self._insert(self._group_for(key, rng, f), f)
                used.add(alert.id)
                mine.append(alert)
                outcome.created += 1
            self.touched.add(alert.group_id)
            self._settle(alert.group_id)
        for alert in mine:
            if alert.id in used or not judge_from <= self.range_of(alert)[1] < (judge_to if judge_to is not None else math.inf):
                continue
            group = self.groups[alert.group_id]
            if group.status != AlertStatus.UNTRIAGED.value:
                continue  # triaged: a person decided about it; detection does not undo that
            log.info("detection: %s/%s no longer moves at commit %s; untriaged alert of group %s dropped",
                     alert.metric, alert.backend, alert.first_bad_commit_id, group.id)
            self.alerts.remove(alert)
            self.session.delete(alert)
            outcome.dropped += 1
            self.touched.add(group.id)
            self._settle(group.id)

    def _fill(self, alert: Alert, f: Found) -> bool:
        """Write the change into the alert; False when it already said exactly that."""
        fields = {
            "direction": f.direction, "last_good_commit_id": f.last_good[0], "first_bad_commit_id": f.first_bad[0],
            "before_median": f.before_median, "after_median": f.after_median, "change_pct": f.change_pct,
            "confidence": f.confidence, "p_value": f.p_value,
        }
        self.pos[f.last_good[0]], self.pos[f.first_bad[0]] = f.last_good[1], f.first_bad[1]
        if all(getattr(alert, k) == v for k, v in fields.items()):
            return False
        for key, value in fields.items():
            setattr(alert, key, value)
        return True

    def _insert(self, group: AlertGroup, f: Found) -> Alert:
        alert = Alert(group_id=group.id, config_id=f.config_id, metric=f.metric, backend=f.backend)
        self._fill(alert, f)
        self.session.add(alert)
        self.session.flush()
        self.alerts.append(alert)
        return alert

    def _group_for(self, key: tuple[int, str, str], rng: tuple[int, int], f: Found) -> AlertGroup:
        """The group whose range overlaps most (and holds no alert of this series), or a new one."""
        taken = {a.group_id for a in self.alerts if (a.config_id, a.metric, a.backend) == key}
        best, best_overlap = None, 0
        for group in self.groups.values():
            if group.id in taken:
                continue
            n = _overlap(self.range_of(group), rng)
            if n > best_overlap:
                best, best_overlap = group, n
        if best is not None:
            return best
        group = AlertGroup(
            repository_id=self.repository_id, branch_id=self.branch_id, machine_id=self.machine_id,
            last_good_commit_id=f.last_good[0], first_bad_commit_id=f.first_bad[0], direction=f.direction,
            status=AlertStatus.UNTRIAGED.value, triage_note="", triaged_by="", explanation={}, summary="",
        )
        self.session.add(group)
        self.session.flush()
        self.groups[group.id] = group
        return group

    def _settle(self, group_id: int) -> None:
        """Range (intersection of the alerts' ranges) and direction of a group; delete it when
        empty and untriaged; merge it into the group that already has its first bad commit."""
        group = self.groups[group_id]
        members = self.members(group_id)
        if not members:
            if group.status == AlertStatus.UNTRIAGED.value:
                del self.groups[group_id]
                self.session.delete(group)
                self.session.flush()
            return
        by_lg = max(members, key=lambda a: self.range_of(a)[0])
        by_fb = min(members, key=lambda a: self.range_of(a)[1])
        if self.range_of(by_lg)[0] >= self.range_of(by_fb)[1]:  # no common commit: the lead alert's range
            by_lg = by_fb = explanation.lead_alert(members)
        direction = AlertDirection.REGRESSION if any(a.direction == "regression" for a in members) else AlertDirection.IMPROVEMENT
        group.direction = direction.value
        group.last_good_commit_id = by_lg.last_good_commit_id
        other = next((g for g in self.groups.values()
                      if g.id != group.id and g.first_bad_commit_id == by_fb.first_bad_commit_id), None)
        if other is None:
            group.first_bad_commit_id = by_fb.first_bad_commit_id
            self.session.flush()
            return
        self._merge(into=min(group, other, key=lambda g: g.id), absorbed=max(group, other, key=lambda g: g.id))

    def _merge(self, into: AlertGroup, absorbed: AlertGroup) -> None:
        log.info("alert group %s merged into %s (same first bad commit)", absorbed.id, into.id)
        keys = {(a.config_id, a.metric, a.backend) for a in self.members(into.id)}
        for alert in self.members(absorbed.id):
            if (alert.config_id, alert.metric, alert.backend) in keys:
                self.alerts.remove(alert)
                self.session.delete(alert)
            else:
                alert.group_id = into.id
        if into.status == AlertStatus.UNTRIAGED.value and absorbed.status != AlertStatus.UNTRIAGED.value:
            into.status, into.triage_note = absorbed.status, absorbed.triage_note
            into.triaged_by, into.triaged_at = absorbed.triaged_by, absorbed.triaged_at
        del self.groups[absorbed.id]
        self.session.flush()
        self.session.delete(absorbed)
        self.session.flush()
        self.touched.discard(absorbed.id)
        self.touched.add(into.id)
        self._settle(into.id)

    def finish(self, settings: Settings, outcome: Outcome) -> None:
        """Explain the groups that changed; collect the commits whose verdict may have changed
        (the old and new ranges of every changed, merged or deleted group)."""
        changed = self.touched | (set(self.old_ranges) - set(self.groups))
        for group_id in sorted(changed):
            ranges = [self.old_ranges.get(group_id)]
            if group_id in self.groups:
                ranges.append(self.range_of(self.groups[group_id]))
            for rng in filter(None, ranges):
                outcome.commits.update(series_sql.commits_at(self.session, self.branch_id, rng[0] + 1, rng[1]))
        for group_id in sorted(self.touched & set(self.groups)):
            group = self.groups[group_id]
            others = [self.range_of(g) for g in self.groups.values() if g.id != group_id]
            origins.classify(self.session, group, self.members(group_id), settings)
            explanation.explain_group(self.session, group, self.members(group_id), self.range_of(group), others, settings)
            outcome.groups.add(group_id)
        self.session.flush()
