"""Bisects on the server: create one (from the API or an alert group), advance it when results
arrive, read it.

The search itself is :mod:`perfci_core.analysis.bisect`; its state is stored on the row, and
:func:`advance` rebuilds the observations from the database each time: a commit's stored
repetitions on the bisect's machine x config (results already in the server are used as they
are), a build failure as a commit to skip, a job still queued or running as "wait". What the
search asks to measure becomes jobs for that machine (one per commit, the jobs table's rule; a
step that wants two new commits on a noisy backend makes them partner jobs, measured interleaved
in one session as ``perfci bisect --local`` does, of at least the pairs whose paired test can
reach alpha), so a commit cannot be re-measured here: the search runs as
:meth:`~perfci_core.analysis.bisect.Policy.measured_once` (no re-measurement; for noisy metrics
the repetitions of the config, every comparison one look at the whole alpha) — where more would
be needed it decides by the larger move and says so in its notes. What it hunts (``direction``)
is kept in the stored state, and moves against it are isolated with jobs the same way
(:mod:`perfci_core.analysis.bisect`).
"""

from __future__ import annotations

import logging
import math

from sqlalchemy.orm import Session

from perfci_core import metrics as catalogue
from perfci_core.analysis import bisect as core

from .. import dispatch
from ..configs import repository as config_sql
from ..errors import Conflict, NotFound, Unprocessable
from ..jobs import repository as job_sql
from ..jobs import service as job_service
from ..models import Bisect, BisectStatus, JobPurpose, JobState, utcnow
from ..repos import repository as repo_sql
from ..settings import Settings
from . import repository as bisect_sql
from .schemas import BisectCreate, BisectRead, CommitRef, OpposingMove

log = logging.getLogger(__name__)

ADVANCE_TASK = "perfci.bisect.advance"
ADVANCE_RUNNING_TASK = "perfci.bisect.advance_running"


# --- create --------------------------------------------------------------------------------------


def create(session: Session, data: BisectCreate) -> Bisect:
    repository = repo_sql.by_name(session, data.repository) if data.repository else repo_sql.by_id(session, data.repository_id or 0)
    if repository is None:
        raise NotFound(f"no repository {data.repository or data.repository_id!r}")
    branch = repo_sql.branch(session, repository.id, data.branch)
    if branch is None:
        raise NotFound(f"no branch {data.branch!r} in repository {repository.name!r}")
    machine_id = data.machine_id if data.machine_id is not None else _machine_id_by_name(session, data.machine or "")
    config = bisect_sql.config_by_name(session, data.config)
    if config is None:
        raise NotFound(f"no benchmark config {data.config!r}")
    good, bad = (repo_sql.commit_by_sha(session, repository.id, sha) for sha in (data.good, data.bad))
    for sha, commit in ((data.good, good), (data.bad, bad)):
        if commit is None:
            raise NotFound(f"no commit {sha} in repository {repository.name!r}")
    assert good is not None and bad is not None
    direction = data.direction or _alert_direction(session, data.alert_group_id, data.metric)
    return _start(session, repository.id, branch.id, machine_id, config.id, config.backend, data.metric, data.backend,
                  good.id, bad.id, data.alert_group_id, direction)


def _alert_direction(session: Session, group_id: int | None, metric: str) -> str:
    """The hunted kind a bisect of an alert group defaults to: its alert's direction on the metric."""
    found = bisect_sql.alert_group_with_rows(session, group_id) if group_id is not None else None
    rows = [r for r in found[1] if r.metric == metric] if found else []
    return rows[0].direction if rows and rows[0].direction in ("regression", "improvement") else "any"


def _machine_id_by_name(session: Session, name: str) -> int:
    machines = bisect_sql.machines_named(session, name)
    if not machines:
        raise NotFound(f"no machine named {name!r}")
    if len(machines) > 1:
        raise Conflict(f"{len(machines)} machines are named {name!r}; give machine_id", [m.id for m in machines])
    return machines[0].id


def _resolve_backend(metric: catalogue.Metric, requested: str, config_backend: str) -> str:
    if requested != "auto":
        backend = requested
    elif config_backend != "auto":
        backend = config_backend
    elif len(metric.backends) == 1:
        backend = next(iter(metric.backends)).value
    else:
        raise Unprocessable(f"say which backend's {metric.name} to bisect "
                            f"({', '.join(sorted(b.value for b in metric.backends))}): the config lets agents choose")
    if catalogue.Backend(backend) not in metric.backends:
        raise Unprocessable(f"backend {backend} does not measure {metric.name}")
    return backend


