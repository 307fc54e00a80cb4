"""Agent-facing enrollment and heartbeat, and the admin side (tokens, agent list, revocation)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from ..bodies import json_body
from ..deps import AdminDep, AgentDep, PageDep, ReaderDep, SessionDep, SettingsDep
from ..errors import Forbidden, NotFound, Unauthorized, responses
from ..jobs import service as job_service
from ..models import utcnow
from ..pagination import Page, paginate
from . import repository as agent_sql
from . import service
from ..bounded import DbId
from .schemas import (
    AgentRead,
    ApiTokenCreate,
    ApiTokenIssued,
    Enrolled,
    EnrollmentTokenCreate,
    EnrollmentTokenIssued,
    EnrollRequest,
    HeartbeatRequest,
    HeartbeatResponse,
)

agent_router = APIRouter(prefix="/agent", tags=["agent"])
admin_router = APIRouter(tags=["agents"])

# Bodies are read after the caller is authenticated (bodies.py); enrollment is the unauthenticated
# exception, with its own tight limit.
EnrollBody = Annotated[EnrollRequest, json_body(EnrollRequest, "enroll_max_bytes")]
HeartbeatBody = Annotated[HeartbeatRequest, json_body(HeartbeatRequest)]
EnrollmentTokenBody = Annotated[EnrollmentTokenCreate, json_body(EnrollmentTokenCreate)]
ApiTokenBody = Annotated[ApiTokenCreate, json_body(ApiTokenCreate)]


@agent_router.post("/enroll", status_code=status.HTTP_201_CREATED, responses=responses(Unauthorized))
def enroll(request: EnrollBody, session: SessionDep, settings: SettingsDep) -> Enrolled:
    """Exchange a single-use enrollment token for this agent's own bearer token."""
    agent, token = service.enroll(session, request)
    job_service.backfill(session, settings, machine_ids=[agent.machine_id])  # history to judge its first push against
    return Enrolled(agent_id=agent.id, machine_id=agent.machine_id, token=token)


@agent_router.post("/heartbeat", responses=responses(Unauthorized, Forbidden))
def heartbeat(agent: AgentDep, request: HeartbeatBody, session: SessionDep) -> HeartbeatResponse:
    service.heartbeat(session, agent, request)
    return HeartbeatResponse(agent_id=agent.id, server_time=utcnow())


@admin_router.post("/enrollment-tokens", status_code=status.HTTP_201_CREATED, responses=responses(Unauthorized, Forbidden))
def issue_enrollment_token(_: AdminDep, data: EnrollmentTokenBody, session: SessionDep, settings: SettingsDep) -> EnrollmentTokenIssued:
    token, row = service.issue_enrollment_token(session, settings, data.note, data.ttl_seconds)
    return EnrollmentTokenIssued(token=token, expires_at=row.expires_at)


@admin_router.post("/api-tokens", status_code=status.HTTP_201_CREATED, responses=responses(Unauthorized, Forbidden))
def create_api_token(_: AdminDep, data: ApiTokenBody, session: SessionDep) -> ApiTokenIssued:
    row, token = service.create_api_token(session, data.name)
    return ApiTokenIssued(id=row.id, name=row.name, token=token)


@admin_router.get("/agents", responses=responses(Unauthorized))
def list_agents(
    session: SessionDep, _: ReaderDep, page: PageDep, machine_id: Annotated[DbId | None, Query()] = None
) -> Page[AgentRead]:
    return paginate(session, agent_sql.agents_statement(machine_id), page, AgentRead.model_validate)


@admin_router.post("/agents/{agent_id}/revoke", responses=responses(Unauthorized, NotFound))
def revoke_agent(agent_id: DbId, session: SessionDep, _: AdminDep) -> AgentRead:
    """Revoke an agent's token; its leased jobs are requeued when their leases expire."""
    return AgentRead.model_validate(service.revoke_agent(session, agent_id))
