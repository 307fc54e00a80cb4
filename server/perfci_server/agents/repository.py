"""SQL for agents, machines and the tokens that authenticate them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Select, select, update
from sqlalchemy.orm import Session, joinedload

from .. import db
from ..models import Agent, EnrollmentToken, Machine, utcnow


def consume_enrollment_token(session: Session, token_hash: str, now: datetime) -> int | None:
    """Atomically mark a valid, unused token as used; its id, or None when it cannot be used."""
    statement = (
        update(EnrollmentToken)
        .where(EnrollmentToken.token_hash == token_hash, EnrollmentToken.used_at.is_(None), EnrollmentToken.expires_at > now)
        .values(used_at=now)
        .returning(EnrollmentToken.id)
    )
    return session.scalar(statement)


def ensure_machine(session: Session, fingerprint: str, name: str, details: dict[str, Any]) -> Machine:
    row = {"fingerprint": fingerprint, "name": name, "details": details, "enabled": True, "created_at": utcnow()}
    db.insert_ignoring_conflicts(session, Machine.__table__, [row], ["fingerprint"])
    return session.scalars(select(Machine).where(Machine.fingerprint == fingerprint)).one()


def agents_statement(machine_id: int | None = None) -> Select[tuple[Agent]]:
    statement = select(Agent).options(joinedload(Agent.machine)).order_by(Agent.id)
    if machine_id is not None:
        statement = statement.where(Agent.machine_id == machine_id)
    return statement


def agent_by_id(session: Session, agent_id: int) -> Agent | None:
    return session.scalar(select(Agent).options(joinedload(Agent.machine)).where(Agent.id == agent_id))
