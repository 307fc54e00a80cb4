"""Agent endpoints for the job lifecycle, and the job list for everyone else."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from ..bodies import json_body
from ..deps import AgentDep, AgentTokenDep, PageDep, ReaderDep, SessionDep, SettingsDep, authenticate_agent, committed
from ..errors import Conflict, Forbidden, NotFound, Unauthorized, Unprocessable, responses
from ..models import Job, JobState, utcnow
from ..pagination import Page, paginate
from . import repository as job_sql
from . import service
from ..bounded import DbId, DbInt
from .schemas import ClaimedJob, FailureReport, JobDetail, JobOutcome, JobRead, LeaseRenewal, LeaseRenewed, ReleaseRequest

agent_router = APIRouter(prefix="/agent/jobs", tags=["agent"])
router = APIRouter(prefix="/jobs", tags=["jobs"])

_AGENT_ERRORS = (Unauthorized, Forbidden)

# Read once the caller is a known agent (bodies.py); a failure report carries log tails, as an upload does.
LeaseBody = Annotated[LeaseRenewal, json_body(LeaseRenewal)]
FailureBody = Annotated[FailureReport, json_body(FailureReport, "upload_max_bytes")]
ReleaseBody = Annotated[ReleaseRequest, json_body(ReleaseRequest)]


@agent_router.post(
    "/claim",
    response_model=ClaimedJob,
    responses={204: {"description": "No job is waiting for this machine"}, **responses(*_AGENT_ERRORS)},
)
async def claim(session: SessionDep, token: AgentTokenDep, settings: SettingsDep) -> ClaimedJob | Response:
    """Lease the next queued job for this agent's machine (atomic: no two agents get the same job)."""
    claimed = await committed(session, lambda: service.claim(session, authenticate_agent(session, token), settings), urgent=True)
    if claimed is None:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    return Response(claimed.model_dump_json(), media_type="application/json")  # already a ClaimedJob


@agent_router.post("/{job_id}/lease", responses=responses(*_AGENT_ERRORS, NotFound, Conflict))
def renew_lease(job_id: DbId, agent: AgentDep, renewal: LeaseBody, session: SessionDep, settings: SettingsDep) -> LeaseRenewed:
    """Extend the lease of the agent's current attempt (and mark the job running)."""
    length = service.renew_lease(session, agent, job_id, renewal.attempt, settings)
    return LeaseRenewed(job_id=job_id, attempt=renewal.attempt, lease_expires_at=utcnow() + length)


@agent_router.post("/{job_id}/attempts/{attempt}/failure", responses=responses(*_AGENT_ERRORS, NotFound, Conflict, Unprocessable))
def report_failure(job_id: DbId, attempt: DbInt, agent: AgentDep, report: FailureBody, session: SessionDep) -> JobOutcome:
    """The attempt produced no result document; the job is retried while attempts remain."""
    outcome = service.report_failure(session, agent, job_id, attempt, report.reason, report.log_tail)
    job = session.get(Job, job_id)
    service.job_ended(session, job.pull_request_id if job is not None else None)
    return outcome


@agent_router.post("/{job_id}/attempts/{attempt}/release", responses=responses(*_AGENT_ERRORS, NotFound, Conflict, Unprocessable))
def release(job_id: DbId, attempt: DbInt, agent: AgentDep, request: ReleaseBody, session: SessionDep) -> JobOutcome:
    """Give an unfinished attempt back (the agent is stopping): the job is queued again at once."""
    return service.release_attempt(session, agent, job_id, attempt, request.reason)


@router.get("", responses=responses(Unauthorized))
def list_jobs(
    session: SessionDep,
    _: ReaderDep,
    page: PageDep,
    state: Annotated[JobState | None, Query()] = None,
    machine_id: Annotated[DbId | None, Query()] = None,
    config_id: Annotated[DbId | None, Query()] = None,
) -> Page[JobRead]:
    """Jobs, newest first."""
    statement = job_sql.jobs_statement(state.value if state else None, machine_id, config_id)
    return paginate(session, statement, page, service.job_read)


@router.get("/{job_id}", responses=responses(Unauthorized, NotFound))
def get_job(job_id: DbId, session: SessionDep, _: ReaderDep) -> JobDetail:
    return service.job_detail(session, job_id)
