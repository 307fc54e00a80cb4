"""SQL for pull requests and the jobs that measure them."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlalchemy import Row, delete, func, select
from sqlalchemy.orm import Session, aliased

from .. import db
from ..models import Job, JobState, MetricValue, PullRequest, PullState, Run, RunStatus, Sample, utcnow


def lock_or_create(session: Session, repository_id: int, number: int, defaults: dict[str, Any]) -> PullRequest:
    """The pull request row, created on its first event, locked for the transaction."""
    now = utcnow()
    row = {"repository_id": repository_id, "number": number, "state": PullState.OPEN.value, "waiting_for": "",
           "comment_body": "", "comment_version": 0, "comment_error": "", "public_id": secrets.token_urlsafe(16),
           "created_at": now, "updated_at": now, **defaults}
    db.insert_ignoring_conflicts(session, PullRequest.__table__, [row], ["repository_id", "number"])
    statement = select(PullRequest).where(PullRequest.repository_id == repository_id, PullRequest.number == number)
    return session.scalars(statement.with_for_update().execution_options(populate_existing=True)).one()


def lock(session: Session, pull_request_id: int) -> PullRequest | None:
    statement = select(PullRequest).where(PullRequest.id == pull_request_id).with_for_update()
    return session.scalar(statement.execution_options(populate_existing=True))


def by_public_id(session: Session, public_id: str) -> PullRequest | None:
    return session.scalar(select(PullRequest).where(PullRequest.public_id == public_id))


def open_for_head(session: Session, commit_id: int) -> list[PullRequest]:
    statement = select(PullRequest).where(PullRequest.head_commit_id == commit_id, PullRequest.state == PullState.OPEN.value)
    return list(session.scalars(statement.order_by(PullRequest.id)))


def drop_queued_jobs(session: Session, pull_request_id: int) -> int:
    """Delete the pull request's jobs no agent has taken yet (a new head supersedes them, a close
    ends them); leased ones finish and are ignored. Returns how many were dropped."""
    statement = delete(Job).where(Job.pull_request_id == pull_request_id, Job.state == JobState.QUEUED.value).returning(Job.id)
    return len(session.execute(statement).all())


def has_pair(session: Session, pull_request_id: int, head_commit_id: int, machine_id: int, config_id: int) -> bool:
    """Whether the head has its job with a merge-base partner on the machine x config."""
    statement = select(Job.id).where(Job.pull_request_id == pull_request_id, Job.commit_id == head_commit_id,
                                     Job.machine_id == machine_id, Job.config_id == config_id,
                                     Job.partner_job_id.is_not(None)).limit(1)
    return session.scalar(statement) is not None


def next_pull_round(session: Session, commit_id: int, machine_id: int, config_id: int) -> int:
    """A round of its own for one more pull-request measurement of the commit: below every
    existing one (round 0 is the commit's own measurement, rounds > 0 confirmation rounds)."""
    lowest = session.scalar(select(func.min(Job.round)).where(Job.commit_id == commit_id, Job.machine_id == machine_id,
                                                              Job.config_id == config_id))
    return min(0, lowest or 0) - 1


class Pair(NamedTuple):
    machine_id: int
    config_id: int
    head_job: int
    head_state: str
    base_job: int
    base_state: str


def pairs_of_head(session: Session, pull_request_id: int, head_commit_id: int) -> list[Pair]:
    """The head's jobs of the pull request with their partners (the merge-base's jobs). A head job
    whose partner was dropped (the pull request was closed while it ran) is no pair: left out."""
    base = aliased(Job)
    statement = (
        select(Job.machine_id, Job.config_id, Job.id, Job.state, base.id, base.state)
        .join(base, base.id == Job.partner_job_id)
        .where(Job.pull_request_id == pull_request_id, Job.commit_id == head_commit_id)
        .order_by(Job.machine_id, Job.config_id, Job.id)
    )
    return [Pair(*row) for row in session.execute(statement)]


class RunValues(NamedTuple):
    run_id: int
    paired_with: int | None
    values: dict[tuple[str, str], list[float | None]]  # (metric, backend) -> the repetitions' values


def ok_runs(session: Session, job_ids: Sequence[int]) -> dict[int, RunValues]:
    """Per job: its successful run's values, by (metric, backend), in repetition order."""
    statement = (
        select(Run.job_id, Run.id, Run.paired_with, MetricValue.metric, MetricValue.backend, MetricValue.rep_values)
        .join(MetricValue, MetricValue.run_id == Run.id)
        .where(Run.job_id.in_(list(job_ids)), Run.status == RunStatus.OK.value)
    )
    out: dict[int, RunValues] = {}
    for job_id, run_id, paired_with, metric, backend, values in session.execute(statement):
        out.setdefault(job_id, RunValues(run_id, paired_with, {})).values[(metric, backend)] = list(values)
    return out


def last_runs(session: Session, job_ids: Sequence[int]) -> dict[int, Row[Any]]:
    """Per job: (status, reason) of its last attempt."""
    statement = select(Run.job_id, Run.status, Run.reason).where(Run.job_id.in_(list(job_ids))).order_by(Run.job_id, Run.attempt)
    return {row.job_id: row for row in session.execute(statement)}


def first_sample_raw(session: Session, run_id: int) -> dict[str, Any]:
    raw = session.scalar(select(Sample.raw).where(Sample.run_id == run_id).order_by(Sample.rep).limit(1))
    return raw or {}
