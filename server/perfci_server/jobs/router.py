"""Agent endpoints for the job lifecycle, and the job list for everyone else."""

from __future__ import annotations

import logging
import time
from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from ..bodies import json_body
from ..identity import AgentIdentity
from ..deps import AgentDep, AgentTokenDep, PageDep, ReaderDep, SessionDep, SettingsDep, authenticate_agent, committed
from ..errors import Conflict, Forbidden, NotFound, Unauthorized, Unprocessable, responses
from ..models import Job, JobState, utcnow
from ..pagination import Page, paginate
from . import repository as job_sql
from . import service
from ..bounded import DbId, DbInt
from .wakeups import MAX_CLAIM_WAIT_S, wakeups
from .schemas import ClaimedJob, FailureReport, JobDetail, JobOutcome, JobRead, LeaseRenewal, LeaseRenewed, ReleaseRequest

log = logging.getLogger(__name__)

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
async def claim(
    session: SessionDep, token: AgentTokenDep, settings: SettingsDep,
    wait: Annotated[float, Query(ge=0, le=MAX_CLAIM_WAIT_S, description="Seconds to wait for a job when none is queued")] = 0,
) -> ClaimedJob | Response:
    """Lease the next queued job for this agent's machine (atomic: no two agents get the same job).
    With ``wait``, an idle agent's request is held until a job of its machine is queued (it is
    answered at once) or ``wait`` seconds pass (204)."""
    def look() -> tuple[AgentIdentity, ClaimedJob | None]:  # the token is checked at every look
        agent = authenticate_agent(session, token)
        return agent, service.claim(session, agent, settings)

    deadline = time.monotonic() + wait
    waits = wakeups(settings.effective_database_url)
    heard = waits.heard
    agent, claimed = await committed(session, look, urgent=True)
    if claimed is None and wait > 0:
        with waits.waiting(agent.machine_id) as queued:
            if waits.heard != heard:  # a job may have been queued between the look and the wait
                queued.set()
            while claimed is None and (left := deadline - time.monotonic()) > 0:
                await waits.wait(queued, left)
                woken = queued.is_set()
                queued.clear()
                agent, claimed = await committed(session, look, urgent=True)
            if claimed is not None:
                log.info("claim: agent %d got job %d after waiting %.1f s (%s)", agent.id, claimed.job_id,
                         wait - (deadline - time.monotonic()), "woken as it was queued" if woken else "found looking again")
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
