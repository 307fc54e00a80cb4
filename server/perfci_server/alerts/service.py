"""Detection in production: turn the analysis core's changes into alert groups, explain them,
triage them, and answer the CI gate.

What one detection does (a Celery task per machine after successful uploads, see :mod:`.tasks`):

- take the machine's successful runs detection has not analysed yet (``runs.detected_at`` is
  NULL). Uploads coalesce: at most one detection of a machine waits in the queue, and it analyses
  every run stored before it started, so the work follows the workers' pace, not the upload rate;
- for every branch those runs' commits are on, under a per branch x machine lock (groups span
  every config and metric of a machine), take the last ``detection_window_commits`` measured
  commits of each run's machine x config (from a block edge once the window has slid, so its
  start moves a block at a time: ``analysis.detect``, incremental) — every repetition of every
  metric and backend. The
  window detection analysed last time is cached (:mod:`.window`, table ``detection_windows``),
  so only the commits with runs awaiting detection are read; a missing, stale or disagreeing
  cache is rebuilt from the tables, and the verdicts are the same either way;
- run :func:`analysis.detect` on each (metric, backend) series, searching on from the window's
  last search where its inputs did not change (``Window.memos``): sim by the exact rule (only
  between consecutive commits whose medians differ at all, which gives the same changes), the
  rest by change points + the per-commit test with the noise-learned minimum effect. A machine
  is one fingerprint, so a changed fingerprint (a new machine row) starts new series: no alert
  ever spans two fingerprints;
- a run whose commit is older than the window (uploaded late, or a backlog larger than the
  window) is analysed over a window centred on its position (half the window size each side),
  which judges only what lies before the main window's judged part;
- reconcile the changes with the stored alerts of that series (:class:`_Book`): a change whose
  range (last good, first bad] overlaps an existing alert of the series updates that alert in
  place; otherwise it joins a group of the branch x machine whose range it overlaps, or opens a
  new group. A group's range is the intersection of its alerts' ranges (every metric that moved
  there agrees the culprit is inside it); two groups whose ranges come to share their first bad
  commit are merged.

Suspects (:mod:`.confirm`): a change detection finds likely but cannot decide yet is not an
alert; it is recorded as pending and gets confirmation rounds (extra repetitions of its commits,
claimed before push jobs, within a per machine x config budget); detection decides again when
they arrive. The hook is in :func:`detect_config`, next to the reconciliation of found changes.

A change that disappears (more data shows no step): an alert of the series that detection no
longer reports is deleted when its group is still untriaged and the window judged it — its first
bad commit lies at least ``STALE_MARGIN`` measured commits after the window's start (or the
window reaches back to the series' first commit), so an alert is never dropped merely because
the window slid past its left edge. An emptied untriaged group is deleted. Triaged groups are
never dropped nor re-opened: their alerts' numbers are refreshed, nothing else.

Changes of a metric the catalogue does not know (no better-direction) are logged, not alerted:
an alert must say regression or improvement. Metrics the catalogue keeps as context
(``alerts=False``: 4K aliases, which move with code layout) are not analysed for alerts; the
explanations of other alerts still name their moves.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from perfci_core import metrics as catalogue
from perfci_core.analysis import DetectionResult, Kind, detect, explain
from perfci_core.analysis.changepoints import SearchMemo
from perfci_core.analysis.detect import Change, window_start
from perfci_core.analysis.detect import Settings as DetectionSettings
from perfci_core.metrics import hazard_sites

from .. import dispatch
from ..bisect import service as bisect_service
from ..errors import NotFound
from ..forge import service as forge_service
from ..models import Alert, AlertDirection, AlertGroup, AlertStatus, BenchConfig, Branch, CommitState, Machine, Repository, utcnow
from ..models import Suspect as SuspectRow
from ..pagination import Page
from ..repos import repository as repo_sql
from ..settings import Settings
from . import confirm
from . import repository as alert_sql
from .schemas import AlertGroupRead, AlertRead, CheckResult, CheckState, CommitRef, MachineVerdict, SuspectRead, Triage
from . import window as window_cache
from .window import Window, WindowSeries, version_of

log = logging.getLogger(__name__)

DETECT_TASK = "perfci.alerts.detect_pending"
DETECTION = DetectionSettings(unknown_metric="report")
STALE_MARGIN = 20  # measured commits after a truncated window's start before an absence counts
PENDING_BATCH = 1000
SIM_FAMILY_KEY = "sim.hz_family."  # the raw key a sim sample records its store-buffer model under  # runs one detection task takes at most (keeps it well inside its time limit)


def schedule_detection(session: Session, machine_id: int) -> None:
    """After an upload commits, detect on the machine's new runs (unless a detection of the
    machine is already waiting: it will see this run too)."""
    dispatch.send_once_after_commit(session, DETECT_TASK, machine_id)


def resend_stragglers(session: Session, settings: Settings) -> list[int]:
    """Send detection for machines whose runs waited longer than they should have (a task lost
    with its worker, a mark left behind, a broker that was down at upload time)."""
    machines = alert_sql.machines_with_pending_runs(session, utcnow() - timedelta(seconds=settings.detection_straggler_seconds))
    for machine_id in machines:
        dispatch.send_now(DETECT_TASK, machine_id)
    if machines:
        log.warning("detection sweep: resent detection for machine(s) %s", machines)
    return machines


# --- detection ------------------------------------------------------------------------------


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
    groups: set[int] = field(default_factory=set)
    commits: set[int] = field(default_factory=set)

    def as_dict(self) -> dict[str, Any]:
        return {"found": self.found, "created": self.created, "updated": self.updated, "dropped": self.dropped,
                "confirm_jobs": self.confirm_jobs, "groups": sorted(self.groups), "commits": len(self.commits)}


def detect_pending(session: Session, machine_id: int, settings: Settings) -> Outcome:
    """Detection on the series of the machine's runs not analysed yet (idempotent: the runs are
    marked analysed in the same transaction, and re-running detection changes nothing)."""
    outcome = Outcome()
    runs = alert_sql.lock_pending_runs(session, machine_id, PENDING_BATCH)
    if not runs:
        return outcome
    if len(runs) == PENDING_BATCH:  # a backlog (workers were down): the rest in the next task
        dispatch.send_once_after_commit(session, DETECT_TASK, machine_id)
    branches = alert_sql.branches_of_commits(session, (run.commit_id for run in runs))
    series = sorted({(branch_id, run.config_id) for run in runs for branch_id in branches.get(run.commit_id, [])})
    for branch_id in sorted({branch_id for branch_id, _ in series}):  # ascending: tasks never wait on each other in a cycle
        alert_sql.lock_branch_machine(session, branch_id, machine_id)
    for branch_id, config_id in series:
        detect_config(session, branch_id, machine_id, config_id, settings, outcome)
    outcome.commits.update(run.commit_id for run in runs)
    forge_service.record_verdicts(session, machine_id, outcome.commits, settings)
    if settings.auto_bisect_regressions:
        _bisect_new_regressions(session, outcome)
    alert_sql.mark_detected(session, [run.id for run in runs], utcnow())
    log.info("detection for %d run(s) of machine %s: %s", len(runs), machine_id, outcome.as_dict())
    return outcome


def _bisect_new_regressions(session: Session, outcome: Outcome) -> None:
    """Start a server bisect for each untriaged regression group detection touched (idempotent:
    a group keeps the one bisect it got first)."""
    for group_id in sorted(outcome.groups):
        group = session.get(AlertGroup, group_id)
        if group is not None and group.direction == AlertDirection.REGRESSION.value and group.status == AlertStatus.UNTRIAGED.value:
            bisect_service.start_for_alert_group(session, group_id)


def request_redetection(session: Session, branch_id: int, machine_id: int) -> None:
    """Detection again over every config of a branch x machine (e.g. after a detector upgrade),
    as durable as an upload: the request marks each config's newest run unanalysed in its own
    transaction, and the detection task (resent by the straggler sweep if lost) re-examines
    those series."""
    alert_sql.mark_newest_runs_pending(session, branch_id, machine_id)
    schedule_detection(session, machine_id)


def redetect(session: Session, branch_id: int, machine_id: int, settings: Settings) -> Outcome:
    """Detection over every config measured on a branch x machine (after a detector change)."""
    outcome = Outcome()
    alert_sql.lock_branch_machine(session, branch_id, machine_id)
    for config_id in alert_sql.configs_of_machine_on_branch(session, branch_id, machine_id):
        detect_config(session, branch_id, machine_id, config_id, settings, outcome)
    forge_service.record_verdicts(session, machine_id, outcome.commits, settings)
    log.info("redetection of branch %s x machine %s: %s", branch_id, machine_id, outcome.as_dict())
    return outcome


def detect_config(session: Session, branch_id: int, machine_id: int, config_id: int, settings: Settings,
                  outcome: Outcome, use_window_cache: bool | None = None) -> None:
    """Detection on every series of a branch x machine x config: over its last
    ``detection_window_commits`` measured commits, and around each commit uploaded late (older
    than that window) over a window centred on it."""
    size = settings.detection_window_commits
    measured = alert_sql.measured_commits(session, branch_id, machine_id, config_id, size)
    if not measured:
        return
    first = alert_sql.first_measured_position(session, branch_id, machine_id, config_id)
    block = min(DETECTION.block, size // 8)  # at most an eighth of the window: small windows stay windows
    if measured[0][0] != first and block > 0:  # a window that slid starts at a block edge (analysis.detect: incremental)
        start = window_start(measured[0][0], block)
        measured = [m for m in measured if m[0] >= start]
    fresh_commits = alert_sql.pending_commits(session, machine_id, config_id)
    fresh = set(alert_sql.positions_of(session, branch_id, fresh_commits).values()) if fresh_commits else set()
    use_cache = settings.detection_window_cache if use_window_cache is None else use_window_cache
    window = _window(session, branch_id, machine_id, config_id, measured, fresh, settings, use_cache)
    judge_from = _judge_from([p for p, _ in measured], first)
    book = _Book(session, branch_id, machine_id)
    confirmations = confirm.Confirmations(session, branch_id, machine_id, config_id, window.at())
    own_from = book.first_own_position
    for key, (found, result) in window_changes(window, config_id).items():
        if own_from:  # a branch's inherited history: its changes are its base branch's to report
            found, result = _own_changes(found, result, window.at(), own_from)
        outcome.found += len(found)
        book.reconcile((config_id, *key), found, judge_from, outcome)
        if result is not None:  # suspects: pending, confirmation rounds (confirm.py)
            confirmations.track(*key, result, [(f.last_good[1], f.first_bad[1]) for f in found], judge_from)
    judged_to = -1
    for late in sorted(p for p in fresh if p < measured[0][0]):
        if late < judged_to:
            continue  # inside the window of an earlier late upload
        judged_to = _detect_around(session, book, branch_id, machine_id, config_id, late, judge_from, first, settings, outcome)
    book.finish(settings, outcome)
    outcome.confirm_jobs += confirmations.schedule(settings)
    outcome.commits.update(confirmations.touched)  # their forge verdicts may have turned pending or back


def _own_changes(found: list[Found], result: DetectionResult | None, at: dict[str, tuple[int, int]],
                 own_from: int) -> tuple[list[Found], DetectionResult | None]:
    """The changes (and suspects) a branch reports: those from its own first commit on."""
    found = [f for f in found if f.first_bad[1] >= own_from]
    if result is not None:
        result = dataclasses.replace(result, suspects=tuple(s for s in result.suspects if at[s.suspect][1] >= own_from))
    return found, result


def _judge_from(positions: list[int], first: int | None) -> int:
    """First position whose alerts a window may drop when it no longer sees them (see module doc);
    ``first``: the series' first measured position."""
    return positions[0] if positions[0] == first else positions[min(STALE_MARGIN, len(positions) - 1)]


