"""Repositories and what a push adds to them (commits, their order on a branch)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy.orm import Session

from ..errors import Conflict, NotFound
from ..jobs.service import schedule_commits
from ..models import Branch, Push, Repository, utcnow
from ..security import new_webhook_secret
from ..settings import Settings
from . import mirror
from . import repository as repo_sql
from .schemas import RepositoryCreate

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PushedCommit:
    sha: str
    message: str
    author_name: str
    author_email: str
    committed_at: datetime | None


def create_repository(session: Session, data: RepositoryCreate) -> Repository:
    if repo_sql.by_name(session, data.name) is not None:
        raise Conflict(f"repository {data.name!r} already exists")
    repository = Repository(
        name=data.name,
        forge=data.forge.value,
        clone_url=data.clone_url,
        webhook_secret=data.webhook_secret or new_webhook_secret(),
        track_tags=data.track_tags,
        default_branch=data.default_branch,
    )
    session.add(repository)
    session.flush()
    return repository


def get_repository(session: Session, repository_id: int) -> Repository:
    repository = repo_sql.by_id(session, repository_id)
    if repository is None:
        raise NotFound(f"no repository {repository_id}")
    return repository


def record_push(
    session: Session,
    repository: Repository,
    branch_name: str,
    before: str | None,
    after: str,
    listed: Sequence[PushedCommit],
    settings: Settings,
    delivery_id: int | None = None,
) -> Push:
    """Record a push: its commits on the branch, in order, and their jobs, in the caller's transaction.

    The commits are every first-parent commit of ``before..after`` (a new branch: those since it
    left its base branch, or those not on any tracked branch yet) with their real parents, read from
    the server's mirror of the repository, whatever the payload listed, plus the push's baseline
    (:func:`_place_with_baseline`). When the mirror cannot be fetched in time, the payload's
    commits are recorded instead (each one's parent taken to be the one before it) and the push is
    left incomplete for :func:`complete_push` to finish from beat.
    """
    branch = repo_sql.lock_branch(session, repository.id, branch_name)
    fresh = branch.head_sha is None  # created by this push
    push = Push(repository_id=repository.id, branch_id=branch.id, delivery_id=delivery_id, before=before, after=after,
                listed_commits=len(listed), recorded_commits=0, complete=False, fetch_attempts=1)
    base = _base_of(session, repository, branch) if fresh else None
    try:
        path = mirror.fetch(settings, repository, after, settings.mirror_fetch_timeout_seconds)
        commits = _pushed_commits(session, settings, repository, path, before, after, base)
    except mirror.MirrorUnavailable as exc:
        log.warning("push %s..%s to %s %s is incomplete, %d listed commit(s) recorded (retried from beat): %s",
                    before, after, repository.name, branch_name, len(listed), exc)
        push.last_error = str(exc)
        ids, _ = _place(session, repository, branch, listed, parents=_payload_parents(before, listed))
        recorded = len(ids)
    else:
        ids, placed = _place_with_baseline(session, settings, repository, branch, base, path, after, commits)
        recorded = len(placed)
        push.complete, push.completed_at = True, utcnow()
    push.recorded_commits = recorded
    branch.head_sha = after
    session.add(push)
    session.flush()
    # In this transaction: a push that was answered 202 has its jobs, whatever the broker does.
    schedule_commits(session, ids, settings)
    return push


def complete_push(session: Session, push: Push, settings: Settings, timeout: float) -> list[int]:
    """Fetch the mirror again for an incomplete push; on success place the commits the payload
    did not list where they belong on the branch (and the push's baseline), with their jobs.
    Returns the commits added."""
    repository = get_repository(session, push.repository_id)
    branch = session.get(Branch, push.branch_id)
    assert branch is not None, "a push's branch is deleted with it"
    repo_sql.lock_branch(session, repository.id, branch.name)
    push.fetch_attempts += 1
    fresh = push.before is None and branch.fork_position is None and repo_sql.first_push_of(session, branch.id) == push.id
    base = _base_of(session, repository, branch) if fresh else None
    try:
        path = mirror.fetch(settings, repository, push.after, timeout)
        commits = _pushed_commits(session, settings, repository, path, push.before, push.after, base)
    except mirror.MirrorUnavailable as exc:
        push.last_error = str(exc)
        log.warning("push %d (%s %s) still incomplete after %d fetch attempt(s): %s", push.id, repository.name, branch.name,
                    push.fetch_attempts, exc)
        return []
    ids, placed = _place_with_baseline(session, settings, repository, branch, base, path, push.after, commits)
    schedule_commits(session, ids, settings)
    push.recorded_commits += len(placed)
    push.complete, push.completed_at, push.last_error = True, utcnow(), None
    log.info("push %d (%s %s) completed from the mirror: %d commit(s) the payload did not list", push.id, repository.name,
             branch.name, len(placed))
    return placed


def _base_of(session: Session, repository: Repository, branch: Branch) -> Branch | None:
    """The branch a new branch is judged against: the repository's default branch, when it is
    another branch and perfci has seen it pushed."""
    if branch.name == repository.default_branch:
        return None
    base = repo_sql.branch(session, repository.id, repository.default_branch)
    return base if base is not None and base.head_sha else None


def _pushed_commits(session: Session, settings: Settings, repository: Repository, path: Path, before: str | None,
                    after: str, base: Branch | None) -> list[mirror.GitCommit]:
    if before and mirror.has_commit(path, before):
        exclude = [before]
    elif base is not None:  # a new branch: its commits since it left its base
        exclude = [base.head_sha or ""]
    else:  # a new branch with no base (or a head git no longer has): what no tracked branch has yet
        exclude = repo_sql.branch_heads(session, repository.id)
    commits = mirror.first_parent_commits(path, after, exclude, settings.push_max_commits)
    if not commits:  # a branch or tag created at a commit already known: that commit
        commits = mirror.first_parent_commits(path, after, [], 1)
    elif len(commits) == settings.push_max_commits:
        log.warning("push to %s at %s: only the newest %d first-parent commits recorded (PERFCI_PUSH_MAX_COMMITS)",
                    repository.name, after, len(commits))
    return commits


def _place_with_baseline(session: Session, settings: Settings, repository: Repository, branch: Branch, base: Branch | None,
                         path: Path, after: str, commits: Sequence[mirror.GitCommit]) -> tuple[list[int], list[int]]:
    """Place the push's commits and make sure the oldest has a baseline: the commit before it on
    the branch's series, measured with them, so that no commit is judged against nothing.

    - The branch has a commit before them: that one.
    - A new branch with a base: the base's history up to the merge-base comes first (the newest
      ``detection_window_commits`` of it), so the branch's first commit is judged against its base;
      the merge-base is the baseline.
    - Otherwise (a repository's first push): the oldest commit's parent in git, when it has one.

    Returns (the ids to schedule: the baseline then the push's commits; the push's commits newly
    placed, the baseline not counted)."""
    ids, placed = _place(session, repository, branch, commits, parents={c.sha: c.parents for c in commits})
    if not ids:
        return ids, placed
    previous = repo_sql.commit_before(session, branch.id, ids[0])
    if previous is not None:
        return [previous, *ids], placed
    lead: list[int] = []
    fork = mirror.merge_base(path, after, base.head_sha) if base is not None and base.head_sha else None
    if base is not None and fork is not None:
        fork_id = store_commits(session, repository, mirror.first_parent_commits(path, fork, [], 1))[fork]
        at = repo_sql.position_of(session, base.id, fork_id)
        lead = [fork_id] if at is None else repo_sql.history_until(session, base.id, at, settings.detection_window_commits)
        branch.base_branch_id = base.id
    elif commits[0].parents:
        parent = commits[0].parents[0]
        lead = [store_commits(session, repository, mirror.first_parent_commits(path, parent, [], 1))[parent]]
    if not lead:
        return ids, placed
    repo_sql.place_on_branch(session, branch.id, [*lead, *ids])  # before the push's commits
    if branch.base_branch_id is not None:
        branch.fork_position = repo_sql.position_of(session, branch.id, lead[-1])
        log.info("branch %s of %s starts from %s at %s (%d commit(s) of its history)", branch.name, repository.name,
                 base.name if base else "?", fork, len(lead))
    return [lead[-1], *(i for i in ids if i != lead[-1])], placed


def _payload_parents(before: str | None, listed: Sequence[PushedCommit]) -> dict[str, list[str]]:
    # The payload has no parents: each commit's is taken to be the one listed before it.
    parents, parent = {}, before
    for c in listed:
        parents[c.sha] = [parent] if parent else []
        parent = c.sha
    return parents


def _place(session: Session, repository: Repository, branch: Branch, commits: Sequence[PushedCommit | mirror.GitCommit],
           parents: dict[str, list[str]]) -> tuple[list[int], list[int]]:
    """Store the commits (first sighting wins, but git's parents replace guessed ones) and put them
    on the branch in order; returns (all their ids in order, the ids newly placed on the branch)."""
    ids_by_sha = store_commits(session, repository, commits, parents)
    ids = list(dict.fromkeys(ids_by_sha[c.sha] for c in commits))
    return ids, repo_sql.place_on_branch(session, branch.id, ids)


def store_commits(session: Session, repository: Repository, commits: Sequence[PushedCommit | mirror.GitCommit],
           parents: dict[str, list[str]] | None = None) -> dict[str, int]:
    """Store the commits (first sighting wins; git's parents replace guessed ones); sha -> id.
    ``parents`` defaults to the commits' own (git commits from the mirror)."""
    if parents is None:
        parents = {c.sha: c.parents for c in commits if isinstance(c, mirror.GitCommit)}
    rows = [
        {
            "repository_id": repository.id,
            "sha": c.sha,
            "parents": parents[c.sha],
            "author_name": c.author_name[:255],
            "author_email": c.author_email[:255],
            "committed_at": c.committed_at,
            "message": c.message,
            "created_at": utcnow(),
        }
        for c in commits
    ]
    ids_by_sha = repo_sql.ensure_commits(session, rows)
    if commits and isinstance(commits[0], mirror.GitCommit):
        repo_sql.set_parents(session, {ids_by_sha[c.sha]: parents[c.sha] for c in commits})
    return ids_by_sha
