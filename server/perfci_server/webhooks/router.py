from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header
from fastapi.responses import JSONResponse

from ..bodies import limited_body
from ..deps import SessionDep
from ..errors import BadRequest, PayloadTooLarge, Unauthorized, Unprocessable, responses
from . import service
from .schemas import WebhookAccepted

router = APIRouter(prefix="/webhooks", tags=["webhooks"])

WebhookBody = Annotated[bytes, Depends(limited_body("webhook_max_bytes"))]
_ERRORS = responses(BadRequest, Unauthorized, PayloadTooLarge, Unprocessable)
_BODY_DOC = {"requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}}}


def _respond(result: WebhookAccepted) -> JSONResponse:
    # 202: work was (or will be) scheduled or deliberately ignored; 200: nothing new to do.
    code = 200 if result.status in ("duplicate", "pong") else 202
    return JSONResponse(result.model_dump(mode="json"), status_code=code)


@router.post(
    "/github",
    status_code=202,
    response_model=WebhookAccepted,
    responses={200: {"model": WebhookAccepted, "description": "Ping or redelivery"}, **_ERRORS},
    openapi_extra=_BODY_DOC,
)
def github(
    body: WebhookBody,
    session: SessionDep,
    x_github_event: Annotated[str | None, Header()] = None,
    x_github_delivery: Annotated[str | None, Header()] = None,
    x_hub_signature_256: Annotated[str | None, Header()] = None,
) -> JSONResponse:
    """GitHub `push`, `pull_request` and `ping` deliveries, signed with the repository's secret
    (HMAC-SHA256). Gitea's deliveries are accepted here too (they carry the same headers)."""
    if not x_github_event or not x_github_delivery:
        raise BadRequest("X-GitHub-Event and X-GitHub-Delivery headers are required")
    return _respond(service.handle_github(session, x_github_event, x_github_delivery, x_hub_signature_256, body))


@router.post(
    "/gitea",
    status_code=202,
    response_model=WebhookAccepted,
    responses={200: {"model": WebhookAccepted, "description": "Redelivery"}, **_ERRORS},
    openapi_extra=_BODY_DOC,
)
def gitea(
    body: WebhookBody,
    session: SessionDep,
    x_gitea_event: Annotated[str | None, Header()] = None,
    x_gitea_delivery: Annotated[str | None, Header()] = None,
    x_gitea_signature: Annotated[str | None, Header()] = None,
) -> JSONResponse:
    """Gitea (and Forgejo) `push` and `pull_request` deliveries, signed in `X-Gitea-Signature`."""
    if not x_gitea_event or not x_gitea_delivery:
        raise BadRequest("X-Gitea-Event and X-Gitea-Delivery headers are required")
    return _respond(service.handle_gitea(session, x_gitea_event, x_gitea_delivery, x_gitea_signature, body))


@router.post(
    "/gitlab",
    status_code=202,
    response_model=WebhookAccepted,
    responses={200: {"model": WebhookAccepted, "description": "Redelivery"}, **_ERRORS},
    openapi_extra=_BODY_DOC,
)
def gitlab(
    body: WebhookBody,
    session: SessionDep,
    x_gitlab_event: Annotated[str | None, Header()] = None,
    x_gitlab_token: Annotated[str | None, Header()] = None,
    x_gitlab_event_uuid: Annotated[str | None, Header()] = None,
) -> JSONResponse:
    """GitLab `Push Hook`, `Tag Push Hook` and `Merge Request Hook` deliveries, authenticated by the secret token."""
    if not x_gitlab_event:
        raise BadRequest("X-Gitlab-Event header is required")
    return _respond(service.handle_gitlab(session, x_gitlab_event, x_gitlab_event_uuid, x_gitlab_token, body))
