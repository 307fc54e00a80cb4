"""SQL of the forge room: commit statuses (verdicts per commit x machine and their delivery), and
the pull request whose comment is being posted."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from .. import db
from ..models import Commit, CommitStatus, Delivery, PullRequest, Repository, StatusScope, utcnow


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
    """Create the (commit, machine) rows that do not exist yet; returns the commit ids created."""
    if not rows:
        return set()
    now = utcnow()
    full = [{"machine_id": machine_id, "version": 1, "attempts": 0, "last_error": "", "created_at": now,
             "updated_at": now, **row} for row in rows]
    inserted = db.insert_ignoring_conflicts(session, CommitStatus.__table__, full, ["commit_id", "machine_id", "scope"],
                                            returning=CommitStatus.__table__.c.commit_id)
    return {row[0] for row in inserted}


def lock_statuses(session: Session, machine_id: int, commit_ids: Sequence[int], scope: StatusScope) -> Sequence[CommitStatus]:
    """The machine's status rows of these commits in one scope, locked in commit order."""
    statement = (
        select(CommitStatus)
        .where(CommitStatus.machine_id == machine_id, CommitStatus.commit_id.in_(list(commit_ids)),
               CommitStatus.scope == scope.value)
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
    return session.scalar(select(CommitStatus).where(CommitStatus.id == status_id).with_for_update())


def stale_pending(session: Session, older_than: datetime, limit: int) -> list[int]:
    statement = (
        select(CommitStatus.id)
        .where(CommitStatus.delivery == Delivery.PENDING.value, CommitStatus.updated_at < older_than)
        .order_by(CommitStatus.updated_at)
        .limit(limit)
    )
    return list(session.scalars(statement))


def statuses_of(session: Session, commit_id: int, scope: StatusScope) -> list[CommitStatus]:
    statement = select(CommitStatus).where(CommitStatus.commit_id == commit_id, CommitStatus.scope == scope.value)
    return list(session.scalars(statement.order_by(CommitStatus.machine_id)))


def by_public_id(session: Session, public_id: str) -> CommitStatus | None:
    return session.scalar(select(CommitStatus).where(CommitStatus.public_id == public_id))


def lock_pull_request(session: Session, pull_request_id: int) -> PullRequest | None:
    statement = select(PullRequest).where(PullRequest.id == pull_request_id).with_for_update()
    return session.scalar(statement.execution_options(populate_existing=True))
