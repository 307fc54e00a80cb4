"""Repositories and what a push adds to them (commits, their order on a branch)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

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

    The commits are every first-parent commit of ``before..after`` (a new branch: those not on any
    tracked branch yet) with their real parents, read from the server's mirror of the repository,
    whatever the payload listed. When the mirror cannot be fetched in time, the payload's commits
    are recorded instead (each one's parent taken to be the one before it) and the push is left
    incomplete for :func:`complete_push` to finish from beat.
    """
    branch = repo_sql.lock_branch(session, repository.id, branch_name)
    push = Push(repository_id=repository.id, branch_id=branch.id, delivery_id=delivery_id, before=before, after=after,
                listed_commits=len(listed), recorded_commits=0, complete=False, fetch_attempts=1)
    try:
        commits = _from_mirror(session, settings, repository, before, after, settings.mirror_fetch_timeout_seconds)
    except mirror.MirrorUnavailable as exc:
        log.warning("push %s..%s to %s %s is incomplete, %d listed commit(s) recorded (retried from beat): %s",
                    before, after, repository.name, branch_name, len(listed), exc)
        push.last_error = str(exc)
        ids, _ = _place(session, repository, branch, listed, parents=_payload_parents(before, listed))
    else:
        ids, _ = _place(session, repository, branch, commits, parents={c.sha: c.parents for c in commits})
        push.complete, push.completed_at = True, utcnow()
    push.recorded_commits = len(ids)
    branch.head_sha = after
    session.add(push)
    session.flush()
    # In this transaction: a push that was answered 202 has its jobs, whatever the broker does.
    schedule_commits(session, ids, settings)
    return push


def complete_push(session: Session, push: Push, settings: Settings, timeout: float) -> list[int]:
    """Fetch the mirror again for an incomplete push; on success place the commits the payload
    did not list where they belong on the branch, with their jobs. Returns the commits added."""
    repository = get_repository(session, push.repository_id)
    branch = session.get(Branch, push.branch_id)
    assert branch is not None, "a push's branch is deleted with it"
    repo_sql.lock_branch(session, repository.id, branch.name)
    push.fetch_attempts += 1
    try:
        commits = _from_mirror(session, settings, repository, push.before, push.after, timeout)
    except mirror.MirrorUnavailable as exc:
        push.last_error = str(exc)
        log.warning("push %d (%s %s) still incomplete after %d fetch attempt(s): %s", push.id, repository.name, branch.name,
                    push.fetch_attempts, exc)
        return []
    ids, placed = _place(session, repository, branch, commits, parents={c.sha: c.parents for c in commits})
    schedule_commits(session, ids, settings)
    push.recorded_commits += len(placed)
    push.complete, push.completed_at, push.last_error = True, utcnow(), None
    log.info("push %d (%s %s) completed from the mirror: %d commit(s) the payload did not list", push.id, repository.name,
             branch.name, len(placed))
    return placed


def _from_mirror(session: Session, settings: Settings, repository: Repository, before: str | None, after: str,
                 timeout: float) -> list[mirror.GitCommit]:
    path = mirror.fetch(settings, repository, after, timeout)
    if before and mirror.has_commit(path, before):
        exclude = [before]
    else:  # a new branch (or a head git no longer has): what no tracked branch has yet
        exclude = repo_sql.branch_heads(session, repository.id)
    commits = mirror.first_parent_commits(path, after, exclude, settings.push_max_commits)
    if not commits:  # a branch or tag created at a commit already known: that commit
        commits = mirror.first_parent_commits(path, after, [], 1)
    elif len(commits) == settings.push_max_commits:
        log.warning("push to %s at %s: only the newest %d first-parent commits recorded (PERFCI_PUSH_MAX_COMMITS)",
                    repository.name, after, len(commits))
    return commits


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
    ids = list(dict.fromkeys(ids_by_sha[c.sha] for c in commits))
    return ids, repo_sql.place_on_branch(session, branch.id, ids)