def _window(session: Session, branch_id: int, machine_id: int, config_id: int, measured: list[tuple[int, int]],
            fresh: set[int], settings: Settings, use_cache: bool) -> Window:
    """The window's points: the cached window updated with the commits that have runs awaiting
    detection, or (no usable cache) everything read from the tables. Either way the result is the
    same (alerts.window); the cache is rewritten for the next detection."""
    version = window_version(settings)
    row = alert_sql.detection_window(session, branch_id, machine_id, config_id) if use_cache else None
    window = None
    if row is not None and row.version == version:
        try:
            window = window_cache.decode(row.data)
        except (ValueError, KeyError, OSError) as e:  # a damaged cache is rebuilt, never trusted
            log.warning("detection window of branch %s x machine %s x config %s unreadable (%s): rebuilt", branch_id, machine_id, config_id, e)
    positions = [p for p, _ in measured]
    if window is not None and window.agrees_with(measured, fresh):
        read = [p for p in positions if p in fresh]
    else:
        window, read = Window(), positions
    window.slide_to(measured)
    window.put_runs(alert_sql.window_runs(session, branch_id, machine_id, config_id, read), read)
    if use_cache:
        data = window.dumps()
        alert_sql.save_detection_window(session, branch_id, machine_id, config_id, version, data)
        window_cache.remember(data, window)  # the analysis below only reads it
    return window


