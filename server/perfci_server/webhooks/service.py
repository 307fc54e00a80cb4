"""Turn a verified forge delivery into commits on a branch and their jobs, or a pull request's work.

Order of checks, and why: the body must parse and name a repository before we know whose secret
to verify with; nothing is written until the signature is good; the delivery id is recorded in the
same transaction as the commits and jobs, so a redelivery is recognised and does nothing, and a
delivery answered 202 has its jobs whether or not the broker is up.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from .. import db
from ..errors import BadRequest, Unauthorized, Unprocessable, summarize, validation_details
from ..forge.events import ZERO_SHA, Ignored, Ping, PullEvent, PushEvent
from ..forge.kind import ForgeKind, Headers
from ..models import Repository, WebhookDelivery, utcnow
from ..pulls import service as pull_service
from ..repos import repository as repo_sql
from ..repos.service import record_push
from ..settings import get_settings
from .schemas import WebhookAccepted


def handle(session: Session, kind: ForgeKind, headers: Headers, body: bytes) -> WebhookAccepted:
    """One delivery to the route of ``kind``: verified with the repository's secret, recorded, acted on."""
    payload = _parse_object(body)
    repository = _verified(session, kind, _dig(payload, *kind.repository_field), body, headers.signature)
    delivery_id = kind.delivery_id(headers.delivery_id, body)
    try:
        parsed = kind.parse(headers.event, payload)
    except ValidationError as exc:
        details = validation_details(exc.errors())
        raise Unprocessable(f"not a valid {kind.title} {headers.event!r} payload: {summarize(details)}", details) from None
    _note_default_branch(repository, parsed.default_branch)
    event = parsed.event
    if isinstance(event, Ping):
        return _answer(session, repository, delivery_id, headers.event, None, WebhookAccepted(status="pong"))
    if isinstance(event, Ignored):
        return _answer(session, repository, delivery_id, headers.event, parsed.ref, _ignored(event.why))
    if isinstance(event, PullEvent):
        return _accept_pull(session, repository, delivery_id, headers.event, event)
    return _accept_push(session, repository, delivery_id, headers.event, event)


def _note_default_branch(repository: Repository, name: str | None) -> None:
    """The forge's word on the default branch: the base of every other branch from now on."""
    if name and name != repository.default_branch:
        repository.default_branch = name[:255]


def _accept_pull(session: Session, repository: Repository, delivery_id: str, event: str, pull: PullEvent) -> WebhookAccepted:
    ref = f"refs/heads/{pull.head_branch}"
    accepted = WebhookAccepted(status="scheduled", detail=f"pull request #{pull.number} {pull.action}")
    if _record(session, repository, delivery_id, event, ref, accepted) is None:
        return WebhookAccepted(status="duplicate", detail=f"delivery {delivery_id} was already processed")
    detail = pull_service.on_event(session, repository, pull, get_settings())
    return WebhookAccepted(status="scheduled", detail=detail)


def _accept_push(session: Session, repository: Repository, delivery_id: str, event: str, push: PushEvent) -> WebhookAccepted:
    if push.is_deletion:
        return _answer(session, repository, delivery_id, event, push.ref, _ignored("ref deleted"))
    if push.is_tag and not repository.track_tags:
        return _answer(session, repository, delivery_id, event, push.ref, _ignored("tag (repository does not track tags)"))
    if not push.ref.startswith(("refs/heads/", "refs/tags/")):
        return _answer(session, repository, delivery_id, event, push.ref, _ignored("not a branch or tag"))
    if not push.commits:
        return _answer(session, repository, delivery_id, event, push.ref, _ignored("no commits"))

    accepted = WebhookAccepted(status="scheduled", detail=f"push to {push.ref_name}")
    delivery = _record(session, repository, delivery_id, event, push.ref, accepted)
    if delivery is None:
        return WebhookAccepted(status="duplicate", detail=f"delivery {delivery_id} was already processed")
    before = None if push.before == ZERO_SHA else push.before
    recorded = record_push(session, repository, push.ref_name, before, push.after, push.commits, get_settings(), delivery)
    detail = (f"{recorded.listed_commits} listed commit(s) on {push.ref_name}; the whole range follows from the "
              "server's mirror of the repository")
    return WebhookAccepted(status="scheduled", detail=detail, commits=recorded.listed_commits, complete=recorded.complete)


def _record(session: Session, repository: Repository, delivery_id: str, event: str, ref: str | None,
            outcome: WebhookAccepted) -> int | None:
    """Record the delivery; its row id, or None when it was recorded before (a redelivery)."""
    row = {
        "forge": repository.forge,
        "delivery_id": delivery_id[:128],
        "event": event[:64],
        "repository_id": repository.id,
        "ref": ref[:255] if ref else None,
        "outcome": f"{outcome.status}: {outcome.detail}"[:255],
        "created_at": utcnow(),
    }
    result = db.insert_ignoring_conflicts(
        session, WebhookDelivery.__table__, [row], ["forge", "delivery_id"], returning=WebhookDelivery.__table__.c.id
    )
    inserted = result.first()
    return None if inserted is None else inserted[0]


def _answer(session: Session, repository: Repository, delivery_id: str, event: str, ref: str | None,
            outcome: WebhookAccepted) -> WebhookAccepted:
    """Record a delivery that needs no work, and answer it (a redelivery: duplicate)."""
    if _record(session, repository, delivery_id, event, ref, outcome) is None:
        return WebhookAccepted(status="duplicate", detail=f"delivery {delivery_id} was already processed")
    return outcome


def _ignored(why: str) -> WebhookAccepted:
    return WebhookAccepted(status="ignored", detail=why)


def _parse_object(body: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"body is not valid JSON: {exc}") from None
    except RecursionError:  # no forge nests that deep; the parser's stack gives out first
        raise BadRequest("body is not valid JSON: nested too deeply") from None
    if not isinstance(payload, dict):
        raise BadRequest("body must be a JSON object")
    return payload


def _dig(payload: dict[str, Any], *keys: str) -> str:
    value: Any = payload
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    if not isinstance(value, str) or not value:
        raise Unprocessable(f"payload has no {'.'.join(keys)}")
    return value


def _verified(session: Session, kind: ForgeKind, name: str, body: bytes, signature: str | None) -> Repository:
    """The registered repository of that name on one of the route's forges, when the delivery
    verifies with its secret; else 401. An unknown repository is checked against a secret nobody
    has, so that it answers exactly like a bad signature (same status, same body, same work): the
    webhook routes do not tell anyone which repository names are registered."""
    repository = repo_sql.by_name(session, name)
    if repository is not None and repository.forge not in (kind.name, *kind.also_accepts):
        repository = None
    if not kind.verifies(repository.webhook_secret if repository else _UNKNOWN_SECRET, body, signature) or repository is None:
        raise Unauthorized(f"{kind.signature_header} does not verify with the secret of a registered {kind.name} repository of that name")
    return repository


_UNKNOWN_SECRET = secrets.token_hex(32)
