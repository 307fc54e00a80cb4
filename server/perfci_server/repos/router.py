from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from ..deps import AdminDep, PageDep, ReaderDep, SessionDep
from ..errors import Conflict, NotFound, Unauthorized, responses
from ..pagination import Page, paginate
from . import repository as repo_sql
from .schemas import BranchRead, CommitRead, RepositoryCreate, RepositoryCreated, RepositoryRead
from .service import create_repository, get_repository

router = APIRouter(prefix="/repositories", tags=["repositories"])


@router.post("", status_code=status.HTTP_201_CREATED, responses=responses(Unauthorized, Conflict))
def create(data: RepositoryCreate, session: SessionDep, _: AdminDep) -> RepositoryCreated:
    """Register a repository; the response holds its webhook secret (shown only here)."""
    repository = create_repository(session, data)
    return RepositoryCreated.model_validate(repository, from_attributes=True)


@router.get("", responses=responses(Unauthorized))
def list_repositories(session: SessionDep, _: ReaderDep, page: PageDep) -> Page[RepositoryRead]:
    rows, total = paginate(session, repo_sql.list_statement(), page)
    return Page(items=[RepositoryRead.model_validate(r) for r in rows], total=total, limit=page.limit, offset=page.offset)


@router.get("/{repository_id}/branches", responses=responses(Unauthorized, NotFound))
def list_branches(repository_id: int, session: SessionDep, _: ReaderDep, page: PageDep) -> Page[BranchRead]:
    get_repository(session, repository_id)
    rows, total = paginate(session, repo_sql.branches_statement(repository_id), page)
    return Page(items=[BranchRead.model_validate(r) for r in rows], total=total, limit=page.limit, offset=page.offset)


@router.get("/{repository_id}/commits", responses=responses(Unauthorized, NotFound))
def list_commits(
    repository_id: int,
    session: SessionDep,
    _: ReaderDep,
    page: PageDep,
    branch: Annotated[str | None, Query(description="Only this branch, newest position first")] = None,
) -> Page[CommitRead]:
    """Commits of a repository: on one branch in branch order (newest first), else newest recorded first."""
    get_repository(session, repository_id)
    branch_id = None
    if branch is not None:
        found = repo_sql.branch(session, repository_id, branch)
        if found is None:
            raise NotFound(f"no branch {branch!r} in repository {repository_id}")
        branch_id = found.id
    rows, total = paginate(session, repo_sql.commits_statement(repository_id, branch_id), page)
    items = [
        CommitRead(
            sha=c.sha,
            position=position,
            parents=list(c.parents),
            author_name=c.author_name,
            author_email=c.author_email,
            committed_at=c.committed_at,
            message=c.message,
        )
        for c, position in rows
    ]
    return Page(items=items, total=total, limit=page.limit, offset=page.offset)
