"""Job lifecycle: scheduled per commit x machine x config, claimed under a lease, renewed, finished
by a result (results.service) or a failure report, and swept back to the queue when a lease expires."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy.orm import Session

from ..configs import repository as config_sql
from ..configs.schemas import ConfigRead
from ..errors import Conflict, NotFound
from ..machines import repository as machine_sql
from ..models import ACTIVE_STATES, Agent, Job, JobState, Run, RunStatus, utcnow
from ..settings import Settings
from . import repository as job_sql
from .schemas import ClaimedJob, JobDetail, JobOutcome, JobRead, RunRead

log = logging.getLogger(__name__)


def schedule_commits(session: Session, commit_ids: Sequence[int], settings: Settings) -> int:
    """Queue a job for each commit x enabled machine x enabled config (idempotent)."""
    machines = machine_sql.enabled_ids(session)
    configs = config_sql.enabled_ids(session)
    created = job_sql.insert_missing_jobs(session, commit_ids, machines, configs, settings.max_attempts)
    log.info("scheduled %d job(s) for %d commit(s) x %d machine(s) x %d config(s)", created, len(commit_ids), len(machines), len(configs))
    return created


def claim(session: Session, agent: Agent, settings: Settings) -> ClaimedJob | None:
    now = utcnow()
    agent.last_seen_at = now
    if not agent.machine.enabled:
        return None
    lease_until = now + timedelta(seconds=settings.lease_seconds)
    claimed = job_sql.claim_next(session, agent.machine_id, agent.id, agent.backends, lease_until)
    if claimed is None:
        return None
    job_id, attempt = claimed
    job_sql.add_run(session, job_id, attempt, agent.id)
    commit, repo, config_row = job_sql.claim_context(session, job_id)
    config = ConfigRead.model_validate(config_row)
    return ClaimedJob(
        job_id=job_id,
        attempt=attempt,
        lease_expires_at=lease_until,
        lease_seconds=settings.lease_seconds,
        repository=repo.name,
        clone_url=repo.clone_url,
        commit=commit.sha,
        config=config.bench_config(),
        backend=config.backend,
        repetitions=config.repetitions,
    )


def current_attempt(session: Session, agent: Agent, job_id: int, attempt: int, locked: Job | None = None) -> Job:
    """The job, locked, provided ``attempt`` is the agent's live attempt at it; else 404/409."""
    job = locked or job_sql.lock_job(session, job_id)
    if job is None or job.machine_id != agent.machine_id:
        raise NotFound(f"no job {job_id} for this agent's machine")
    if job.attempts != attempt or job.agent_id != agent.id or job.state not in ACTIVE_STATES:
        raise Conflict(
            f"attempt {attempt} of job {job_id} is no longer current (job is {job.state}, attempt {job.attempts}); "
            "its lease expired or it was finished"
        )
    return job


def renew_lease(session: Session, agent: Agent, job_id: int, attempt: int, settings: Settings) -> timedelta:
    until = utcnow() + timedelta(seconds=settings.lease_seconds)
    if not job_sql.renew_lease(session, job_id, attempt, agent.id, until):
        current_attempt(session, agent, job_id, attempt)  # raises the precise 404/409
    agent.last_seen_at = utcnow()
    return timedelta(seconds=settings.lease_seconds)


def finish_attempt(job: Job, run: Run, status: RunStatus) -> None:
    """Settle the job after an attempt ended with ``status``.

    A build failure is deterministic (a later attempt builds the same commit), so it ends the job;
    run failures and agent errors are retried while attempts remain.
    """
    run.status = status.value
    run.finished_at = run.finished_at or utcnow()
    if status is RunStatus.OK:
        job.state = JobState.DONE.value
    elif status is RunStatus.BUILD_FAILED or job.attempts >= job.max_attempts:
        job.state = JobState.FAILED.value
    else:
        job.state = JobState.QUEUED.value
    job.lease_expires_at = None
    job.agent_id = None if job.state == JobState.QUEUED.value else job.agent_id


def report_failure(session: Session, agent: Agent, job_id: int, attempt: int, reason: str, log_tail: str | None) -> JobOutcome:
    job = current_attempt(session, agent, job_id, attempt)
    run = job_sql.run_for_attempt(session, job_id, attempt)
    assert run is not None, "every claim creates its run"
    run.reason, run.log_tail, run.received_at = reason, log_tail, utcnow()
    finish_attempt(job, run, RunStatus.ERROR)
    return JobOutcome(job_id=job.id, attempt=attempt, job_state=job.state, run_status=run.status)


def release_attempt(session: Session, agent: Agent, job_id: int, attempt: int, reason: str) -> JobOutcome:
    """Requeue the job now instead of when the lease expires. A release is the agent's choice (it
    is stopping), not the job's fault, so it does not use up one of the job's attempts."""
    job = current_attempt(session, agent, job_id, attempt)
    run = job_sql.run_for_attempt(session, job_id, attempt)
    assert run is not None, "every claim creates its run"
    run.status, run.reason = RunStatus.EXPIRED.value, f"released by the agent before a result: {reason}"
    run.received_at = run.finished_at = utcnow()
    job.max_attempts += 1  # the attempt counter only grows (run rows are keyed by it)
    job.state, job.lease_expires_at, job.agent_id = JobState.QUEUED.value, None, None
    return JobOutcome(job_id=job.id, attempt=attempt, job_state=job.state, run_status=run.status)


def requeue_expired(session: Session) -> tuple[list[int], list[int]]:
    requeued, failed = job_sql.expire_leases(session, utcnow())
    if requeued or failed:
        log.info("lease sweep: requeued %s, failed %s", requeued, failed)
    return requeued, failed


def job_read(job: Job) -> JobRead:
    return JobRead(
        id=job.id,
        commit=job.commit.sha,
        repository_id=job.commit.repository_id,
        machine_id=job.machine_id,
        config=job.config.name,
        state=job.state,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        agent_id=job.agent_id,
        lease_expires_at=job.lease_expires_at,
        created_at=job.created_at,
        updated_at=job.updated_at,
    )


def job_detail(session: Session, job_id: int) -> JobDetail:
    job = job_sql.job_with_context(session, job_id)
    if job is None:
        raise NotFound(f"no job {job_id}")
    runs = [RunRead.model_validate(r) for r in job_sql.runs_of(session, job_id)]
    return JobDetail(**job_read(job).model_dump(), runs=runs)
