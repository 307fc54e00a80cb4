"""SQL for commit statuses (verdicts per commit x machine and their delivery)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Row, and_, exists, select
from sqlalchemy.orm import aliased
from sqlalchemy.orm import Session

from .. import db
from ..models import (
    ACTIVE_STATES, BranchCommit, Commit, CommitStatus, Delivery, Job, JobState, Machine, Repository, StatusScope, utcnow,
)


def commits_with_repository(session: Session, commit_ids: Sequence[int]) -> Sequence[Row[Any]]:
    """(commit id, sha, repository id, repository name, forge) of each commit."""
    statement = (
        select(Commit.id, Commit.sha, Repository.id.label("repository_id"), Repository.name, Repository.forge)
        .join(Repository, Repository.id == Commit.repository_id)
        .where(Commit.id.in_(list(commit_ids)))
        .order_by(Commit.id)
    )
    return session.execute(statement).all()


def machine_name(session: Session, machine_id: int) -> str:
    machine = session.get(Machine, machine_id)
    return machine.name if machine else str(machine_id)


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


class Baseline(NamedTuple):
    measured: bool  # an earlier commit of one of its branches is measured on the machine
    waiting_for: str | None  # else: the sha of the nearest earlier commit with a job under way


def baselines(session: Session, commit_ids: Sequence[int], machine_id: int) -> dict[int, Baseline]:
    """Per commit (on at least one branch): whether it has a measured baseline on the machine, or
    one being measured. Both lookups walk back from the commit's position on each branch it is on
    (the (branch, position) key), and stop at the first match."""
    here, earlier = aliased(BranchCommit), aliased(BranchCommit)
    before_it = and_(earlier.branch_id == here.branch_id, earlier.position < here.position)
    on_machine = and_(Job.commit_id == earlier.commit_id, Job.machine_id == machine_id)
    measured = exists().where(before_it, on_machine, Job.state == JobState.DONE.value)
    waiting = (
        select(Commit.sha).select_from(earlier).join(Job, on_machine).join(Commit, Commit.id == earlier.commit_id)
        .where(before_it, Job.state.in_((JobState.QUEUED.value, *ACTIVE_STATES)))
        .order_by(earlier.position.desc()).limit(1).correlate(here).scalar_subquery()
    )
    out: dict[int, Baseline] = {}
    rows = session.execute(select(here.commit_id, measured.correlate(here), waiting).where(here.commit_id.in_(list(commit_ids))))
    for commit_id, is_measured, waiting_sha in rows:
        seen = out.get(commit_id)
        if seen is None or (is_measured and not seen.measured) or (not seen.measured and not seen.waiting_for):
            out[commit_id] = Baseline(bool(is_measured), waiting_sha)
    return out


def statuses_of(session: Session, commit_id: int, scope: StatusScope) -> list[CommitStatus]:
    statement = select(CommitStatus).where(CommitStatus.commit_id == commit_id, CommitStatus.scope == scope.value)
    return list(session.scalars(statement.order_by(CommitStatus.machine_id)))


def by_public_id(session: Session, public_id: str) -> CommitStatus | None:
    return session.scalar(select(CommitStatus).where(CommitStatus.public_id == public_id))