def _start(session: Session, repository_id: int, branch_id: int, machine_id: int, config_id: int, config_backend: str,
           metric_name: str, backend: str, good_id: int, bad_id: int, alert_group_id: int | None,
           direction: str = "any") -> Bisect:
    try:
        metric = catalogue.get(metric_name)
    except KeyError as exc:
        raise Unprocessable(str(exc.args[0])) from None
    backend = _resolve_backend(metric, backend, config_backend)
    first, last = (bisect_sql.position(session, branch_id, cid) for cid in (good_id, bad_id))
    if first is None or last is None:
        raise Unprocessable("good and bad must both be commits of the branch")
    if first >= last:
        raise Unprocessable("good must come before bad on the branch")
    commit_ids = bisect_sql.commit_ids_between(session, branch_id, first, last)
    bisect = bisect_sql.add(session, Bisect(
        repository_id=repository_id, branch_id=branch_id, machine_id=machine_id, config_id=config_id,
        metric=metric.name, backend=backend, good_commit_id=good_id, bad_commit_id=bad_id, commit_ids=commit_ids,
        alert_group_id=alert_group_id, status=BisectStatus.RUNNING.value, message="starting",
        state=core.State(len(commit_ids), direction=direction).to_dict(), scheduled=[], result={}, repetitions=0,
    ))
    log.info("bisect %d: %s (%s, hunting %s) over %d commits on machine %d", bisect.id, metric.name, backend, direction,
             len(commit_ids), machine_id)
    dispatch.send_after_commit(session, ADVANCE_TASK, bisect.id)
    return bisect


def start_for_alert_group(session: Session, group_id: int, metric: str | None = None) -> Bisect | None:
    """Start (or return the existing) bisect of an alert group's range on its machine, for its
    first regressed metric (``metric`` picks another). None when the group has no last good
    commit (the change is at the start of the series) or no metric rows. Never commits."""
    found = bisect_sql.alert_group_with_rows(session, group_id)
    if found is None:
        raise NotFound(f"no alert group {group_id}")
    group, rows = found
    existing = bisect_sql.for_alert_group(session, group_id)
    if existing is not None:
        return existing
    if group.last_good_commit_id is None or not rows:
        log.info("alert group %d: nothing to bisect (no last good commit or no metric)", group_id)
        return None
    candidates = [r for r in rows if metric is None or r.metric == metric]
    if not candidates:
        raise NotFound(f"alert group {group_id} has no {metric} alert")
    row = next((r for r in candidates if r.direction == "regression"), candidates[0])
    direction = row.direction if row.direction in ("regression", "improvement") else "any"
    return _start(session, group.repository_id, group.branch_id, group.machine_id, row.config_id, row.backend,
                  row.metric, row.backend, group.last_good_commit_id, group.first_bad_commit_id, group.id, direction)


# --- advance -------------------------------------------------------------------------------------


def _observations(session: Session, bisect: Bisect) -> tuple[dict[int, core.Observation], set[int]]:
    """What the database knows per index of the range; and the indices whose job is still pending."""
    ids = bisect.commit_ids
    values = bisect_sql.values(session, ids, bisect.machine_id, bisect.config_id, bisect.metric, bisect.backend)
    jobs = bisect_sql.job_states(session, ids, bisect.machine_id, bisect.config_id)
    obs: dict[int, core.Observation] = {}
    pending: set[int] = set()
    for index, commit_id in enumerate(ids):
        job = jobs.get(commit_id)
        stored = values.get(commit_id, [])
        if job is not None and (bisect_sql.unbuildable_runs(job[1]) or job[0] == JobState.FAILED.value):
            obs[index] = core.Observation(unbuildable=True)  # did not build, or never produced a result
        elif stored or (job is not None and job[0] == JobState.DONE.value):
            obs[index] = core.Observation([v for v, _ in stored], exhausted=True,  # one job per commit: no more repetitions
                                          sessions=[k for _, k in stored])
        elif job is not None:
            pending.add(index)
    return obs, pending


def advance(session: Session, bisect_id: int, settings: Settings) -> str:
    """Take the search as far as the stored results allow; schedule what it needs next."""
    bisect = bisect_sql.lock(session, bisect_id)
    if bisect is None:
        return "gone"
    if bisect.status != BisectStatus.RUNNING.value:
        return bisect.status
    obs, pending = _observations(session, bisect)
    state = core.State.from_dict(bisect.state)
    config = config_sql.by_id(session, bisect.config_id)
    reps = config.repetitions if config is not None else 1
    policy = core.Policy.measured_once(bisect.backend, bisect.metric, reps, direction=state.direction)
    search = core.Bisection(len(bisect.commit_ids), policy, state, obs)
    step = search.next()
    bisect.state = search.state.to_dict()
    bisect.repetitions = sum(len(o.samples) for o in obs.values())
    if isinstance(step, core.Outcome):
        _finish(session, bisect, step)
        return bisect.status
    wanted = [index for index, _ in step.wants]
    new = [i for i in wanted if i not in pending]
    if new:
        commit_ids = [bisect.commit_ids[i] for i in new]
        job_sql.insert_missing_jobs(session, commit_ids, [bisect.machine_id], [bisect.config_id], settings.max_attempts,
                                    JobPurpose.BISECT, f"bisect {bisect.id}: {step.why}")
        job_service.mark_measuring(session, commit_ids, [bisect.machine_id], settings)
        if len(commit_ids) == 2 and bisect.backend != catalogue.Backend.SIM.value:
            # A step comparing two new commits: one interleaved session (the claim leases both), as the local bisect
            # does, of at least the pairs whose paired test can reach alpha (8 at 0.01; fewer decide on all the runs).
            job_sql.link_partners(session, bisect.machine_id, bisect.config_id, [((commit_ids[0], 0), (commit_ids[1], 0))],
                                  repetitions=max(reps, policy.pairs_needed()))
        bisect.scheduled = sorted(set(bisect.scheduled) | set(new))
    bisect.message = f"{step.why}: waiting for {len(wanted)} result(s)"
    log.info("bisect %d: %s (scheduled %s)", bisect.id, bisect.message, new)
    return "waiting"


