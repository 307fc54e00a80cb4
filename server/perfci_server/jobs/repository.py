"""SQL for jobs and runs: bulk scheduling, the atomic claim, lease renewal and the expiry sweep."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Select, case, select, update
from sqlalchemy.orm import Session, joinedload

from .. import db
from ..models import ACTIVE_STATES, BenchConfig, Commit, Job, JobState, Repository, Run, RunStatus, utcnow


def insert_missing_jobs(
    session: Session, commit_ids: Sequence[int], machine_ids: Sequence[int], config_ids: Sequence[int], max_attempts: int
) -> int:
    """One queued job per commit x machine x config that has none yet; returns how many were added."""
    now = utcnow()
    rows = [
        {
            "commit_id": commit_id,
            "machine_id": machine_id,
            "config_id": config_id,
            "state": JobState.QUEUED.value,
            "attempts": 0,
            "max_attempts": max_attempts,
            "created_at": now,
            "updated_at": now,
        }
        for commit_id in commit_ids
        for machine_id in machine_ids
        for config_id in config_ids
    ]
    if not rows:
        return 0
    result = db.insert_ignoring_conflicts(
        session, Job.__table__, rows, ["commit_id", "machine_id", "config_id"], returning=Job.__table__.c.id
    )
    return len(result.all())


def claim_next(
    session: Session, machine_id: int, agent_id: int, backends: Sequence[str], lease_until: datetime
) -> tuple[int, int] | None:
    """Lease the oldest queued job of this machine whose backend the agent offers: (job id, attempt).

    One UPDATE whose target is chosen by a sub-select. On PostgreSQL the sub-select takes
    ``FOR UPDATE SKIP LOCKED``, so concurrent claimers each lock a different row instead of
    queueing on the same one. SQLite renders no row locks, but it runs one writer at a time and
    the statement is atomic; the outer ``state = 'queued'`` re-check keeps it correct either way.
    """
    # Core statements on the tables: the ORM-enabled UPDATE would also try to synchronise a
    # session that holds no jobs, at several times the cost of the statement itself.
    jobs, configs = Job.__table__, BenchConfig.__table__
    next_job = (
        select(jobs.c.id)
        .join(configs, configs.c.id == jobs.c.config_id)
        .where(
            jobs.c.machine_id == machine_id,
            jobs.c.state == JobState.QUEUED.value,
            configs.c.backend.in_(["auto", *backends]),
        )
        .order_by(jobs.c.id)
        .limit(1)
        .with_for_update(skip_locked=True, of=jobs)
        .scalar_subquery()
    )
    statement = (
        update(jobs)
        .where(jobs.c.id == next_job, jobs.c.state == JobState.QUEUED.value)
        .values(
            state=JobState.LEASED.value,
            attempts=jobs.c.attempts + 1,
            agent_id=agent_id,
            lease_expires_at=lease_until,
            updated_at=utcnow(),
        )
        .returning(jobs.c.id, jobs.c.attempts)
    )
    row = session.execute(statement).first()
    return (row[0], row[1]) if row else None


def add_run(session: Session, job_id: int, attempt: int, agent_id: int) -> None:
    row = {"job_id": job_id, "attempt": attempt, "agent_id": agent_id, "status": RunStatus.RUNNING.value, "backend_reason": "", "created_at": utcnow()}
    session.execute(Run.__table__.insert().values(row))


def job_with_context(session: Session, job_id: int) -> Job | None:
    """The job with its commit, machine and config loaded (relationships never lazy-load)."""
    statement = (
        select(Job)
        .options(joinedload(Job.commit), joinedload(Job.machine), joinedload(Job.config))
        .where(Job.id == job_id)
    )
    return session.scalar(statement)


def claim_context(session: Session, job_id: int) -> tuple[Commit, Repository, BenchConfig]:
    """The commit, repository and config a claimed job needs, in one query."""
    statement = (
        select(Commit, Repository, BenchConfig)
        .join(Job, Job.commit_id == Commit.id)
        .join(Repository, Repository.id == Commit.repository_id)
        .join(BenchConfig, BenchConfig.id == Job.config_id)
        .where(Job.id == job_id)
    )
    commit, repository, config = session.execute(statement).one()
    return commit, repository, config


def lock_job(session: Session, job_id: int) -> Job | None:
    """The job row, locked for the rest of the transaction (serialises upload/failure against the sweep)."""
    return session.scalar(select(Job).where(Job.id == job_id).with_for_update())


def lock_job_for_result(session: Session, job_id: int, attempt: int) -> tuple[Job, Run | None, Commit, BenchConfig] | None:
    """As :func:`lock_job` (only the job row is locked), with the run of ``attempt``, the commit and
    the config a result is checked against: one round trip for the upload instead of four."""
    statement = (
        select(Job, Run, Commit, BenchConfig)
        .join(Commit, Commit.id == Job.commit_id)
        .join(BenchConfig, BenchConfig.id == Job.config_id)
        .outerjoin(Run, (Run.job_id == Job.id) & (Run.attempt == attempt))
        .where(Job.id == job_id)
        .with_for_update(of=Job)
    )
    row = session.execute(statement).first()
    return (row[0], row[1], row[2], row[3]) if row else None


def renew_lease(session: Session, job_id: int, attempt: int, agent_id: int, until: datetime) -> bool:
    statement = (
        update(Job)
        .where(Job.id == job_id, Job.attempts == attempt, Job.agent_id == agent_id, Job.state.in_(ACTIVE_STATES))
        .values(lease_expires_at=until, state=JobState.RUNNING.value, updated_at=utcnow())
        .returning(Job.id)
    )
    return session.execute(statement).first() is not None


def run_for_attempt(session: Session, job_id: int, attempt: int) -> Run | None:
    return session.scalar(select(Run).where(Run.job_id == job_id, Run.attempt == attempt))


def expire_leases(session: Session, now: datetime) -> tuple[list[int], list[int]]:
    """Requeue active jobs whose lease ran out, or fail them when no attempts are left.

    Returns (requeued ids, failed ids). Rows locked by an in-flight upload are skipped: that
    upload either completes the job or finds it requeued on the next sweep.
    """
    expired = session.execute(
        select(Job.id, Job.attempts, Job.max_attempts)
        .where(Job.state.in_(ACTIVE_STATES), Job.lease_expires_at < now)
        .order_by(Job.id)
        .with_for_update(skip_locked=True)
    ).all()
    if not expired:
        return [], []
    ids = [row.id for row in expired]
    session.execute(
        update(Run)
        .where(Run.job_id.in_(ids), Run.status == RunStatus.RUNNING.value)
        .values(status=RunStatus.EXPIRED.value, reason="lease expired before a result arrived", finished_at=now)
    )
    session.execute(
        update(Job)
        .where(Job.id.in_(ids))
        .values(
            state=case((Job.attempts >= Job.max_attempts, JobState.FAILED.value), else_=JobState.QUEUED.value),
            agent_id=None,
            lease_expires_at=None,
            updated_at=now,
        )
    )
    failed = [row.id for row in expired if row.attempts >= row.max_attempts]
    requeued = [row.id for row in expired if row.attempts < row.max_attempts]
    return requeued, failed


def jobs_statement(
    state: str | None = None, machine_id: int | None = None, config_id: int | None = None, commit_id: int | None = None
) -> Select[tuple[Job]]:
    statement = select(Job).options(joinedload(Job.commit), joinedload(Job.config)).order_by(Job.id.desc())
    if state is not None:
        statement = statement.where(Job.state == state)
    if machine_id is not None:
        statement = statement.where(Job.machine_id == machine_id)
    if config_id is not None:
        statement = statement.where(Job.config_id == config_id)
    if commit_id is not None:
        statement = statement.where(Job.commit_id == commit_id)
    return statement


def runs_of(session: Session, job_id: int) -> list[Run]:
    return list(session.scalars(select(Run).where(Run.job_id == job_id).order_by(Run.attempt)))
