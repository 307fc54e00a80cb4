"""Who a request comes from: the token lookups authentication makes (agents and API tokens), and
the mark of when an agent was last seen. Infrastructure below every domain: ``deps`` and the job
and result services use it without reaching into the agents domain."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session

from .models import Agent, ApiToken


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