def _finish(session: Session, bisect: Bisect, outcome: core.Outcome) -> None:
    ids = bisect.commit_ids
    bisect.status = outcome.status
    bisect.message = outcome.message
    bisect.parent_commit_id = ids[outcome.parent] if outcome.parent is not None else None
    bisect.culprit_commit_id = ids[outcome.culprit] if outcome.culprit is not None else None
    bisect.result = {
        "parent": outcome.parent, "culprit": outcome.culprit, "skipped": list(outcome.skipped), "kind": outcome.kind.value,
        "change": core.comparison_dict(outcome.step), "overall": core.comparison_dict(outcome.overall), "notes": list(outcome.notes),
        "direction": outcome.direction, "opposing": list(outcome.opposing),
    }
    bisect.finished_at = utcnow()
    log.info("bisect %d finished: %s — %s", bisect.id, bisect.status, bisect.message)


def job_finished(session: Session, machine_id: int, config_id: int) -> None:
    """After a result of a machine x config job is stored: advance that machine x config's running bisects
    (after commit, so the task sees the result)."""
    for bisect_id in bisect_sql.running_ids(session, machine_id, config_id):
        dispatch.send_after_commit(session, ADVANCE_TASK, bisect_id)


# --- read ----------------------------------------------------------------------------------------


def read(session: Session, bisect: Bisect) -> BisectRead:
    names = bisect_sql.describe(session, bisect)
    ids = bisect.commit_ids
    result = bisect.result or {}
    state = bisect.state or {}
    steps = state.get("steps", [])
    touched = {0, len(ids) - 1} | {s["mid"] for s in steps if s.get("mid") is not None}
    wanted = {i for i in (result.get("parent"), result.get("culprit")) if i is not None}
    moves = result.get("opposing") or []
    named = {m[k] for m in moves for k in ("good", "bad", "parent", "culprit") if m.get(k) is not None}
    named |= {i for m in moves for i in m.get("skipped", [])}
    commits = bisect_sql.commits(session, [ids[i] for i in touched | wanted | named | set(result.get("skipped", []))])

    def ref(index: int | None) -> CommitRef | None:
        if index is None:
            return None
        c = commits[ids[index]]
        return CommitRef(sha=c.sha, index=index, author=c.author_name, subject=c.message.splitlines()[0] if c.message else "")

    return BisectRead(
        id=bisect.id, status=bisect.status, message=bisect.message, repository_id=bisect.repository_id, **names,
        machine_id=bisect.machine_id, metric=bisect.metric, backend=bisect.backend,
        good=commits[ids[0]].sha, bad=commits[ids[-1]].sha, range_length=len(ids),
        expected_builds=math.ceil(math.log2(len(ids))) + 2, builds=len(bisect.scheduled),
        reused=len(touched - set(bisect.scheduled)), repetitions=bisect.repetitions,
        culprit=ref(result.get("culprit")), parent=ref(result.get("parent")), kind=result.get("kind"),
        change=result.get("change"), overall=result.get("overall"),
        skipped=[commits[ids[i]].sha for i in result.get("skipped", [])], steps=steps,
        notes=result.get("notes", state.get("notes", [])), alert_group_id=bisect.alert_group_id,
        direction=result.get("direction", state.get("direction", "any")),
        opposing=[OpposingMove(**{**m, **{k: ref(m.get(k)) for k in ("good", "bad", "parent", "culprit")},
                                  "skipped": [commits[ids[i]].sha for i in m.get("skipped", [])]}) for m in moves],
        created_at=bisect.created_at, updated_at=bisect.updated_at, finished_at=bisect.finished_at,
    )


def get(session: Session, bisect_id: int) -> Bisect:
    bisect = bisect_sql.get(session, bisect_id)
    if bisect is None:
        raise NotFound(f"no bisect {bisect_id}")
    return bisect


def running_ids(session: Session) -> list[int]:
    return bisect_sql.running_ids(session)
