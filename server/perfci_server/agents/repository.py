"""SQL for agents, machines and the tokens that authenticate them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Select, bindparam, select, update
from sqlalchemy.orm import Session, joinedload

from .. import db
from ..models import Agent, ApiToken, EnrollmentToken, Machine, utcnow


class AgentIdentity(NamedTuple):
    """Who an agent request comes from: what the agent endpoints need, read without an ORM object."""

    id: int
    machine_id: int
    backends: list[str]


_agents = Agent.__table__
# Built once: one indexed lookup (unique token_hash) per agent request, no ORM identity map or
# relationship load. Tokens are never cached, so a revoked token is refused on its next request.
_IDENTITY_BY_TOKEN_HASH = select(_agents.c.id, _agents.c.machine_id, _agents.c.backends).where(
    _agents.c.token_hash == bindparam("token_hash"), _agents.c.revoked_at.is_(None)
)


def agent_identity_by_token_hash(session: Session, token_hash: str) -> AgentIdentity | None:
    row = session.execute(_IDENTITY_BY_TOKEN_HASH, {"token_hash": token_hash}).first()
    return AgentIdentity(row.id, row.machine_id, row.backends) if row else None


def touch_agent(session: Session, agent_id: int, now: datetime, **changes: Any) -> None:
    """Record that the agent was seen at ``now`` (and any other column ``changes``); an Agent the
    session holds is updated too (heartbeats and renewals are not the hot path)."""
    session.execute(update(Agent).where(Agent.id == agent_id).values(last_seen_at=now, **changes))


def api_token_by_hash(session: Session, token_hash: str) -> ApiToken | None:
    return session.scalar(select(ApiToken).where(ApiToken.token_hash == token_hash, ApiToken.revoked_at.is_(None)))


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