def window_version(settings: Settings) -> str:
    return version_of(DETECTION, settings.detection_window_commits)


def _detect_around(session: Session, book: _Book, branch_id: int, machine_id: int, config_id: int, late: int,
                   main_judge_from: int, first: int | None, settings: Settings, outcome: Outcome) -> int:
    """A commit uploaded late, older than the window: detection over a window centred on it
    (half the window size on each side). It judges only what lies before the main window's judged
    part (which stays that window's) and away from its own truncated edges; returns the end of
    what it judged."""
    half = max(1, settings.detection_window_commits // 2)
    measured = alert_sql.measured_commits(session, branch_id, machine_id, config_id, half, before=late)
    measured += alert_sql.measured_commits(session, branch_id, machine_id, config_id, half, after=late)
    positions = [p for p, _ in measured]
    window = Window()
    window.slide_to(measured)
    window.put_runs(alert_sql.window_runs(session, branch_id, machine_id, config_id, positions), positions)
    judge_from = _judge_from(positions, first)
    judge_to = min(main_judge_from, positions[max(0, len(positions) - 1 - STALE_MARGIN)])
    log.info("detection: commit at position %s uploaded late (window starts at %s): analysed over positions %s..%s",
             late, main_judge_from, positions[0], positions[-1])
    # Changes only: suspects of a late window are left to the next detection that sees the commit
    # in its main window (confirmation rounds are for the newest commits, where verdicts are due).
    for key, (found, _) in window_changes(window, config_id).items():
        found = [f for f in found if f.first_bad[1] < main_judge_from]
        outcome.found += len(found)
        book.reconcile((config_id, *key), found, judge_from, outcome, judge_to=judge_to)
    return judge_to


def window_changes(window: Window, config_id: int) -> dict[tuple[str, str], tuple[list[Found], DetectionResult | None]]:
    """The changes of every series of a window, located on the branch, with the detection result
    that holds its suspects (None for series decided by the exact rule or not analysed)."""
    at = window.at()
    out = {}
    for (metric, backend), series in window.series().items():
        memo = window.memos.setdefault((metric, backend), SearchMemo())
        out[metric, backend] = _changes(series, metric, backend, config_id, at, memo)
    return out


def _analyse(series: WindowSeries, metric: str, backend: str,
             memo: SearchMemo | None = None) -> tuple[list[Change], DetectionResult | None]:
    """:func:`analysis.detect` on one series. A deterministic (sim) series is decided by the exact
    rule between consecutive commits, so only the pairs whose medians differ at all need the
    rule: the same changes as the whole series gives, at a cost that follows the changes, not the
    window. ``memo``: the series' main search at the last detection (analysis.detect: incremental)."""
    if backend != "sim":
        result = detect(series, metric, backend, DETECTION, memo)
        for note in result.notes:
            log.debug("detection %s/%s: %s", metric, backend, note)
        return list(result.changes), result
    medians = series.medians
    changes = []
    for k in (np.flatnonzero(medians[1:] != medians[:-1]) + 1).tolist():
        pair = WindowSeries(commits=series.commits[k - 1:k + 1], samples=series.samples[k - 1:k + 1],
                            cached_medians=medians[k - 1:k + 1])
        changes.extend(detect(pair, metric, backend, DETECTION).changes)
    return changes, None


def _changes(series: WindowSeries, metric: str, backend: str, config_id: int,
             at: dict[str, tuple[int, int]], memo: SearchMemo | None = None) -> tuple[list[Found], DetectionResult | None]:
    known = catalogue.CATALOGUE.get(metric)
    if known is not None and not known.alerts:
        return [], None  # context for the explanations of other alerts (the catalogue says why)
    changes, result = _analyse(series, metric, backend, memo)
    found = []
    for change in changes:
        if change.kind not in (Kind.REGRESSION, Kind.IMPROVEMENT):
            log.warning("detection: %s/%s config %s moved %+.2f%% at %s but has no better-direction; not alerted",
                        metric, backend, config_id, change.percent, change.first_bad)
            continue
        found.append(Found(
            config_id=config_id, metric=metric, backend=backend, direction=change.kind.value,
            last_good=at[change.last_good], first_bad=at[change.first_bad],
            before_median=change.before_median, after_median=change.after_median, change_pct=change.percent,
            confidence=change.confidence, p_value=None if change.exact else change.p_value,
        ))
    return found, result


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> int:
    """Commits two ranges (last good position, first bad position] have in common."""
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


class _Book:
    """The alert groups of one branch x machine, held while detection reconciles series with them
    (the advisory lock keeps other tasks out)."""

    def __init__(self, session: Session, branch_id: int, machine_id: int):
        self.session, self.branch_id, self.machine_id = session, branch_id, machine_id
        groups = alert_sql.groups_of(session, branch_id, machine_id)
        alerts = alert_sql.alerts_of_groups(session, [g.id for g in groups])
        commit_ids = [c for g in groups for c in (g.last_good_commit_id, g.first_bad_commit_id)]
        commit_ids += [c for a in alerts for c in (a.last_good_commit_id, a.first_bad_commit_id)]
        self.pos = alert_sql.positions_of(session, branch_id, commit_ids)
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
            by_lg = by_fb = _lead(members)
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
                outcome.commits.update(alert_sql.commits_at(self.session, self.branch_id, rng[0] + 1, rng[1]))
        for group_id in sorted(self.touched & set(self.groups)):
            _explain_group(self.session, self.groups[group_id], self, settings)
            outcome.groups.add(group_id)
        self.session.flush()


def _lead(alerts: Iterable[Alert]) -> Alert:
    """The alert a group is named after: a regression before an improvement, then the largest move."""
    return min(alerts, key=lambda a: (a.direction != "regression", -abs(a.change_pct) if math.isfinite(a.change_pct) else -math.inf, a.id))


# --- explanation ----------------------------------------------------------------------------


def _explain_group(session: Session, group: AlertGroup, book: _Book, settings: Settings) -> None:
    """Lean-model explanation from the medians of *every* metric of each (config, backend) that
    alerted, over up to ``explanation_window_commits`` measured commits on each side of the
    range, bounded by the neighbouring groups' ranges (their levels are not this one's)."""
    lg, fb = book.range_of(group)
    others = [book.range_of(g) for g in book.groups.values() if g.id != group.id]
    prev_fb = max((r[1] for r in others if r[1] <= lg), default=None)
    next_lg = min((r[0] for r in others if r[0] >= fb), default=None)
    members = book.members(group.id)
    lead = _lead(members)
    config_names = alert_sql.names(session, BenchConfig, [a.config_id for a in members])
    parts = []
    for config_id, backend in sorted({(a.config_id, a.backend) for a in members}, key=lambda k: k != (lead.config_id, lead.backend)):
        k = settings.explanation_window_commits
        before_at = alert_sql.measured_positions_between(session, group.branch_id, group.machine_id, config_id, prev_fb, lg, k, True) if lg >= 0 else []
        after_at = alert_sql.measured_positions_between(session, group.branch_id, group.machine_id, config_id, fb, next_lg, k, False)
        before, after = _medians(session, group, config_id, backend, before_at), _medians(session, group, config_id, backend, after_at)
        sites: dict[str, Any] = {}
        if backend == "sim" and before_at and after_at:  # where the simulated hazards happen
            sites = {"sites_before": hazard_sites(alert_sql.sim_sample_raw(session, group.branch_id, group.machine_id, config_id, before_at[-1])),
                     "sites_after": hazard_sites(alert_sql.sim_sample_raw(session, group.branch_id, group.machine_id, config_id, after_at[0]))}
        explanation = explain(before, after, **sites)
        parts.append({
            "config": config_names.get(config_id, str(config_id)), "backend": backend,
            "cause": explanation.cause, "sentence": explanation.sentence,
            "decompositions": [dataclasses.asdict(d) for d in explanation.decompositions],
            "counters": [dataclasses.asdict(c) for c in explanation.counters],
            "before": before, "after": after, "commits_before": len(before_at), "commits_after": len(after_at),
        })
    lead_part = parts[0]
    group.explanation = _json_safe({"cause": lead_part["cause"], "sentence": lead_part["sentence"], "parts": parts})
    group.summary = _summary(session, group, (lg, fb), lead_part, len(members))


def _medians(session: Session, group: AlertGroup, config_id: int, backend: str, positions: list[int]) -> dict[str, float]:
    values: dict[str, list[float]] = defaultdict(list)
    for row in alert_sql.window_runs(session, group.branch_id, group.machine_id, config_id, positions):
        if row.backend == backend:
            values[row.metric].extend(v for v in row.values if math.isfinite(v))
    return {metric: float(np.median(v)) for metric, v in values.items()}


def _summary(session: Session, group: AlertGroup, rng: tuple[int, int], part: dict[str, Any], n_alerts: int) -> str:
    commits = alert_sql.commits_by_id(session, [group.first_bad_commit_id, group.last_good_commit_id])
    machine = session.get(Machine, group.machine_id)
    first_bad = commits[group.first_bad_commit_id]
    if rng[1] - rng[0] == 1:
        subject = _subject(first_bad.message)
        where = f"at {first_bad.sha[:12]}" + (f" ({subject})" if subject else "")
    else:
        last_good = commits.get(group.last_good_commit_id) if group.last_good_commit_id else None
        where = f"in {rng[1] - rng[0]} commits after {last_good.sha[:12] if last_good else 'the start'} up to {first_bad.sha[:12]}"
    sim = " simulated" if part["backend"] == "sim" else ""
    more = f" (+{n_alerts - 1} more metric{'s' if n_alerts > 2 else ''})" if n_alerts > 1 else ""
    return (f"{group.direction.capitalize()} {where} on {machine.name if machine else group.machine_id}, "
            f"{part['config']} ({part['backend']}{sim}): {part['sentence']}{more}")


def _candidate_span(session: Session, group: AlertGroup) -> tuple[int, int]:
    """Branch positions of the first and the last commit that may have caused the change."""
    pos = alert_sql.positions_of(session, group.branch_id, [group.first_bad_commit_id, group.last_good_commit_id])
    lg = pos.get(group.last_good_commit_id, -1) if group.last_good_commit_id else -1
    return lg + 1, pos[group.first_bad_commit_id]


def _subject(message: str) -> str:
    return message.strip().splitlines()[0][:200] if message.strip() else ""


def _json_safe(value: Any) -> Any:
    """JSON has no NaN/inf (PostgreSQL's json rejects them): those become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


# --- reads ----------------------------------------------------------------------------------


def read_groups(session: Session, groups: list[AlertGroup]) -> list[AlertGroupRead]:
    """The API shape of groups, with every name and commit loaded in a few batch queries."""
    if not groups:
        return []
    alerts = alert_sql.alerts_of_groups(session, [g.id for g in groups])
    by_group: dict[int, list[Alert]] = defaultdict(list)
    for a in alerts:
        by_group[a.group_id].append(a)
    commit_ids = [c for g in groups for c in (g.last_good_commit_id, g.first_bad_commit_id)]
    commit_ids += [c for a in alerts for c in (a.last_good_commit_id, a.first_bad_commit_id)]
    commits = alert_sql.commits_by_id(session, commit_ids)
    branch_of = {g.id: g.branch_id for g in groups}
    positions = alert_sql.branch_positions(session, [(g.branch_id, c) for g in groups for c in (g.last_good_commit_id, g.first_bad_commit_id)]
                                           + [(branch_of[a.group_id], a.first_bad_commit_id) for a in alerts])
    repos = alert_sql.names(session, Repository, [g.repository_id for g in groups])
    branches = alert_sql.names(session, Branch, [g.branch_id for g in groups])
    machines = alert_sql.names(session, Machine, [g.machine_id for g in groups])
    configs = alert_sql.names(session, BenchConfig, [a.config_id for a in alerts])

    def ref(group: AlertGroup, commit_id: int | None, author: bool) -> CommitRef | None:
        if commit_id is None:
            return None
        c = commits[commit_id]
        return CommitRef(sha=c.sha, position=positions.get((group.branch_id, commit_id)), subject=_subject(c.message),
                         author=(f"{c.author_name} <{c.author_email}>" if c.author_email else c.author_name) if author else "")

    families: dict[tuple[int, int, int, int], str | None] = {}

    def family_of(group: AlertGroup, alert: Alert) -> str | None:
        """The store-buffer model the first bad commit's sim sample recorded (its raw sim.hz_family.<name>)."""
        position = positions.get((group.branch_id, alert.first_bad_commit_id))
        key = (group.branch_id, group.machine_id, alert.config_id, alert.first_bad_commit_id)
        if key not in families:
            raw = alert_sql.sim_sample_raw(session, *key[:3], position) if position is not None else {}
            families[key] = next((k.removeprefix(SIM_FAMILY_KEY) for k in raw if k.startswith(SIM_FAMILY_KEY)), None)
        return families[key]

    out = []
    for g in groups:
        members = sorted(by_group[g.id], key=lambda a: (configs.get(a.config_id, ""), a.metric, a.backend))
        first_bad = ref(g, g.first_bad_commit_id, author=True)
        assert first_bad is not None
        out.append(AlertGroupRead(
            id=g.id, repository_id=g.repository_id, repository=repos.get(g.repository_id, ""), branch=branches.get(g.branch_id, ""),
            machine_id=g.machine_id, machine=machines.get(g.machine_id, ""), direction=g.direction, status=g.status,
            last_good=ref(g, g.last_good_commit_id, author=False), first_bad=first_bad, summary=g.summary,
            explanation=g.explanation, triage_note=g.triage_note, triaged_by=g.triaged_by, triaged_at=g.triaged_at,
            created_at=g.created_at, updated_at=g.updated_at,
            alerts=[AlertRead(
                config=configs.get(a.config_id, ""), metric=a.metric, backend=a.backend, direction=a.direction,
                before_median=a.before_median, after_median=a.after_median, change_pct=a.change_pct,
                confidence=a.confidence, p_value=a.p_value,
                last_good_sha=commits[a.last_good_commit_id].sha if a.last_good_commit_id else None,
                first_bad_sha=commits[a.first_bad_commit_id].sha,
                sim_family=family_of(g, a) if a.backend == "sim" else None,
            ) for a in members],
        ))
    return out


def read_suspects(session: Session, rows: list[SuspectRow]) -> list[SuspectRead]:
    """The API shape of suspects, names and commits loaded in batch queries."""
    if not rows:
        return []
    commits = alert_sql.commits_by_id(session, [c for r in rows for c in (r.suspect_commit_id, *r.commit_ids)])
    positions = alert_sql.branch_positions(session, [(r.branch_id, r.suspect_commit_id) for r in rows])
    branches = alert_sql.names(session, Branch, [r.branch_id for r in rows])
    machines = alert_sql.names(session, Machine, [r.machine_id for r in rows])
    configs = alert_sql.names(session, BenchConfig, [r.config_id for r in rows])
    out = []
    for r in rows:
        c = commits[r.suspect_commit_id]
        out.append(SuspectRead(
            id=r.id, state=r.state, why=r.why, direction=r.direction, branch=branches.get(r.branch_id, ""),
            machine_id=r.machine_id, machine=machines.get(r.machine_id, ""), config=configs.get(r.config_id, ""),
            metric=r.metric, backend=r.backend, change_pct=r.change_pct, p_value=r.p_value,
            suspect=CommitRef(sha=c.sha, position=positions.get((r.branch_id, r.suspect_commit_id)), subject=_subject(c.message),
                              author=f"{c.author_name} <{c.author_email}>" if c.author_email else c.author_name),
            commits=[commits[i].sha for i in r.commit_ids if i in commits],
            confirm_jobs=alert_sql.active_confirm_jobs(session, r.machine_id, r.config_id, r.commit_ids),
            reason=r.reason, created_at=r.created_at, updated_at=r.updated_at,
        ))
    return out


def read_suspect_page(session: Session, page: Page[SuspectRow]) -> Page[SuspectRead]:
    return Page(items=read_suspects(session, page.items), total=page.total, limit=page.limit, offset=page.offset)


def read_page(session: Session, page: Page[AlertGroup]) -> Page[AlertGroupRead]:
    return Page(items=read_groups(session, page.items), total=page.total, limit=page.limit, offset=page.offset)


def get_group(session: Session, group_id: int) -> AlertGroupRead:
    group = alert_sql.group_by_id(session, group_id)
    if group is None:
        raise NotFound(f"no alert group {group_id}")
    return read_groups(session, [group])[0]


# --- triage and the CI check ----------------------------------------------------------------


def triage(session: Session, group_id: int, data: Triage, settings: Settings) -> AlertGroupRead:
    """Set a group's triage state; the commit statuses of its range follow (success once no
    untriaged regression implicates a commit)."""
    group = alert_sql.group_by_id(session, group_id, lock=True)
    if group is None:
        raise NotFound(f"no alert group {group_id}")
    group.status, group.triage_note, group.triaged_by = data.status.value, data.note, data.by
    group.triaged_at = utcnow()
    session.flush()
    lg, fb = _candidate_span(session, group)
    commits = alert_sql.commits_at(session, group.branch_id, lg, fb)
    forge_service.record_verdicts(session, group.machine_id, commits, settings)
    log.info("alert group %s triaged %s by %s", group.id, group.status, group.triaged_by)
    return read_groups(session, [group])[0]


def branch_id_of(session: Session, repository_id: int, branch: str) -> int:
    row = repo_sql.branch(session, repository_id, branch)
    if row is None:
        raise NotFound(f"no branch {branch!r} in repository {repository_id}")
    return row.id


def check(session: Session, sha: str, repository: str | None, machine: str | None) -> CheckResult:
    """The CI gate's answer for one commit (see CheckResult)."""
    commits = alert_sql.commits_with_sha(session, sha, repository)
    machine_ids = alert_sql.machine_ids(session, machine)
    if machine_ids == []:
        raise NotFound(f"no machine named {machine!r}")
    if not commits:
        where = f" in repository {repository!r}" if repository else ""
        return CheckResult(commit=sha, state=CheckState.PENDING, exit_code=2, machines=[], pending_jobs=0, regressions=[],
                           detail=f"commit {sha} is not known{where} yet (no push delivered it)")
    commit_ids = [c.id for c in commits]
    regressions = read_groups(session, alert_sql.implicating_groups(session, commit_ids, machine_ids))
    pending = alert_sql.active_jobs(session, commit_ids, machine_ids)
    suspects = read_suspects(session, alert_sql.pending_suspects(session, commit_ids, machine_ids))
    verdicts = [MachineVerdict(machine_id=s.machine_id, machine=name, state=s.state, description=s.description)
                for s, name in alert_sql.verdicts(session, commit_ids, machine_ids)]
    if regressions:
        state, detail = CheckState.REGRESSED, "; ".join(f"alert {g.id}: {g.summary}" for g in regressions)
    elif suspects:  # not an alert yet, not clean either: the confirmation rounds decide
        state = CheckState.PENDING
        detail = "suspected change being confirmed: " + "; ".join(
            f"{s.direction} {s.change_pct:+.2f}% of {s.config} {s.metric}/{s.backend} at {s.suspect.sha[:12]} on {s.machine} "
            f"({s.confirm_jobs} confirmation job(s) queued or running)" for s in suspects)
    elif pending or not verdicts:
        state = CheckState.PENDING
        detail = f"{pending} job(s) still queued or running" if pending else "no analysed result for this commit yet"
    elif undecided := [v for v in verdicts if v.state in (CommitState.PENDING.value, CommitState.NEUTRAL.value)]:
        state = CheckState.PENDING  # nothing to compare with yet: not clean by absence
        detail = "; ".join(f"{v.machine}: {v.description}" for v in undecided)
    else:
        state, detail = CheckState.CLEAN, f"no untriaged regression on {len(verdicts)} machine(s)"
    exit_code = {CheckState.REGRESSED: 1, CheckState.CLEAN: 0, CheckState.PENDING: 2}[state]
    return CheckResult(commit=sha, state=state, exit_code=exit_code, detail=detail, machines=verdicts, pending_jobs=pending,
                       regressions=regressions, pending_suspects=suspects)
