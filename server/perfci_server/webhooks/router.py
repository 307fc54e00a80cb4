"""One webhook route per forge of the registry (``/webhooks/<forge>``), each reading the headers
its forge sends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from ..bodies import limited_body
from ..deps import SessionDep
from ..errors import BadRequest, PayloadTooLarge, Unauthorized, Unprocessable, responses
from ..forge.kind import ForgeKind, MissingHeader
from ..forge.registry import KINDS
from . import service
from .schemas import WebhookAccepted

router = APIRouter(prefix="/webhooks", tags=["webhooks"])

WebhookBody = Annotated[bytes, Depends(limited_body("webhook_max_bytes"))]
_ERRORS = responses(BadRequest, Unauthorized, PayloadTooLarge, Unprocessable)


def _respond(result: WebhookAccepted) -> JSONResponse:
    # 202: work was (or will be) scheduled or deliberately ignored; 200: nothing new to do.
    code = 200 if result.status in ("duplicate", "pong") else 202
    return JSONResponse(result.model_dump(mode="json"), status_code=code)


def _endpoint(kind: ForgeKind) -> Callable[..., JSONResponse]:
    def receive(request: Request, body: WebhookBody, session: SessionDep) -> JSONResponse:
        try:
            headers = kind.headers(request.headers)
        except MissingHeader as exc:
            raise BadRequest(str(exc)) from None
        return _respond(service.handle(session, kind, headers, body))

    receive.__name__ = kind.name
    return receive


def _openapi(kind: ForgeKind) -> dict[str, object]:
    header = {"in": "header", "schema": {"type": "string"}}
    parameters = [{"name": kind.event_header, "required": True, **header},
                  {"name": kind.delivery_header, "required": kind.delivery_required, **header},
                  {"name": kind.signature_header, "required": False, **header}]
    return {"parameters": parameters,
            "requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}}}


for _kind in KINDS.values():
    accepted = ", ".join(k.title for k in (_kind, *(KINDS[n] for n in _kind.also_accepts)))
    router.add_api_route(
        f"/{_kind.name}", _endpoint(_kind), methods=["POST"], status_code=202, response_model=WebhookAccepted,
        responses={200: {"model": WebhookAccepted, "description": "Ping or redelivery"}, **_ERRORS},
        openapi_extra=_openapi(_kind), summary=f"{_kind.title} deliveries",
        description=f"Push and pull (merge) request deliveries of {_kind.title}, checked with the registered repository's "
                    f"webhook secret in `{_kind.signature_header}` (repositories registered as {accepted}).",
    )
