"""Detection in production: which runs to analyse, over which window, and the analysis core's
changes located on the branch. What it found is written into alert groups by :mod:`.reconcile`
(which has :mod:`.explanation` explain them), and each touched commit's verdict is decided by
:mod:`.verdicts`; reads, triage and the CI gate are in :mod:`.reads`.

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
- reconcile the changes with the stored alerts of that series (:class:`.reconcile.Book`): a change whose
  range (last good, first bad] overlaps an existing alert of the series updates that alert in
  place; otherwise it joins a group of the branch x machine whose range it overlaps, or opens a
  new group. A group's range is the intersection of its alerts' ranges (every metric that moved
  there agrees the culprit is inside it); two groups whose ranges come to share their first bad
  commit are merged.

Creeps (:mod:`.creeps`): a level that moved gradually over many commits is stored as one creep
of its series, not as alerts; it fails no status.

Suspects (:mod:`.confirm`): a change detection finds likely but cannot decide yet is not an
alert; it is recorded as pending and gets confirmation sessions (two commits measured interleaved
on one agent, claimed before push jobs, within a per machine x config budget); detection decides
again when they arrive. The hook is in :func:`detect_config`, next to the reconciliation of found
changes.

A change that disappears (more data shows no step): an alert of the series that detection no
longer reports is deleted when its group is still untriaged and the window judged it — its first
bad commit lies at least ``STALE_MARGIN`` measured commits after the window's start (or the
window reaches back to the series' first commit), so an alert is never dropped merely because
the window slid past its left edge. An emptied untriaged group is deleted. Triaged groups are
never dropped nor re-opened: their alerts' numbers are refreshed, nothing else.

Changes of a metric the catalogue does not know (no better-direction) are logged, not alerted:
an alert must say regression or improvement. Metrics the catalogue keeps as context
(``alerts=False``: 4K aliases, which move with code layout) are not analysed for alerts; an
explanation names their moves where eIPC moved too, never for an IPP move.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from datetime import timedelta

import numpy as np
from sqlalchemy.orm import Session

from perfci_core import metrics as catalogue
from perfci_core.analysis import DetectionResult, Kind, detect
from perfci_core.analysis.changepoints import SearchMemo
from perfci_core.analysis.detect import Change, window_start
from perfci_core.analysis.detect import Settings as DetectionSettings

from .. import dispatch
from ..bisect import service as bisect_service
from ..models import AlertDirection, AlertGroup, AlertStatus, utcnow
from ..settings import Settings
from . import confirm, creeps, origins, verdicts
from . import repository as alert_sql
from . import series_repository as series_sql
from . import window as window_cache
from .reconcile import Book, Found, Outcome
from .window import Window, WindowSeries, version_of

log = logging.getLogger(__name__)

DETECT_TASK = dispatch.DETECT_TASK
DETECTION = DetectionSettings(unknown_metric="report")  # the server's default settings (PERFCI_CONFIRM_LOOKS=3)
STALE_MARGIN = 20  # measured commits after a truncated window's start before an absence counts
PENDING_BATCH = 1000  # runs one detection task takes at most (keeps it well inside its time limit)


def detection_settings(settings: Settings) -> DetectionSettings:
    """The core's detection settings: a confirmation spends its alpha over as many sessions as it may
    take (PERFCI_CONFIRM_LOOKS)."""
    return _detection(settings.confirm_looks)


@functools.cache
def _detection(confirm_looks: int) -> DetectionSettings:
    return dataclasses.replace(DETECTION, confirm_looks=confirm_looks)


def resend_stragglers(session: Session, settings: Settings) -> list[int]:
    """Send detection for machines whose runs waited longer than they should have (a task lost
    with its worker, a mark left behind, a broker that was down at upload time)."""
    machines = series_sql.machines_with_pending_runs(session, utcnow() - timedelta(seconds=settings.detection_straggler_seconds))
    for machine_id in machines:
        dispatch.send_now(DETECT_TASK, machine_id)
    if machines:
        log.warning("detection sweep: resent detection for machine(s) %s", machines)
    return machines


def detect_pending(session: Session, machine_id: int, settings: Settings) -> Outcome:
    """Detection on the series of the machine's runs not analysed yet (idempotent: the runs are
    marked analysed in the same transaction, and re-running detection changes nothing)."""
    outcome = Outcome()
    runs = series_sql.lock_pending_runs(session, machine_id, PENDING_BATCH)
    if not runs:
        return outcome
    if len(runs) == PENDING_BATCH:  # a backlog (workers were down): the rest in the next task
        dispatch.send_once_after_commit(session, DETECT_TASK, machine_id)
    analysed = [run.id for run in runs]
    runs = [run for run in runs if run.round >= 0]  # a pull request's rounds decide its own verdict only
    branches = series_sql.branches_of_commits(session, (run.commit_id for run in runs))
    series = sorted({(branch_id, run.config_id) for run in runs for branch_id in branches.get(run.commit_id, [])})
    for branch_id in sorted({branch_id for branch_id, _ in series}):  # ascending: tasks never wait on each other in a cycle
        series_sql.lock_branch_machine(session, branch_id, machine_id)
    for branch_id, config_id in series:
        detect_config(session, branch_id, machine_id, config_id, settings, outcome)
    outcome.commits.update(run.commit_id for run in runs)
    outcome.commits.update(origins.recheck_awaiting(session, machine_id, {run.commit_id for run in runs}, settings))
    # Commits waiting on these (their baseline, their merged-in parent), or that had no baseline, are decided now too.
    outcome.commits.update(alert_sql.pending_series_commits(session, machine_id, {b for b, _ in series}, verdicts.NO_BASELINE))
    series_sql.mark_detected(session, analysed, utcnow())  # analysed: their commits' verdicts can be given now
    verdicts.record_verdicts(session, machine_id, outcome.commits, settings)
    if settings.auto_bisect_regressions:
        _bisect_new_regressions(session, outcome)
    log.info("detection for %d run(s) of machine %s: %s", len(runs), machine_id, outcome.as_dict())
    return outcome


def _bisect_new_regressions(session: Session, outcome: Outcome) -> None:
    """Start a server bisect for each untriaged regression group detection touched (idempotent:
    a group keeps the one bisect it got first)."""
    for group_id in sorted(outcome.groups):
        group = session.get(AlertGroup, group_id)
        if (group is not None and group.direction == AlertDirection.REGRESSION.value and group.status == AlertStatus.UNTRIAGED.value
                and group.origin_commit_id is None):  # a sighting's culprit is its origin
            bisect_service.start_for_alert_group(session, group_id)


def request_redetection(session: Session, branch_id: int, machine_id: int) -> None:
    """Detection again over every config of a branch x machine (e.g. after a detector upgrade),
    as durable as an upload: the request marks each config's newest run unanalysed in its own
    transaction, and the detection task (resent by the straggler sweep if lost) re-examines
    those series."""
    series_sql.mark_newest_runs_pending(session, branch_id, machine_id)
    dispatch.send_once_after_commit(session, DETECT_TASK, machine_id)


def redetect_branch(session: Session, branch_id: int) -> list[int]:
    """Detection again over a branch on every machine that measured it; returns the machines."""
    machines = series_sql.machines_of_branch(session, branch_id)
    for machine_id in machines:
        request_redetection(session, branch_id, machine_id)
    return machines


def forget_abandoned(session: Session, branch_id: int, commit_ids: list[int], settings: Settings) -> int:
    """A force push took these commits off the branch: its untriaged alert groups about them go
    (triaged ones stay, as history; detection skips groups about commits off the branch), and
    their sightings elsewhere are classified again (a rebased copy becomes the change's own)."""
    doomed = alert_sql.untriaged_groups_of(session, branch_id, commit_ids)
    sightings = [g for g in alert_sql.sightings_of(session, doomed) if g.id not in doomed]
    dropped = alert_sql.drop_untriaged_groups_of(session, branch_id, commit_ids)
    session.flush()
    for machine_id in sorted({g.machine_id for g in sightings}):
        changed = origins.reclassify(session, [g for g in sightings if g.machine_id == machine_id], settings)
        verdicts.record_verdicts(session, machine_id, changed, settings)
    log.info("branch %s: %d commit(s) were forced off it; %d untriaged alert group(s) about them dropped", branch_id,
             len(commit_ids), dropped)
    return dropped


def detect_config(session: Session, branch_id: int, machine_id: int, config_id: int, settings: Settings,
                  outcome: Outcome, use_window_cache: bool | None = None) -> None:
    """Detection on every series of a branch x machine x config: over its last
    ``detection_window_commits`` measured commits, and around each commit uploaded late (older
    than that window) over a window centred on it."""
    size = settings.detection_window_commits
    measured = series_sql.measured_commits(session, branch_id, machine_id, config_id, size)
    if not measured:
        return
    first = series_sql.first_measured_position(session, branch_id, machine_id, config_id)
    detection = detection_settings(settings)
    block = min(detection.block, size // 8)  # at most an eighth of the window: small windows stay windows
    if measured[0][0] != first and block > 0:  # a window that slid starts at a block edge (analysis.detect: incremental)
        start = window_start(measured[0][0], block)
        measured = [m for m in measured if m[0] >= start]
    fresh_commits = series_sql.pending_commits(session, machine_id, config_id)
    fresh = set(series_sql.positions_of(session, branch_id, fresh_commits).values()) if fresh_commits else set()
    use_cache = settings.detection_window_cache if use_window_cache is None else use_window_cache
    window = _window(session, branch_id, machine_id, config_id, measured, fresh, settings, use_cache)
    judge_from = _judge_from([p for p, _ in measured], first)
    book = Book(session, branch_id, machine_id)
    confirmations = confirm.Confirmations(session, branch_id, machine_id, config_id, window.at())
    own_from = book.first_own_position
    seen_creeps = {}
    for key, (found, result) in window_changes(window, config_id, detection).items():
        if own_from:  # a branch's inherited history: its changes are its base branch's to report
            found, result = _own_changes(found, result, window.at(), own_from)
        outcome.found += len(found)
        book.reconcile((config_id, *key), found, judge_from, outcome)
        if result is not None:  # suspects: pending, confirmation sessions (confirm.py)
            confirmations.track(*key, result, [(f.last_good[1], f.first_bad[1]) for f in found], judge_from)
            seen_creeps[key] = result.creeps
    outcome.creeps += creeps.record(session, branch_id, machine_id, config_id, seen_creeps, window.at(), own_from)
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
    row = series_sql.detection_window(session, branch_id, machine_id, config_id) if use_cache else None
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
    window.put_runs(series_sql.window_runs(session, branch_id, machine_id, config_id, read), read)
    if use_cache:
        data = window.dumps()
        series_sql.save_detection_window(session, branch_id, machine_id, config_id, version, data)
        window_cache.remember(data, window)  # the analysis below only reads it
    return window


def window_version(settings: Settings) -> str:
    return version_of(detection_settings(settings), settings.detection_window_commits)


def _detect_around(session: Session, book: Book, branch_id: int, machine_id: int, config_id: int, late: int,
                   main_judge_from: int, first: int | None, settings: Settings, outcome: Outcome) -> int:
    """A commit uploaded late, older than the window: detection over a window centred on it
    (half the window size on each side). It judges only what lies before the main window's judged
    part (which stays that window's) and away from its own truncated edges; returns the end of
    what it judged."""
    half = max(1, settings.detection_window_commits // 2)
    measured = series_sql.measured_commits(session, branch_id, machine_id, config_id, half, before=late)
    measured += series_sql.measured_commits(session, branch_id, machine_id, config_id, half, after=late)
    positions = [p for p, _ in measured]
    window = Window()
    window.slide_to(measured)
    window.put_runs(series_sql.window_runs(session, branch_id, machine_id, config_id, positions), positions)
    judge_from = _judge_from(positions, first)
    judge_to = min(main_judge_from, positions[max(0, len(positions) - 1 - STALE_MARGIN)])
    log.info("detection: commit at position %s uploaded late (window starts at %s): analysed over positions %s..%s",
             late, main_judge_from, positions[0], positions[-1])
    # Changes only: suspects of a late window are left to the next detection that sees the commit
    # in its main window (confirmation sessions are for the newest commits, where verdicts are due).
    for key, (found, _) in window_changes(window, config_id, detection_settings(settings)).items():
        found = [f for f in found if f.first_bad[1] < main_judge_from]
        outcome.found += len(found)
        book.reconcile((config_id, *key), found, judge_from, outcome, judge_to=judge_to)
    return judge_to


def window_changes(window: Window, config_id: int, detection: DetectionSettings = DETECTION,
                   ) -> dict[tuple[str, str], tuple[list[Found], DetectionResult | None]]:
    """The changes of every series of a window, located on the branch, with the detection result
    that holds its suspects (None for series decided by the exact rule or not analysed)."""
    at = window.at()
    out = {}
    for (metric, backend), series in window.series().items():
        memo = window.memos.setdefault((metric, backend), SearchMemo())
        out[metric, backend] = _changes(series, metric, backend, config_id, at, memo, detection)
    return out


def _analyse(series: WindowSeries, metric: str, backend: str,
             memo: SearchMemo | None = None, detection: DetectionSettings = DETECTION) -> tuple[list[Change], DetectionResult | None]:
    """:func:`analysis.detect` on one series. A deterministic (sim) series is decided by the exact
    rule between consecutive commits, so only the pairs whose medians differ at all need the
    rule: the same changes as the whole series gives, at a cost that follows the changes, not the
    window. ``memo``: the series' main search at the last detection (analysis.detect: incremental)."""
    if backend != "sim":
        result = detect(series, metric, backend, detection, memo)
        for note in result.notes:
            log.debug("detection %s/%s: %s", metric, backend, note)
        return list(result.changes), result
    medians = series.medians
    changes = []
    for k in (np.flatnonzero(medians[1:] != medians[:-1]) + 1).tolist():
        pair = WindowSeries(commits=series.commits[k - 1:k + 1], samples=series.samples[k - 1:k + 1],
                            cached_medians=medians[k - 1:k + 1])
        changes.extend(detect(pair, metric, backend, detection).changes)
    return changes, None


def _changes(series: WindowSeries, metric: str, backend: str, config_id: int,
             at: dict[str, tuple[int, int]], memo: SearchMemo | None = None,
             detection: DetectionSettings = DETECTION) -> tuple[list[Found], DetectionResult | None]:
    known = catalogue.CATALOGUE.get(metric)
    if known is not None and not known.alerts:
        return [], None  # context for the explanations of other alerts (the catalogue says why)
    changes, result = _analyse(series, metric, backend, memo, detection)
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
