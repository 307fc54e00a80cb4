from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ..bodies import json_body

from ..deps import AdminDep, PageDep, ReaderDep, SessionDep
from ..errors import NotFound, Unauthorized, responses
from ..pagination import Page, paginate
from . import repository as machine_sql
from ..bounded import DbId
from .schemas import MachineRead, MachineUpdate

router = APIRouter(prefix="/machines", tags=["machines"])

MachineUpdateBody = Annotated[MachineUpdate, json_body(MachineUpdate)]  # read once the caller is an admin


@router.get("", responses=responses(Unauthorized))
def list_machines(
    session: SessionDep, _: ReaderDep, page: PageDep, enabled: Annotated[bool | None, Query()] = None
) -> Page[MachineRead]:
    return paginate(session, machine_sql.machines_statement(enabled), page, MachineRead.model_validate)


@router.get("/{machine_id}", responses=responses(Unauthorized, NotFound))
def get_machine(machine_id: DbId, session: SessionDep, _: ReaderDep) -> MachineRead:
    machine = machine_sql.by_id(session, machine_id)
    if machine is None:
        raise NotFound(f"no machine {machine_id}")
    return MachineRead.model_validate(machine)


@router.patch("/{machine_id}", responses=responses(Unauthorized, NotFound))
def update_machine(machine_id: DbId, _: AdminDep, data: MachineUpdateBody, session: SessionDep) -> MachineRead:
    """Enable or disable a machine (disabled machines get no new jobs) or rename it."""
    machine = machine_sql.by_id(session, machine_id)
    if machine is None:
        raise NotFound(f"no machine {machine_id}")
    if data.enabled is not None:
        machine.enabled = data.enabled
    if data.name is not None:
        machine.name = data.name
    session.flush()
    return MachineRead.model_validate(machine)
