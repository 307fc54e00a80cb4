"""Enrollment (single-use admin token → agent token), heartbeats, API tokens."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import Session

from ..errors import NotFound, Unauthorized
from ..models import Agent, ApiToken, EnrollmentToken, utcnow
from ..security import AGENT_TOKEN_PREFIX, API_TOKEN_PREFIX, ENROLLMENT_TOKEN_PREFIX, hash_token, new_token
from ..settings import Settings
from . import repository as agent_sql
from ..identity import AgentIdentity, touch_agent
from .schemas import EnrollRequest, HeartbeatRequest


def issue_enrollment_token(session: Session, settings: Settings, note: str = "", ttl_seconds: int | None = None) -> tuple[str, EnrollmentToken]:
    token = new_token(ENROLLMENT_TOKEN_PREFIX)
    row = EnrollmentToken(
        token_hash=hash_token(token),
        note=note,
        expires_at=utcnow() + timedelta(seconds=ttl_seconds or settings.enrollment_token_ttl_seconds),
    )
    session.add(row)
    session.flush()
    return token, row


def enroll(session: Session, request: EnrollRequest) -> tuple[Agent, str]:
    """Exchange an enrollment token for an agent on the machine the request describes."""
    now = utcnow()
    enrollment_id = agent_sql.consume_enrollment_token(session, hash_token(request.enrollment_token), now)
    if enrollment_id is None:
        raise Unauthorized("enrollment token is unknown, expired or already used")
    machine_name = request.machine_name or str(request.machine.get("hostname") or request.machine_id[:12])
    machine = agent_sql.ensure_machine(session, request.machine_id, machine_name, dict(request.machine))
    token = new_token(AGENT_TOKEN_PREFIX)
    agent = Agent(
        name=request.name,
        machine_id=machine.id,
        token_hash=hash_token(token),
        backends=[b.value for b in request.backends],
        version=request.version,
        last_seen_at=now,
    )
    session.add(agent)
    session.flush()
    enrollment = session.get(EnrollmentToken, enrollment_id)
    assert enrollment is not None
    enrollment.agent_id = agent.id
    return agent, token


def heartbeat(session: Session, agent: AgentIdentity, request: HeartbeatRequest) -> None:
    changes: dict[str, object] = {}
    if request.backends is not None:
        changes["backends"] = [b.value for b in request.backends]
    if request.version is not None:
        changes["version"] = request.version
    if "stopped_claiming" in request.model_fields_set:
        changes["stopped_claiming"] = request.stopped_claiming
    touch_agent(session, agent.id, utcnow(), **changes)


def revoke_agent(session: Session, agent_id: int) -> Agent:
    agent = agent_sql.agent_by_id(session, agent_id)
    if agent is None:
        raise NotFound(f"no agent {agent_id}")
    if agent.revoked_at is None:
        agent.revoked_at = utcnow()
    return agent


def create_api_token(session: Session, name: str) -> tuple[ApiToken, str]:
    token = new_token(API_TOKEN_PREFIX)
    row = ApiToken(name=name, token_hash=hash_token(token))
    session.add(row)
    session.flush()
    return row, token
