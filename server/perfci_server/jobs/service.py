"""Job lifecycle: scheduled per commit x machine x config, claimed under a lease, renewed, finished
by a result (results.service) or a failure report, and swept back to the queue when a lease expires."""

from __future__ import annotations

import logging
import zlib
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import Row
from sqlalchemy.orm import Session

from .. import dispatch
from ..configs import repository as config_sql
from ..configs.schemas import ConfigRead
from ..errors import Conflict, NotFound
from ..forge import statuses as forge_statuses
from ..identity import AgentIdentity, touch_agent
from ..machines import repository as machine_sql
from ..models import ACTIVE_STATES, CommitState, Job, JobPurpose, JobState, Run, RunStatus, utcnow
from ..settings import Settings
from . import repository as job_sql
from .schemas import ClaimedJob, JobDetail, JobOutcome, JobRead, PartnerJob, RunRead

log = logging.getLogger(__name__)


def schedule_commits(session: Session, commit_ids: Sequence[int], settings: Settings) -> int:
    """Queue a job for each commit x enabled machine x enabled config (idempotent)."""
    machines = machine_sql.enabled_ids(session)
    configs = config_sql.enabled_ids(session)
    created = job_sql.insert_missing_jobs(session, commit_ids, machines, configs, settings.max_attempts)
    log.info("scheduled %d job(s) for %d commit(s) x %d machine(s) x %d config(s)", created, len(commit_ids), len(machines), len(configs))
    if created:
        mark_measuring(session, commit_ids, machines, settings)
    return created


def schedule_for(session: Session, commit_ids: Sequence[int], machine_ids: Sequence[int], config_ids: Sequence[int],
                 settings: Settings) -> int:
    """The commits' own measurement on these machines x configs (idempotent): a merged-in parent
    whose level tells whose change a merge carries."""
    created = job_sql.insert_missing_jobs(session, commit_ids, machine_ids, config_ids, settings.max_attempts)
    if created:
        log.info("scheduled %d job(s) for %d commit(s) another commit's verdict waits on", created, len(commit_ids))
        mark_measuring(session, commit_ids, machine_ids, settings)
    return created


def measuring(machine: str) -> tuple[CommitState, str]:
    """The series verdict of a commit whose own measurement is queued or running on the machine."""
    return CommitState.PENDING, f"being measured on {machine}"


def mark_measuring(session: Session, commit_ids: Sequence[int], machine_ids: Sequence[int], settings: Settings) -> None:
    """``pending`` on the forge for each commit as soon as its own measurement is queued (a
    backfilled commit waits behind every other job: its status says so from the start)."""
    for machine_id, queued in sorted(job_sql.queued_own_jobs(session, commit_ids, machine_ids).items()):
        verdict = measuring(machine_sql.name_of(session, machine_id))
        forge_statuses.write_verdicts(session, machine_id, forge_statuses.SERIES, dict.fromkeys(queued, verdict), settings)


def backfill(session: Session, settings: Settings, machine_ids: Sequence[int] | None = None,
             config_ids: Sequence[int] | None = None) -> int:
    """History for a machine that enrolled or a config that was added: jobs for the newest
    ``backfill_commits`` commits of each tracked branch, oldest first, claimed after every other
    job (a push's own jobs come first). Commits that have their job already keep it."""
    if settings.backfill_commits == 0:
        return 0
    machines = list(machine_ids) if machine_ids is not None else machine_sql.enabled_ids(session)
    configs = list(config_ids) if config_ids is not None else config_sql.enabled_ids(session)
    commits = job_sql.newest_commits_of_branches(session, settings.backfill_commits)
    created = job_sql.insert_missing_jobs(session, commits, machines, configs, settings.max_attempts, JobPurpose.BACKFILL,
                                          f"backfill: the newest {settings.backfill_commits} commit(s) of each branch")
    if created:
        log.info("backfill: %d job(s) for %d commit(s) x %d machine(s) x %d config(s)", created, len(commits), len(machines), len(configs))
        mark_measuring(session, commits, machines, settings)
    return created


def job_ended(session: Session, pull_request_id: int | None) -> None:
    """After a job got its result or failed: a pull request it measured decides again once committed."""
    if pull_request_id is not None:
        dispatch.send_once_after_commit(session, dispatch.PULL_EVALUATE_TASK, pull_request_id)


