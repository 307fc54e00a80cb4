"""SQL of the forge room: commit statuses (verdicts per commit x machine and their delivery), and
the pull request whose comment is being posted."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Row, and_, exists, func, select, text
from sqlalchemy.orm import Session

from .. import db
from ..models import ACTIVE_STATES, Commit, CommitState, CommitStatus, Delivery, Job, JobState, PullRequest, Repository, StatusScope, utcnow


def commits_with_repository(session: Session, commit_ids: Sequence[int]) -> Sequence[Row[Any]]:
    """(commit id, sha, repository id, repository name, forge) of each commit."""
    statement = (
        select(Commit.id, Commit.sha, Repository.id.label("repository_id"), Repository.name, Repository.forge)
        .join(Repository, Repository.id == Commit.repository_id)
        .where(Commit.id.in_(list(commit_ids)))
        .order_by(Commit.id)
    )
    return session.execute(statement).all()


def insert_missing_statuses(session: Session, machine_id: int, rows: list[dict[str, Any]]) -> set[int]:
    """Create the (commit, machine, scope, base branch) rows that do not exist yet; returns the commit ids created."""
    if not rows:
        return set()
    now = utcnow()
    full = [{"machine_id": machine_id, "version": 1, "attempts": 0, "last_error": "", "created_at": now,
             "updated_at": now, **row} for row in rows]
    inserted = db.insert_ignoring_conflicts(session, CommitStatus.__table__, full, ["commit_id", "machine_id", "scope", "base_branch"],
                                            returning=CommitStatus.__table__.c.commit_id)
    return {row[0] for row in inserted}


def lock_statuses(session: Session, machine_id: int, commit_ids: Sequence[int], scope: StatusScope,
                  base_branch: str) -> Sequence[CommitStatus]:
    """The machine's status rows of these commits about one subject, locked in commit order."""
    statement = (
        select(CommitStatus)
        .where(CommitStatus.machine_id == machine_id, CommitStatus.commit_id.in_(list(commit_ids)),
               CommitStatus.scope == scope.value, CommitStatus.base_branch == base_branch)
        .order_by(CommitStatus.commit_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    return session.scalars(statement).all()


def status_for_delivery(session: Session, status_id: int) -> Row[Any] | None:
    """(status, sha, project name, forge) of one status row."""
    statement = (
        select(CommitStatus, Commit.sha, Repository.name, Repository.forge)
        .join(Commit, Commit.id == CommitStatus.commit_id)
        .join(Repository, Repository.id == CommitStatus.repository_id)
        .where(CommitStatus.id == status_id)
    )
    return session.execute(statement).first()


def lock_by_id(session: Session, status_id: int) -> CommitStatus | None:
    """The status row, locked and read afresh (a newer verdict may have been written since the
    session first read it)."""
    statement = select(CommitStatus).where(CommitStatus.id == status_id).with_for_update()
    return session.scalar(statement.execution_options(populate_existing=True))


def serialise_posts(session: Session, status_id: int) -> None:
    """One post of a status at a time until the transaction ends (PostgreSQL advisory lock): each
    post sends the newest verdict it finds, so a slow post of an older one never reaches the forge
    after a newer one. The status row itself stays free for the deciders meanwhile. SQLite runs
    one writer at a time anyway."""
    if not db.is_postgresql(session):
        return
    digest = hashlib.blake2b(f"perfci.status-post:{status_id}".encode(), digest_size=8).digest()
    session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": int.from_bytes(digest, "big", signed=True)})


def undelivered(session: Session, older_than: datetime, limit: int) -> list[int]:
    statement = (
        select(CommitStatus.id)
        .where(CommitStatus.delivery == Delivery.PENDING.value, CommitStatus.updated_at < older_than)
        .order_by(CommitStatus.updated_at)
        .limit(limit)
    )
    return list(session.scalars(statement))


def statuses_of(session: Session, commit_id: int, scope: StatusScope, base_branch: str) -> list[CommitStatus]:
    statement = select(CommitStatus).where(CommitStatus.commit_id == commit_id, CommitStatus.scope == scope.value,
                                           CommitStatus.base_branch == base_branch)
    return list(session.scalars(statement.order_by(CommitStatus.machine_id)))


def by_public_id(session: Session, public_id: str) -> CommitStatus | None:
    return session.scalar(select(CommitStatus).where(CommitStatus.public_id == public_id))


def lock_pull_request(session: Session, pull_request_id: int) -> PullRequest | None:
    statement = select(PullRequest).where(PullRequest.id == pull_request_id).with_for_update()
    return session.scalar(statement.execution_options(populate_existing=True))


def unsettled(session: Session, quiet_since: datetime, limit: int) -> list[CommitStatus]:
    """Pending verdicts nothing will decide: no job of their commit is queued or running on their
    machine, and none has changed (nor the verdict) since ``quiet_since``."""
    same = and_(Job.commit_id == CommitStatus.commit_id, Job.machine_id == CommitStatus.machine_id)
    active = exists().where(same, Job.state.in_((JobState.QUEUED.value, *ACTIVE_STATES)))
    last_job = select(func.max(Job.updated_at)).where(same).correlate(CommitStatus).scalar_subquery()
    statement = (
        select(CommitStatus)
        .where(CommitStatus.state == CommitState.PENDING.value, ~active, CommitStatus.updated_at < quiet_since,
               func.coalesce(last_job, CommitStatus.updated_at) < quiet_since)
        .order_by(CommitStatus.id)
        .limit(limit)
    )
    return list(session.scalars(statement))


def pull_head(session: Session, pull_request_id: int | None) -> int | None:
    """The head commit a pull request is measuring now (None: gone, or no head yet)."""
    if pull_request_id is None:
        return None
    return session.scalar(select(PullRequest.head_commit_id).where(PullRequest.id == pull_request_id))
