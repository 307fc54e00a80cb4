"""Repositories and what a push adds to them (commits, their order on a branch)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from ..errors import Conflict, NotFound
from ..models import Repository, utcnow
from ..security import new_webhook_secret
from . import repository as repo_sql
from .schemas import RepositoryCreate


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
    session: Session, repository: Repository, branch_name: str, before: str | None, after: str, commits: Sequence[PushedCommit]
) -> list[int]:
    """Store every commit of a push in order and append them to the branch; returns their ids in order.

    Webhooks carry no parent ids, so within the push each commit's parent is taken to be the one
    before it, and the first one's parent is the branch's previous head (``before``).
    """
    branch = repo_sql.lock_branch(session, repository.id, branch_name)
    rows = []
    parent = before
    for c in commits:
        rows.append(
            {
                "repository_id": repository.id,
                "sha": c.sha,
                "parents": [parent] if parent else [],
                "author_name": c.author_name[:255],
                "author_email": c.author_email[:255],
                "committed_at": c.committed_at,
                "message": c.message,
                "created_at": utcnow(),
            }
        )
        parent = c.sha
    ids_by_sha = repo_sql.ensure_commits(session, rows)
    ordered_ids = [ids_by_sha[c.sha] for c in commits]
    repo_sql.append_to_branch(session, branch.id, ordered_ids)
    branch.head_sha = after
    return ordered_ids
