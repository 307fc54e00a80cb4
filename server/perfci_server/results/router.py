"""Result upload (agents) and the query API over stored results (series, compare)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from perfci_core.metrics import Backend
from perfci_core.result import ResultDocument

from ..bodies import json_text, raw_body
from ..deps import AgentTokenDep, ReaderDep, SessionDep, authenticate_agent, committed
from ..errors import Conflict, Forbidden, NotFound, PayloadTooLarge, Unauthorized, Unprocessable, responses
from . import service
from ..bounded import DbId, DbInt
from .schemas import Comparison, Series, UploadAccepted

agent_router = APIRouter(prefix="/agent/jobs", tags=["agent"])
router = APIRouter(tags=["results"])

# Read before the agent is looked up (413 only); checked once it is, in the same trip to the threadpool.
UploadBody = Annotated[bytes, Depends(raw_body("upload_max_bytes"))]
_DOCUMENT_REF = "#/components/schemas/ResultDocument"


@agent_router.put(
    "/{job_id}/attempts/{attempt}/result",
    status_code=201,
    response_model=UploadAccepted,
    responses={
        200: {"model": UploadAccepted, "description": "This exact result was already stored (retry)"},
        **responses(Unauthorized, Forbidden, NotFound, Conflict, PayloadTooLarge, Unprocessable),
    },
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": {"$ref": _DOCUMENT_REF}}}}},
)
async def upload_result(job_id: DbId, attempt: DbInt, token: AgentTokenDep, body: UploadBody, session: SessionDep) -> Response:
    """Upload the `perfci measure --json` document of one attempt (idempotent on job + attempt)."""

    def upload() -> UploadAccepted:
        agent = authenticate_agent(session, token)
        json_text(body)
        document = service.parse_result_document(body)
        return service.ingest(session, agent, job_id, attempt, document)

    accepted = await committed(session, upload)
    return Response(accepted.model_dump_json(), status_code=200 if accepted.duplicate else 201, media_type="application/json")


@router.get("/series", responses=responses(Unauthorized, NotFound))
def get_series(
    session: SessionDep,
    _: ReaderDep,
    repository_id: DbId,
    branch: str,
    machine_id: DbId,
    config: Annotated[str, Query(description="Benchmark config name")],
    metric: Annotated[str, Query(description="Metric name from the catalogue")],
    backend: Backend,
    after_position: Annotated[DbInt | None, Query(description="Page: commits after this branch position")] = None,
    limit: Annotated[int, Query(ge=1, le=5000, description="Commits per page")] = 500,
) -> Series:
    """One metric of one machine x config along a branch, in commit order, with every sample."""
    return service.series(session, repository_id, branch, machine_id, config, metric, backend, after_position, limit)


@router.get("/compare", responses=responses(Unauthorized, NotFound))
def compare(
    session: SessionDep,
    _: ReaderDep,
    repository_id: DbId,
    base: Annotated[str, Query(pattern=r"^[0-9a-f]{40}$")],
    head: Annotated[str, Query(pattern=r"^[0-9a-f]{40}$")],
    machine_id: DbId,
    config: str,
) -> Comparison:
    """Compare two commits on one machine x config: per metric medians, % change and p-value."""
    return service.compare(session, repository_id, base, head, machine_id, config)


def document_schema() -> dict[str, object]:
    """ResultDocument's JSON schema, for the upload's OpenAPI request body."""
    return ResultDocument.model_json_schema(ref_template="#/components/schemas/{model}", by_alias=True)
