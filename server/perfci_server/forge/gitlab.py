"""GitLab: `Push Hook`, `Tag Push Hook` and `Merge Request Hook` deliveries authenticated by the
secret in ``X-Gitlab-Token``; the commit status API (``POST /projects/{path}/statuses/{sha}``) and
merge-request notes (``POST /projects/{id}/merge_requests/{iid}/notes``, ``PUT .../notes/{id}``).
Merge-request heads are fetched from ``refs/merge-requests/<iid>/head``."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any, ClassVar, Literal
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from .events import Ignored, Parsed, PullEvent, PushEvent, oldest_first
from .kind import DESCRIPTION_MAX, ApiCall, ForgeKind
from .payloads import ForgeCommit, Sha


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Project(_Lenient):
    path_with_namespace: str
    default_branch: str | None = None


class Push(_Lenient):
    object_kind: Literal["push", "tag_push"]
    ref: str
    before: Sha
    after: Sha
    project: Project
    commits: list[ForgeCommit] = Field(default_factory=list)
    checkout_sha: Sha | None = None


class LastCommit(_Lenient):
    id: Sha


class MergeAttributes(_Lenient):
    iid: int = Field(ge=1, le=2**53)
    title: str = ""
    action: str | None = None
    source_branch: str
    target_branch: str
    last_commit: LastCommit


class MergeRequestEvent(_Lenient):
    object_kind: Literal["merge_request"]
    project: Project
    object_attributes: MergeAttributes


PULL_ACTIONS = {"open": "open", "reopen": "open", "update": "open", "close": "close", "merge": "close"}


class GitLab(ForgeKind):
    name = "gitlab"
    title = "GitLab"
    event_header = "X-Gitlab-Event"
    delivery_header = "X-Gitlab-Event-UUID"
    delivery_required = False  # older GitLab sends no per-event id: the body then identifies a redelivery
    signature_header = "X-Gitlab-Token"
    repository_field = ("project", "path_with_namespace")
    git_user = "oauth2"
    pull_refspec = "+refs/merge-requests/*/head:refs/pull/*/head"
    state_names: ClassVar[dict[str, str]] = {"failure": "failed", "neutral": "skipped"}

    def verifies(self, secret: str, body: bytes, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(secret.encode(), (given or "").encode())

    def delivery_id(self, given: str | None, body: bytes) -> str:
        return given or "sha256:" + hashlib.sha256(body).hexdigest()

    def parse(self, event: str, payload: dict[str, Any]) -> Parsed:
        if event == "Merge Request Hook":
            merge = MergeRequestEvent.model_validate(payload)
            mr = merge.object_attributes
            ref = f"refs/heads/{mr.source_branch}"
            meaning = PULL_ACTIONS.get(mr.action or "")
            if meaning is None:
                return Parsed(Ignored(f"{event} action {mr.action!r}"), merge.project.default_branch, ref)
            return Parsed(PullEvent(mr.iid, meaning, mr.title, mr.target_branch, mr.source_branch, mr.last_commit.id,  # type: ignore[arg-type]
                                    merged=mr.action == "merge"), merge.project.default_branch, ref)
        if event not in ("Push Hook", "Tag Push Hook"):
            return Parsed(Ignored(f"event {event!r}"))
        push = Push.model_validate(payload)
        listed = [c.pushed() for c in push.commits] or ([ForgeCommit(id=push.checkout_sha).pushed()] if push.checkout_sha else [])
        return Parsed(PushEvent(push.ref, push.before, push.after, oldest_first(listed, push.after)),
                      push.project.default_branch, push.ref)

    def auth_headers(self, token: str) -> dict[str, str]:
        return {"PRIVATE-TOKEN": token}

    def status_call(self, api_url: str, token: str, project: str, sha: str, state: str, context: str,
                    description: str, target_url: str | None) -> ApiCall:
        body: dict[str, Any] = {"state": self.state_name(state), "name": context, "description": description[:DESCRIPTION_MAX]}
        if target_url:
            body["target_url"] = target_url
        return ApiCall("POST", f"{api_url.rstrip('/')}/projects/{quote(project, safe='')}/statuses/{sha}",
                       self.auth_headers(token), body)

    def comment_call(self, api_url: str, token: str, project: str, number: int, comment_id: str | None,
                     body: str) -> ApiCall:
        notes = f"{api_url.rstrip('/')}/projects/{quote(project, safe='')}/merge_requests/{number}/notes"
        if comment_id:
            return ApiCall("PUT", f"{notes}/{comment_id}", self.auth_headers(token), {"body": body})
        return ApiCall("POST", notes, self.auth_headers(token), {"body": body})
