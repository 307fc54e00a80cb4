"""Turn a verified forge delivery into commits on a branch and their jobs.

Order of checks, and why: the body must parse and name a repository before we know whose secret
to verify with; nothing is written until the signature is good; the delivery id is recorded in the
same transaction as the commits and jobs, so a redelivery is recognised and does nothing, and a
delivery answered 202 has its jobs whether or not the broker is up.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from .. import db
from ..errors import BadRequest, Unauthorized, Unprocessable, summarize, validation_details
from ..models import Forge, Repository, WebhookDelivery, utcnow
from ..repos import repository as repo_sql
from ..repos.service import record_push
from ..security import github_signature_valid, gitlab_token_valid
from ..settings import get_settings
from .schemas import ZERO_SHA, ForgeCommit, GitHubPush, GitLabPush, Push, WebhookAccepted


def handle_github(session: Session, event: str, delivery_id: str, signature: str | None, body: bytes) -> WebhookAccepted:
    payload = _parse_object(body)
    name = _dig(payload, "repository", "full_name")
    repository = _find_repository(session, Forge.GITHUB, name)
    secret = repository.webhook_secret if repository else _UNKNOWN_SECRET
    if not github_signature_valid(secret, body, signature) or repository is None:
        raise _not_verified(Forge.GITHUB)

    if event == "ping":
        return _answer(session, repository, Forge.GITHUB, delivery_id, event, None, WebhookAccepted(status="pong"))
    if event != "push":
        return _answer(session, repository, Forge.GITHUB, delivery_id, event, None, _ignored(f"event {event!r}"))
    data = _validate(GitHubPush, payload)
    commits = data.commits or ([data.head_commit] if data.head_commit else [])
    push = Push.from_forge(data.ref, data.before, data.after, commits)
    return _accept_push(session, repository, Forge.GITHUB, delivery_id, event, push)


def handle_gitlab(session: Session, event: str, event_uuid: str | None, token: str | None, body: bytes) -> WebhookAccepted:
    payload = _parse_object(body)
    name = _dig(payload, "project", "path_with_namespace")
    repository = _find_repository(session, Forge.GITLAB, name)
    secret = repository.webhook_secret if repository else _UNKNOWN_SECRET
    if not gitlab_token_valid(secret, token) or repository is None:
        raise _not_verified(Forge.GITLAB)

    # Older GitLab sends no per-event id; the body itself then identifies a redelivery.
    delivery_id = event_uuid or "sha256:" + hashlib.sha256(body).hexdigest()
    if event not in ("Push Hook", "Tag Push Hook"):
        return _answer(session, repository, Forge.GITLAB, delivery_id, event, None, _ignored(f"event {event!r}"))
    data = _validate(GitLabPush, payload)
    commits = data.commits or ([ForgeCommit(id=data.checkout_sha)] if data.checkout_sha else [])
    push = Push.from_forge(data.ref, data.before, data.after, commits, data.total_commits_count)
    return _accept_push(session, repository, Forge.GITLAB, delivery_id, event, push)


def _accept_push(session: Session, repository: Repository, forge: Forge, delivery_id: str, event: str, push: Push) -> WebhookAccepted:
    if push.is_deletion:
        return _answer(session, repository, forge, delivery_id, event, push.ref, _ignored("ref deleted"))
    if push.is_tag and not repository.track_tags:
        return _answer(session, repository, forge, delivery_id, event, push.ref, _ignored("tag (repository does not track tags)"))
    if not push.ref.startswith(("refs/heads/", "refs/tags/")):
        return _answer(session, repository, forge, delivery_id, event, push.ref, _ignored("not a branch or tag"))
    if not push.commits:
        return _answer(session, repository, forge, delivery_id, event, push.ref, _ignored("no commits"))

    accepted = WebhookAccepted(status="scheduled", detail=f"push to {push.ref_name}")
    delivery = _record(session, repository, forge, delivery_id, event, push.ref, accepted)
    if delivery is None:
        return WebhookAccepted(status="duplicate", detail=f"delivery {delivery_id} was already processed")
    before = None if push.before == ZERO_SHA else push.before
    recorded = record_push(session, repository, push.ref_name, before, push.after, push.commits, get_settings(), delivery)
    detail = f"{recorded.recorded_commits} commit(s) on {push.ref_name}"
    if not recorded.complete:
        detail += " (incomplete: the repository could not be fetched; the listed commits are recorded and the rest follow when it can)"
    return WebhookAccepted(status="scheduled", detail=detail, commits=recorded.recorded_commits, complete=recorded.complete)


def _record(
    session: Session, repository: Repository, forge: Forge, delivery_id: str, event: str, ref: str | None, outcome: WebhookAccepted
) -> int | None:
    """Record the delivery; its row id, or None when it was recorded before (a redelivery)."""
    row = {
        "forge": forge.value,
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


def _answer(
    session: Session, repository: Repository, forge: Forge, delivery_id: str, event: str, ref: str | None, outcome: WebhookAccepted
) -> WebhookAccepted:
    """Record a delivery that needs no work, and answer it (a redelivery: duplicate)."""
    if _record(session, repository, forge, delivery_id, event, ref, outcome) is None:
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


def _find_repository(session: Session, forge: Forge, name: str) -> Repository | None:
    repository = repo_sql.by_name(session, name)
    return repository if repository is not None and repository.forge == forge.value else None


# An unknown repository is checked against a secret nobody has, so that it answers exactly like a
# bad signature (same status, same body, same work): the webhook routes do not tell anyone which
# repository names are registered.
_UNKNOWN_SECRET = secrets.token_hex(32)


def _not_verified(forge: Forge) -> Unauthorized:
    header = "X-Hub-Signature-256" if forge is Forge.GITHUB else "X-Gitlab-Token"
    return Unauthorized(f"{header} does not verify with the secret of a registered {forge.value} repository of that name")


def _validate(model: type[GitHubPush] | type[GitLabPush], payload: dict[str, Any]) -> Any:
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        details = validation_details(exc.errors())
        raise Unprocessable(f"not a valid push payload: {summarize(details)}", details) from None
