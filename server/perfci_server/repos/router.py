from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from ..bodies import json_body

from ..deps import AdminDep, PageDep, ReaderDep, SessionDep
from ..errors import BadRequest, Conflict, NotFound, Unauthorized, responses
from ..pagination import Page, paginate
from . import repository as repo_sql
from ..bounded import DbId
from .schemas import BranchRead, CommitRead, PushRead, RepositoryCreate, RepositoryCreated, RepositoryRead
from .service import create_repository, get_repository

router = APIRouter(prefix="/repositories", tags=["repositories"])

RepositoryBody = Annotated[RepositoryCreate, json_body(RepositoryCreate)]  # read once the caller is an admin


@router.post("", status_code=status.HTTP_201_CREATED, responses=responses(Unauthorized, Conflict))
def create(_: AdminDep, data: RepositoryBody, session: SessionDep) -> RepositoryCreated:
    """Register a repository; the response holds its webhook secret (shown only here)."""
    repository = create_repository(session, data)
    return RepositoryCreated.model_validate(repository, from_attributes=True)


@router.get("", responses=responses(Unauthorized))
def list_repositories(session: SessionDep, _: ReaderDep, page: PageDep) -> Page[RepositoryRead]:
    return paginate(session, repo_sql.list_statement(), page, RepositoryRead.model_validate)


@router.get("/{repository_id}/branches", responses=responses(Unauthorized, NotFound))
def list_branches(repository_id: DbId, session: SessionDep, _: ReaderDep, page: PageDep) -> Page[BranchRead]:
    get_repository(session, repository_id)
    return paginate(session, repo_sql.branches_statement(repository_id), page, BranchRead.model_validate)


@router.get("/{repository_id}/commits", responses=responses(BadRequest, Unauthorized, NotFound))
def list_commits(
    repository_id: DbId,
    session: SessionDep,
    _: ReaderDep,
    page: PageDep,
    branch: Annotated[str | None, Query(description="Only this branch, newest position first")] = None,
    abandoned: Annotated[bool, Query(description="With branch: the commits force pushes took off it, where they stood")] = False,
) -> Page[CommitRead]:
    """Commits of a repository: on one branch in branch order (newest first), else newest recorded
    first; with ``abandoned``, those force pushes took off the branch (kept, out of its series)."""
    get_repository(session, repository_id)
    branch_id = None
    if branch is not None:
        found = repo_sql.branch(session, repository_id, branch)
        if found is None:
            raise NotFound(f"no branch {branch!r} in repository {repository_id}")
        branch_id = found.id
    if abandoned:
        if branch_id is None:
            raise BadRequest("abandoned=true needs a branch")
        return paginate(session, repo_sql.abandoned_statement(branch_id), page, _commit_read)
    return paginate(session, repo_sql.commits_statement(repository_id, branch_id), page, _commit_read)


@router.get("/{repository_id}/pushes", responses=responses(Unauthorized, NotFound))
def list_pushes(
    repository_id: DbId,
    session: SessionDep,
    _: ReaderDep,
    page: PageDep,
    complete: Annotated[bool | None, Query(description="false: only pushes still waiting for the mirror")] = None,
) -> Page[PushRead]:
    """Pushes to the repository, newest first, and whether all their commits are recorded yet."""
    get_repository(session, repository_id)
    return paginate(session, repo_sql.pushes_statement(repository_id, complete), page, _push_read)


def _push_read(row) -> PushRead:
    push, branch = row
    return PushRead(id=push.id, branch=branch, before=push.before, after=push.after, listed_commits=push.listed_commits,
                    recorded_commits=push.recorded_commits, complete=push.complete, fetch_attempts=push.fetch_attempts,
                    last_error=push.last_error, created_at=push.created_at, completed_at=push.completed_at)


def _commit_read(row) -> CommitRead:
    commit, position = row
    return CommitRead(sha=commit.sha, position=position, parents=list(commit.parents),
                      author_name=commit.author_name, author_email=commit.author_email,
                      committed_at=commit.committed_at, message=commit.message)
