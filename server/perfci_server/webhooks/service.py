"""Turn a verified forge delivery into commits on a branch and their jobs, or a pull request's work.

Order of checks, and why: the body must parse and name a repository before we know whose secret
to verify with; nothing is written until the signature is good; the delivery id is recorded in the
same transaction as the commits and jobs, so a redelivery is recognised and does nothing, and a
delivery answered 202 has its jobs whether or not the broker is up.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from .. import db
from ..errors import BadRequest, Unauthorized, Unprocessable, summarize, validation_details
from ..models import Forge, Repository, WebhookDelivery, utcnow
from ..repos import repository as repo_sql
from ..repos.service import record_push
from ..pulls import service as pull_service
from ..security import gitea_signature_valid, github_signature_valid, gitlab_token_valid
from ..settings import get_settings
from .schemas import (
    PULL_ACTIONS, ZERO_SHA, ForgeCommit, ForgePush, GitHubPullRequestEvent, GitHubPush, GitLabMergeRequestEvent, GitLabPush,
    WebhookAccepted,
)


def handle_github(session: Session, event: str, delivery_id: str, signature: str | None, body: bytes) -> WebhookAccepted:
    """GitHub's deliveries, and Gitea's sent to this route (they carry the same headers and shapes)."""
    payload = _parse_object(body)
    repository = _verified(session, _dig(payload, "repository", "full_name"), (Forge.GITHUB, Forge.GITEA),
                           lambda secret: github_signature_valid(secret, body, signature), "X-Hub-Signature-256")
    return _github_dialect(session, repository, delivery_id, event, payload)


def handle_gitea(session: Session, event: str, delivery_id: str, signature: str | None, body: bytes) -> WebhookAccepted:
    """Gitea's deliveries on their own route, signed in ``X-Gitea-Signature`` (hex HMAC-SHA256)."""
    payload = _parse_object(body)
    repository = _verified(session, _dig(payload, "repository", "full_name"), (Forge.GITEA, Forge.GITHUB),
                           lambda secret: gitea_signature_valid(secret, body, signature), "X-Gitea-Signature")
    return _github_dialect(session, repository, delivery_id, event, payload)


def _github_dialect(session: Session, repository: Repository, delivery_id: str, event: str, payload: dict[str, Any]) -> WebhookAccepted:
    forge = Forge(repository.forge)
    if event == "ping":
        return _answer(session, repository, forge, delivery_id, event, None, WebhookAccepted(status="pong"))
    if event == "pull_request":
        pull = _validate(GitHubPullRequestEvent, payload, "pull request")
        _note_default_branch(repository, pull.repository.default_branch)
        pr = pull.pull_request
        return _accept_pull(session, repository, forge, delivery_id, event, pull.action, pr.number, pr.title, pr.base.ref, pr.head.ref,
                            pr.head.sha)
    if event != "push":
        return _answer(session, repository, forge, delivery_id, event, None, _ignored(f"event {event!r}"))
    data = _validate(GitHubPush, payload, "push")
    _note_default_branch(repository, data.repository.default_branch)
    commits = data.commits or ([data.head_commit] if data.head_commit else [])
    push = ForgePush.from_forge(data.ref, data.before, data.after, commits)
    return _accept_push(session, repository, forge, delivery_id, event, push)


def handle_gitlab(session: Session, event: str, event_uuid: str | None, token: str | None, body: bytes) -> WebhookAccepted:
    payload = _parse_object(body)
    repository = _verified(session, _dig(payload, "project", "path_with_namespace"), (Forge.GITLAB,),
                           lambda secret: gitlab_token_valid(secret, token), "X-Gitlab-Token")

    # Older GitLab sends no per-event id; the body itself then identifies a redelivery.
    delivery_id = event_uuid or "sha256:" + hashlib.sha256(body).hexdigest()
    if event == "Merge Request Hook":
        merge = _validate(GitLabMergeRequestEvent, payload, "merge request")
        _note_default_branch(repository, merge.project.default_branch)
        mr = merge.object_attributes
        return _accept_pull(session, repository, Forge.GITLAB, delivery_id, event, mr.action or "", mr.iid, mr.title,
                            mr.target_branch, mr.source_branch, mr.last_commit.id)
    if event not in ("Push Hook", "Tag Push Hook"):
        return _answer(session, repository, Forge.GITLAB, delivery_id, event, None, _ignored(f"event {event!r}"))
    data = _validate(GitLabPush, payload, "push")
    _note_default_branch(repository, data.project.default_branch)
    commits = data.commits or ([ForgeCommit(id=data.checkout_sha)] if data.checkout_sha else [])
    push = ForgePush.from_forge(data.ref, data.before, data.after, commits)
    return _accept_push(session, repository, Forge.GITLAB, delivery_id, event, push)


def _note_default_branch(repository: Repository, name: str | None) -> None:
    """The forge's word on the default branch: the base of every other branch from now on."""
    if name and name != repository.default_branch:
        repository.default_branch = name[:255]


def _accept_pull(session: Session, repository: Repository, forge: Forge, delivery_id: str, event: str, action: str, number: int,
                 title: str, base_branch: str, head_branch: str, head_sha: str) -> WebhookAccepted:
    meaning = PULL_ACTIONS.get(action)
    ref = f"refs/heads/{head_branch}"
    if meaning is None:
        return _answer(session, repository, forge, delivery_id, event, ref, _ignored(f"{event} action {action!r}"))
    accepted = WebhookAccepted(status="scheduled", detail=f"pull request #{number} {action}")
    if _record(session, repository, forge, delivery_id, event, ref, accepted) is None:
        return WebhookAccepted(status="duplicate", detail=f"delivery {delivery_id} was already processed")
    detail = pull_service.on_event(session, repository, number, meaning, title, base_branch, head_branch, head_sha)
    return WebhookAccepted(status="scheduled", detail=detail)


def _accept_push(session: Session, repository: Repository, forge: Forge, delivery_id: str, event: str, push: ForgePush) -> WebhookAccepted:
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
    detail = (f"{recorded.listed_commits} listed commit(s) on {push.ref_name}; the whole range follows from the "
              "server's mirror of the repository")
    return WebhookAccepted(status="scheduled", detail=detail, commits=recorded.listed_commits, complete=recorded.complete)


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


def _verified(session: Session, name: str, forges: tuple[Forge, ...], signed: Callable[[str], bool], header: str) -> Repository:
    """The registered repository of that name on one of the route's forges, when the delivery
    verifies with its secret; else 401. An unknown repository is checked against a secret nobody
    has, so that it answers exactly like a bad signature (same status, same body, same work): the
    webhook routes do not tell anyone which repository names are registered."""
    repository = repo_sql.by_name(session, name)
    if repository is not None and repository.forge not in {f.value for f in forges}:
        repository = None
    if not signed(repository.webhook_secret if repository else _UNKNOWN_SECRET) or repository is None:
        raise Unauthorized(f"{header} does not verify with the secret of a registered {forges[0].value} repository of that name")
    return repository


_UNKNOWN_SECRET = secrets.token_hex(32)


def _validate(model: type[Any], payload: dict[str, Any], what: str) -> Any:
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        details = validation_details(exc.errors())
        raise Unprocessable(f"not a valid {what} payload: {summarize(details)}", details) from None
