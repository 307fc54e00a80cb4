from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from ..bodies import json_body

from ..deps import AdminDep, PageDep, ReaderDep, SessionDep
from ..errors import Conflict, NotFound, Unauthorized, responses
from ..pagination import Page, paginate
from . import repository as config_sql
from . import service
from ..bounded import DbId
from .schemas import ConfigCreate, ConfigRead, ConfigUpdate

router = APIRouter(prefix="/configs", tags=["configs"])

# Read once the caller is an admin (bodies.py).
ConfigBody = Annotated[ConfigCreate, json_body(ConfigCreate)]
ConfigUpdateBody = Annotated[ConfigUpdate, json_body(ConfigUpdate)]


@router.get("", responses=responses(Unauthorized))
def list_configs(
    session: SessionDep, _: ReaderDep, page: PageDep, enabled: Annotated[bool | None, Query()] = None
) -> Page[ConfigRead]:
    return paginate(session, config_sql.configs_statement(enabled), page, ConfigRead.model_validate)


@router.post("", status_code=status.HTTP_201_CREATED, responses=responses(Unauthorized, Conflict))
def create_config(_: AdminDep, data: ConfigBody, session: SessionDep) -> ConfigRead:
    """A new benchmark config; the newest commits of each branch get its jobs (PERFCI_BACKFILL_COMMITS)."""
    return ConfigRead.model_validate(service.create_config(session, data))


@router.patch("/{config_id}", responses=responses(Unauthorized, NotFound))
def update_config(config_id: DbId, _: AdminDep, data: ConfigUpdateBody, session: SessionDep) -> ConfigRead:
    return ConfigRead.model_validate(service.update_config(session, config_id, data))
