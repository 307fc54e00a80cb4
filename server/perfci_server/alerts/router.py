"""Alert groups (list, one, triage), re-detection, and the CI gate's check of one commit."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from ..bodies import json_body
from ..bounded import DbId
from ..deps import AdminDep, PageDep, ReaderDep, SessionDep, SettingsDep
from ..errors import NotFound, Unauthorized, responses
from ..models import AlertDirection, AlertStatus, SuspectState
from ..pagination import Page, paginate
from . import repository as alert_sql
from . import detection, reads
from .schemas import AlertGroupRead, CheckResult, CreepRead, Redetect, RedetectAccepted, SuspectRead, Triage

router = APIRouter(prefix="/alerts", tags=["alerts"])

_SHA = Query(pattern=r"^[0-9a-f]{40}$", description="Full commit sha")
# Read once the caller is an admin (bodies.py).
RedetectBody = Annotated[Redetect, json_body(Redetect)]
TriageBody = Annotated[Triage, json_body(Triage)]


@router.get("", responses=responses(Unauthorized))
def list_alerts(
    session: SessionDep,
    _: ReaderDep,
    page: PageDep,
    status: Annotated[AlertStatus | None, Query()] = None,
    direction: Annotated[AlertDirection | None, Query()] = None,
    machine_id: Annotated[DbId | None, Query()] = None,
    repository_id: Annotated[DbId | None, Query()] = None,
    branch: Annotated[str | None, Query(description="Branch name")] = None,
    config: Annotated[str | None, Query(description="Groups with an alert of this benchmark config")] = None,
    metric: Annotated[str | None, Query(description="Groups with an alert of this metric")] = None,
    sightings: Annotated[bool, Query(description="Also later sightings of a change another commit carries first "
                                                 "(a merge of it, a cherry-pick or rebase of it)")] = False,
) -> Page[AlertGroupRead]:
    """Alert groups, newest first; a change is listed once, at the first commit that carries it."""
    statement = alert_sql.groups_statement(
        status.value if status else None, direction.value if direction else None, machine_id, repository_id, branch, config, metric,
        sightings,
    )
    return reads.read_page(session, paginate(session, statement, page, lambda group: group))


@router.get("/pending", responses=responses(Unauthorized))
def list_pending(
    session: SessionDep,
    _: ReaderDep,
    page: PageDep,
    state: Annotated[SuspectState, Query(description="pending (default), exhausted, confirmed or rejected")] = SuspectState.PENDING,
    machine_id: Annotated[DbId | None, Query()] = None,
    branch: Annotated[str | None, Query(description="Branch name")] = None,
    metric: Annotated[str | None, Query()] = None,
) -> Page[SuspectRead]:
    """Suspected changes, newest first: pending while their confirmation rounds run, not alerts."""
    statement = alert_sql.suspects_statement(state.value, machine_id, branch, metric)
    return reads.read_suspect_page(session, paginate(session, statement, page, lambda row: row))


@router.get("/creeps", responses=responses(Unauthorized))
def list_creeps(
    session: SessionDep,
    _: ReaderDep,
    page: PageDep,
    machine_id: Annotated[DbId | None, Query()] = None,
    branch: Annotated[str | None, Query(description="Branch name")] = None,
    metric: Annotated[str | None, Query()] = None,
) -> Page[CreepRead]:
    """Creeps, newest first: a level that moved gradually over a range of commits with no single commit to
    blame (a host aging, many small commits). Not alerts: no commit's status fails for them."""
    return reads.read_creep_page(session, paginate(session, alert_sql.creeps_statement(machine_id, branch, metric), page, lambda row: row))


@router.get("/check", responses=responses(Unauthorized, NotFound))
def check_commit(
    session: SessionDep,
    _: ReaderDep,
    commit: Annotated[str, _SHA],
    repository: Annotated[str | None, Query(description="Repository name, as its forge names it (owner/name)")] = None,
    machine: Annotated[str | None, Query(description="Machine name or id; default every machine")] = None,
) -> CheckResult:
    """The CI gate: regressed (an untriaged regression implicates the commit), clean, or pending (not analysed
    yet, or a suspected change of the commit is being confirmed); exit codes 1, 0, 2."""
    return reads.check(session, commit, repository, machine)


@router.post("/detect", status_code=status.HTTP_202_ACCEPTED, responses=responses(Unauthorized, NotFound))
def redetect(_: AdminDep, data: RedetectBody, session: SessionDep) -> RedetectAccepted:
    """Run detection again over every series of a branch x machine (e.g. after a detector upgrade)."""
    branch_id = reads.branch_id_of(session, data.repository_id, data.branch)
    configs = alert_sql.configs_of_machine_on_branch(session, branch_id, data.machine_id)
    detection.request_redetection(session, branch_id, data.machine_id)
    return RedetectAccepted(configs=len(configs))


@router.get("/{group_id}", responses=responses(Unauthorized, NotFound))
def get_alert_group(group_id: DbId, session: SessionDep, _: ReaderDep) -> AlertGroupRead:
    return reads.get_group(session, group_id)


@router.post("/{group_id}/triage", responses=responses(Unauthorized, NotFound))
def triage(group_id: DbId, _: AdminDep, data: TriageBody, session: SessionDep, settings: SettingsDep) -> AlertGroupRead:
    """Set untriaged / acknowledged / invalid / fixed with a note and who; commit statuses follow."""
    return reads.triage(session, group_id, data, settings)