def claim(session: Session, agent: AgentIdentity, settings: Settings) -> ClaimedJob | None:
    now = utcnow()
    lease_until = now + timedelta(seconds=settings.lease_seconds)
    rows = job_sql.claim_next(session, agent.machine_id, agent.id, agent.backends, now, lease_until)
    if not rows:
        return None
    claimed = rows[0]
    config = ConfigRead.model_validate(claimed._mapping)
    partner = None
    if len(rows) > 1:
        other = rows[1]
        partner = PartnerJob(job_id=other.job_id, attempt=other.attempt, commit=other.commit_sha)
        log.info("claimed jobs %d and %d together: measured interleaved", claimed.job_id, other.job_id)
    return ClaimedJob(
        job_id=claimed.job_id,
        attempt=claimed.attempt,
        lease_expires_at=lease_until,
        lease_seconds=settings.lease_seconds,
        repository=claimed.repository,
        clone_url=claimed.clone_url,
        commit=claimed.commit_sha,
        config=config.bench_config(),
        backend=config.backend,
        repetitions=claimed.job_repetitions,
        partner=partner,
        pair_seed=None if partner is None else pair_seed(claimed.job_id, partner.job_id, claimed.attempt),
    )


def pair_seed(job_id: int, partner_job_id: int, attempt: int) -> int:
    """The seed of an interleaved pair's order: drawn from the two jobs and the attempt, so a
    replay of the session knows it, and a new attempt gets a new order."""
    return zlib.crc32(f"{min(job_id, partner_job_id)}:{max(job_id, partner_job_id)}:{attempt}".encode())


def current_attempt(
    session: Session, agent: AgentIdentity, job_id: int, attempt: int, locked: Job | Row[Any] | None = None
) -> Job | Row[Any]:
    """The job, locked, provided ``attempt`` is the agent's live attempt at it; else 404/409.

    ``locked`` is a job the caller has already locked: a Job, or a row with its columns.
    """
    job = locked or job_sql.lock_job(session, job_id)
    if job is None or job.machine_id != agent.machine_id:
        raise NotFound(f"no job {job_id} for this agent's machine")
    if job.attempts != attempt or job.agent_id != agent.id or job.state not in ACTIVE_STATES:
        raise Conflict(
            f"attempt {attempt} of job {job_id} is no longer current (job is {job.state}, attempt {job.attempts}); "
            "its lease expired or it was finished"
        )
    return job


def renew_lease(session: Session, agent: AgentIdentity, job_id: int, attempt: int, settings: Settings) -> timedelta:
    until = utcnow() + timedelta(seconds=settings.lease_seconds)
    if not job_sql.renew_lease(session, job_id, attempt, agent.id, until):
        current_attempt(session, agent, job_id, attempt)  # raises the precise 404/409
    touch_agent(session, agent.id, utcnow())
    return timedelta(seconds=settings.lease_seconds)


def next_job_state(status: RunStatus, attempts: int, max_attempts: int) -> JobState:
    """The job's state after an attempt ended with ``status``.

    A build failure is deterministic (a later attempt builds the same commit), so it ends the job;
    run failures and agent errors are retried while attempts remain.
    """
    if status is RunStatus.OK:
        return JobState.DONE
    if status is RunStatus.BUILD_FAILED or attempts >= max_attempts:
        return JobState.FAILED
    return JobState.QUEUED


def finish_attempt(job: Job, run: Run, status: RunStatus) -> None:
    """Settle the job (loaded as ORM objects) after an attempt ended with ``status``."""
    run.status = status.value
    run.finished_at = run.finished_at or utcnow()
    job.state = next_job_state(status, job.attempts, job.max_attempts).value
    job.lease_expires_at = None
    job.agent_id = None if job.state == JobState.QUEUED.value else job.agent_id


def report_failure(session: Session, agent: AgentIdentity, job_id: int, attempt: int, reason: str, log_tail: str | None) -> JobOutcome:
    job = current_attempt(session, agent, job_id, attempt)
    run = job_sql.run_for_attempt(session, job_id, attempt)
    assert run is not None, "every claim creates its run"
    run.reason, run.log_tail, run.received_at = reason, log_tail, utcnow()
    finish_attempt(job, run, RunStatus.ERROR)
    return JobOutcome(job_id=job.id, attempt=attempt, job_state=job.state, run_status=run.status)


def release_attempt(session: Session, agent: AgentIdentity, job_id: int, attempt: int, reason: str) -> JobOutcome:
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
        purpose=job.purpose,
        round=job.round,
        reason=job.reason,
        partner_job_id=job.partner_job_id,
    )


def job_detail(session: Session, job_id: int) -> JobDetail:
    job = job_sql.job_with_context(session, job_id)
    if job is None:
        raise NotFound(f"no job {job_id}")
    runs = [RunRead.model_validate(r) for r in job_sql.runs_of(session, job_id)]
    return JobDetail(**job_read(job).model_dump(), runs=runs)
