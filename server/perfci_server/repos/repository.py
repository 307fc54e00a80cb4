"""SQL for repositories, branches and commits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Select, bindparam, delete, func, select, update
from sqlalchemy.orm import Session

from .. import db
from ..models import AbandonedCommit, Branch, BranchCommit, Commit, Push, Repository, utcnow


def by_name(session: Session, name: str) -> Repository | None:
    return session.scalar(select(Repository).where(Repository.name == name))


def by_id(session: Session, repository_id: int) -> Repository | None:
    return session.get(Repository, repository_id)


def list_statement() -> Select[tuple[Repository]]:
    return select(Repository).order_by(Repository.id)


def branch(session: Session, repository_id: int, name: str) -> Branch | None:
    return session.scalar(select(Branch).where(Branch.repository_id == repository_id, Branch.name == name))


def lock_branch(session: Session, repository_id: int, name: str) -> Branch:
    """Get or create the branch, locked: concurrent pushes to it append positions one at a time.
    FOR NO KEY UPDATE, not FOR UPDATE: a row that references the branch (another branch forked
    from it, an alert group, a placed commit) takes only a key-share lock on it, so a transaction
    holding another branch's lock and adding such a row does not wait here while this one waits
    for its commits (a deadlock between pushes to two branches)."""
    row = {"repository_id": repository_id, "name": name, "created_at": utcnow()}
    db.insert_ignoring_conflicts(session, Branch.__table__, [row], ["repository_id", "name"])
    statement = select(Branch).where(Branch.repository_id == repository_id, Branch.name == name).with_for_update(key_share=True)
    return session.scalars(statement).one()


def branches_with_heads(session: Session, repository_id: int, except_branch_id: int) -> list[Branch]:
    """The repository's other branches perfci has seen pushed."""
    statement = select(Branch).where(Branch.repository_id == repository_id, Branch.id != except_branch_id,
                                     Branch.head_sha.is_not(None))
    return list(session.scalars(statement.order_by(Branch.id)))


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


def branch_tips(session: Session, repository_id: int, except_branch_id: int) -> list[str]:
    """The newest recorded commit of each other branch (and tag) of the repository: what perfci has
    on its series, whatever pushes are still being completed."""
    newest = (select(BranchCommit.branch_id, func.max(BranchCommit.position).label("position"))
              .join(Branch, Branch.id == BranchCommit.branch_id)
              .where(Branch.repository_id == repository_id, Branch.id != except_branch_id)
              .group_by(BranchCommit.branch_id).subquery())
    statement = (select(Commit.sha).join(BranchCommit, BranchCommit.commit_id == Commit.id)
                 .join(newest, (newest.c.branch_id == BranchCommit.branch_id) & (newest.c.position == BranchCommit.position)))
    return list(session.scalars(statement))


def set_parents(session: Session, parents_by_id: dict[int, list[str]]) -> None:
    """Overwrite commits' parents (with git's, where a payload's order had stood in for them)."""
    if parents_by_id:
        statement = update(Commit.__table__).where(Commit.__table__.c.id == bindparam("commit_id")).values(parents=bindparam("new_parents"))
        session.execute(statement, [{"commit_id": i, "new_parents": p} for i, p in parents_by_id.items()])


def place_on_branch(session: Session, branch_id: int, commit_ids: Sequence[int]) -> list[int]:
    """Put commits on the branch in the given order (oldest first); returns those newly placed.

    A commit already on the branch keeps its place. New commits listed before one already there
    are inserted just before it (the positions after it shift up): the older commits of a push
    whose payload was truncated, found later. The others are appended.
    """
    on_branch = select(BranchCommit.commit_id, BranchCommit.position).where(
        BranchCommit.branch_id == branch_id, BranchCommit.commit_id.in_(commit_ids))
    positions = {commit_id: position for commit_id, position in session.execute(on_branch)}
    placed: list[int] = []
    waiting: list[int] = []
    for commit_id in dict.fromkeys(commit_ids):
        position = positions.get(commit_id)
        if position is None:
            waiting.append(commit_id)
        elif waiting:
            _insert_before(session, branch_id, position, waiting)
            positions = {c: p + len(waiting) if p >= position else p for c, p in positions.items()}
            placed += waiting
            waiting = []
    if waiting:
        append_to_branch(session, branch_id, waiting)
        placed += waiting
    return placed


def _insert_before(session: Session, branch_id: int, position: int, commit_ids: Sequence[int]) -> None:
    shift = len(commit_ids)
    later = (BranchCommit.branch_id == branch_id) & (BranchCommit.position >= position)
    # Through negative positions, so that (branch, position) stays unique after every row's update.
    session.execute(update(BranchCommit).where(later).values(position=-(BranchCommit.position + shift) - 1))
    moved = (BranchCommit.branch_id == branch_id) & (BranchCommit.position < 0)
    session.execute(update(BranchCommit).where(moved).values(position=-BranchCommit.position - 1))
    rows = [{"branch_id": branch_id, "commit_id": c, "position": position + i} for i, c in enumerate(commit_ids)]
    session.execute(BranchCommit.__table__.insert(), rows)


def incomplete_pushes(session: Session, limit: int) -> list[tuple[int, int]]:
    """(push id, repository id) of incomplete pushes, least tried first (one forge that stays
    unreachable does not starve the others)."""
    statement = (
        select(Push.id, Push.repository_id).where(Push.complete.is_(False)).order_by(Push.fetch_attempts, Push.id).limit(limit)
    )
    return [(push_id, repository_id) for push_id, repository_id in session.execute(statement)]


