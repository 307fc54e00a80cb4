"""SQL for repositories, branches and commits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from .. import db
from ..models import Branch, BranchCommit, Commit, Repository, utcnow


def by_name(session: Session, name: str) -> Repository | None:
    return session.scalar(select(Repository).where(Repository.name == name))


def by_id(session: Session, repository_id: int) -> Repository | None:
    return session.get(Repository, repository_id)


def list_statement() -> Select[tuple[Repository]]:
    return select(Repository).order_by(Repository.id)


def branch(session: Session, repository_id: int, name: str) -> Branch | None:
    return session.scalar(select(Branch).where(Branch.repository_id == repository_id, Branch.name == name))


def lock_branch(session: Session, repository_id: int, name: str) -> Branch:
    """Get or create the branch, locked: concurrent pushes to it append positions one at a time."""
    row = {"repository_id": repository_id, "name": name, "created_at": utcnow()}
    db.insert_ignoring_conflicts(session, Branch.__table__, [row], ["repository_id", "name"])
    statement = select(Branch).where(Branch.repository_id == repository_id, Branch.name == name).with_for_update()
    return session.scalars(statement).one()


def branches_statement(repository_id: int) -> Select[tuple[Branch]]:
    return select(Branch).where(Branch.repository_id == repository_id).order_by(Branch.name)


def ensure_commits(session: Session, rows: list[dict[str, Any]]) -> dict[str, int]:
    """Insert commits that are new (first sighting wins) and return sha -> id for all of them."""
    if not rows:
        return {}
    db.insert_ignoring_conflicts(session, Commit.__table__, rows, ["repository_id", "sha"])
    repository_id = rows[0]["repository_id"]
    shas = [r["sha"] for r in rows]
    found = session.execute(select(Commit.sha, Commit.id).where(Commit.repository_id == repository_id, Commit.sha.in_(shas)))
    return {sha: commit_id for sha, commit_id in found}


def append_to_branch(session: Session, branch_id: int, commit_ids: Sequence[int]) -> None:
    """Give commits not yet on the branch the next positions, in the given order."""
    already = set(
        session.scalars(select(BranchCommit.commit_id).where(BranchCommit.branch_id == branch_id, BranchCommit.commit_id.in_(commit_ids)))
    )
    last = session.scalar(select(func.max(BranchCommit.position)).where(BranchCommit.branch_id == branch_id))
    position = 0 if last is None else last + 1
    new_rows = []
    for commit_id in commit_ids:
        if commit_id in already:
            continue
        already.add(commit_id)
        new_rows.append({"branch_id": branch_id, "commit_id": commit_id, "position": position})
        position += 1
    if new_rows:
        session.execute(BranchCommit.__table__.insert(), new_rows)


def commits_statement(repository_id: int, branch_id: int | None) -> Select[Any]:
    if branch_id is None:
        return (
            select(Commit, func.cast(None, BranchCommit.position.type).label("position"))
            .where(Commit.repository_id == repository_id)
            .order_by(Commit.id.desc())
        )
    return (
        select(Commit, BranchCommit.position)
        .join(BranchCommit, BranchCommit.commit_id == Commit.id)
        .where(BranchCommit.branch_id == branch_id)
        .order_by(BranchCommit.position.desc())
    )


def commit_by_sha(session: Session, repository_id: int, sha: str) -> Commit | None:
    return session.scalar(select(Commit).where(Commit.repository_id == repository_id, Commit.sha == sha))
