"""SQL for machines."""

from __future__ import annotations

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from perfci_core.metrics import AUTO_PREFERENCE

from ..models import Agent, Machine


def machines_statement(enabled: bool | None = None) -> Select[tuple[Machine]]:
    statement = select(Machine).order_by(Machine.id)
    if enabled is not None:
        statement = statement.where(Machine.enabled.is_(enabled))
    return statement


def by_id(session: Session, machine_id: int) -> Machine | None:
    return session.get(Machine, machine_id)


def name_of(session: Session, machine_id: int) -> str:
    machine = session.get(Machine, machine_id)
    return machine.name if machine else str(machine_id)


def by_fingerprint(session: Session, fingerprint: str) -> Machine | None:
    return session.scalar(select(Machine).where(Machine.fingerprint == fingerprint))


def enabled_ids(session: Session) -> list[int]:
    return list(session.scalars(select(Machine.id).where(Machine.enabled.is_(True)).order_by(Machine.id)))


def auto_backend(session: Session, machine_id: int) -> str | None:
    """The backend an ``auto`` job runs on this machine: the best one its agents offer (None: no agent)."""
    offered = {b for backends in session.scalars(select(Agent.backends).where(Agent.machine_id == machine_id,
                                                                               Agent.revoked_at.is_(None)))
               for b in backends}
    return next((b for b in AUTO_PREFERENCE if b in offered), None)