def lock_push(session: Session, push_id: int) -> Push | None:
    """The push, locked; None when another retry holds it (that one does the work)."""
    return session.scalar(select(Push).where(Push.id == push_id).with_for_update(skip_locked=True))


def pushes_statement(repository_id: int, complete: bool | None) -> Select[tuple[Push, str]]:
    statement = select(Push, Branch.name).join(Branch, Branch.id == Push.branch_id).where(Push.repository_id == repository_id)
    if complete is not None:
        statement = statement.where(Push.complete.is_(complete))
    return statement.order_by(Push.id.desc())


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


def history_until(session: Session, branch_id: int, position: int, limit: int) -> list[int]:
    """The commit ids at the branch's positions up to ``position``, the newest ``limit``, oldest first."""
    statement = (
        select(BranchCommit.commit_id).where(BranchCommit.branch_id == branch_id, BranchCommit.position <= position)
        .order_by(BranchCommit.position.desc()).limit(limit)
    )
    return list(reversed(session.scalars(statement).all()))


def commit_before(session: Session, branch_id: int, commit_id: int) -> int | None:
    """The commit just before ``commit_id`` on the branch (None: it is the branch's first, or not on
    it). Positions may have gaps: a force push takes commits off a branch."""
    here = select(BranchCommit.position).where(BranchCommit.branch_id == branch_id, BranchCommit.commit_id == commit_id)
    statement = (select(BranchCommit.commit_id).where(BranchCommit.branch_id == branch_id,
                                                      BranchCommit.position < here.scalar_subquery())
                 .order_by(BranchCommit.position.desc()).limit(1))
    return session.scalar(statement)


def position_of(session: Session, branch_id: int, commit_id: int) -> int | None:
    return session.scalar(select(BranchCommit.position).where(BranchCommit.branch_id == branch_id, BranchCommit.commit_id == commit_id))


def first_push_of(session: Session, branch_id: int) -> int | None:
    """The id of the branch's first recorded push."""
    return session.scalar(select(func.min(Push.id)).where(Push.branch_id == branch_id))


def commit_ids(session: Session, repository_id: int, shas: Sequence[str]) -> list[int]:
    """The ids of the repository's commits with these shas, in the given order (unknown ones left out)."""
    found = dict(session.execute(select(Commit.sha, Commit.id).where(Commit.repository_id == repository_id, Commit.sha.in_(list(shas)))).all())
    return [found[sha] for sha in shas if sha in found]


def newest_shas(session: Session, branch_id: int, limit: int) -> list[str]:
    """The branch's newest commits, newest first."""
    statement = (select(Commit.sha).join(BranchCommit, BranchCommit.commit_id == Commit.id)
                 .where(BranchCommit.branch_id == branch_id).order_by(BranchCommit.position.desc()).limit(limit))
    return list(session.scalars(statement))


def newest_entries(session: Session, branch_id: int, limit: int) -> list[tuple[int, str, int]]:
    """(commit id, sha, position) of the branch's newest commits, newest first."""
    statement = (select(Commit.id, Commit.sha, BranchCommit.position).join(BranchCommit, BranchCommit.commit_id == Commit.id)
                 .where(BranchCommit.branch_id == branch_id).order_by(BranchCommit.position.desc()).limit(limit))
    return [(commit_id, sha, position) for commit_id, sha, position in session.execute(statement)]


def abandon(session: Session, branch_id: int, entries: Sequence[tuple[int, int]], push_id: int) -> None:
    """Take (commit id, position) entries off the branch, keeping where they stood."""
    now = utcnow()
    db.insert_ignoring_conflicts(session, AbandonedCommit.__table__, [
        {"branch_id": branch_id, "commit_id": c, "position": p, "push_id": push_id, "abandoned_at": now} for c, p in entries],
        ["branch_id", "commit_id"])
    session.execute(delete(BranchCommit).where(BranchCommit.branch_id == branch_id,
                                               BranchCommit.commit_id.in_([c for c, _ in entries])))


def abandoned_statement(branch_id: int) -> Select[Any]:
    return (select(Commit, AbandonedCommit.position).join(AbandonedCommit, AbandonedCommit.commit_id == Commit.id)
            .where(AbandonedCommit.branch_id == branch_id).order_by(AbandonedCommit.position.desc()))


def set_patch_ids(session: Session, repository_id: int, patch_ids: dict[str, str]) -> None:
    """Record each commit's patch id (sha -> id)."""
    for sha, patch_id in patch_ids.items():
        session.execute(update(Commit).where(Commit.repository_id == repository_id, Commit.sha == sha).values(patch_id=patch_id))


def mark_guessed(session: Session, branch_id: int, commit_ids: Sequence[int]) -> None:
    if commit_ids:
        session.execute(update(BranchCommit).where(BranchCommit.branch_id == branch_id, BranchCommit.commit_id.in_(list(commit_ids)))
                        .values(guessed=True))


def take_guesses_off(session: Session, branch_id: int) -> list[int]:
    """Remove the branch's provisional entries (their commits and jobs stay); returns their commit ids."""
    statement = delete(BranchCommit).where(BranchCommit.branch_id == branch_id, BranchCommit.guessed.is_(True))
    return [row[0] for row in session.execute(statement.returning(BranchCommit.commit_id))]


def incomplete_pushes_of(session: Session, branch_id: int, except_push_id: int) -> list[Push]:
    statement = select(Push).where(Push.branch_id == branch_id, Push.complete.is_(False), Push.id != except_push_id)
    return list(session.scalars(statement.order_by(Push.id).with_for_update()))
