"""Bisect API: start a search on a machine's agents, follow it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from ..bodies import json_body

from ..deps import AdminDep, PageDep, ReaderDep, SessionDep
from ..errors import Conflict, NotFound, Unauthorized, Unprocessable, responses
from ..models import BisectStatus
from ..pagination import Page, paginate
from . import repository as bisect_sql
from . import service
from ..bounded import DbId
from .schemas import BisectCreate, BisectRead

router = APIRouter(prefix="/bisects", tags=["bisects"])

BisectBody = Annotated[BisectCreate, json_body(BisectCreate)]  # read once the caller is an admin


@router.post("", status_code=status.HTTP_201_CREATED, responses=responses(Unauthorized, NotFound, Conflict, Unprocessable))
def create_bisect(_: AdminDep, data: BisectBody, session: SessionDep) -> BisectRead:
    """Bisect good..bad of a branch on one machine: jobs are scheduled for its agents as the search needs them."""
    return service.read(session, service.create(session, data))


@router.get("", responses=responses(Unauthorized))
def list_bisects(
    session: SessionDep,
    _: ReaderDep,
    page: PageDep,
    status: Annotated[BisectStatus | None, Query()] = None,
    machine_id: Annotated[DbId | None, Query()] = None,
) -> Page[BisectRead]:
    """Bisects, newest first."""
    statement = bisect_sql.list_statement(status.value if status else None, machine_id)
    return paginate(session, statement, page, lambda b: service.read(session, b))


@router.get("/{bisect_id}", responses=responses(Unauthorized, NotFound))
def get_bisect(bisect_id: DbId, session: SessionDep, _: ReaderDep) -> BisectRead:
    return service.read(session, service.get(session, bisect_id))
