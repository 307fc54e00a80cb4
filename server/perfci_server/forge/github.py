"""GitHub: `push`, `pull_request` and `ping` deliveries signed with HMAC-SHA256 in
``X-Hub-Signature-256``; the statuses API (``POST /repos/{owner}/{repo}/statuses/{sha}``) and issue
comments (``POST /repos/{o}/{r}/issues/{n}/comments``, ``PATCH /repos/{o}/{r}/issues/comments/{id}``).
Gitea serves the same shapes (gitea.py builds on this record)."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from .events import Ignored, Parsed, Ping, PullEvent, PushEvent, oldest_first
from .kind import DESCRIPTION_MAX, ApiCall, ForgeKind
from .payloads import ForgeCommit, Sha


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")  # forges add fields freely


class Repository(_Lenient):
    full_name: str
    default_branch: str | None = None


class Push(_Lenient):
    ref: str
    before: Sha
    after: Sha
    deleted: bool = False
    forced: bool = False
    repository: Repository
    commits: list[ForgeCommit] = Field(default_factory=list)
    # The pushed head; the only commit given when a branch or tag is created at an existing commit.
    head_commit: ForgeCommit | None = None


class Ref(_Lenient):
    ref: str
    sha: Sha


class Pull(_Lenient):
    number: int = Field(ge=1, le=2**53)
    title: str = ""
    merged: bool = False
    head: Ref
    base: Ref


class PullRequestEvent(_Lenient):
    action: str
    number: int = Field(ge=1, le=2**53)
    pull_request: Pull
    repository: Repository


# What an action means for perfci: measure the (new) head against its base, or stop. "edited" may
# carry a new base branch. Gitea says "synchronized" where GitHub says "synchronize".
PULL_ACTIONS = {"opened": "open", "reopened": "open", "ready_for_review": "open", "synchronize": "open",
                "synchronized": "open", "edited": "open", "closed": "close"}


def signature(secret: str, body: bytes) -> str:
    """``sha256=<hex HMAC-SHA256 of the body>``, as GitHub signs a delivery."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class GitHub(ForgeKind):
    name = "github"
    title = "GitHub"
    also_accepts = ("gitea",)
    event_header = "X-GitHub-Event"
    delivery_header = "X-GitHub-Delivery"
    signature_header = "X-Hub-Signature-256"
    repository_field = ("repository", "full_name")
    git_user = "x-access-token"
    pull_refspec = "+refs/pull/*/head:refs/pull/*/head"
    state_names: ClassVar[dict[str, str]] = {"neutral": "error"}

    def verifies(self, secret: str, body: bytes, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(signature(secret, body).encode(), (given or "").strip().encode())

    def parse(self, event: str, payload: dict[str, Any]) -> Parsed:
        if event == "ping":
            return Parsed(Ping())
        if event == "pull_request":
            pull = PullRequestEvent.model_validate(payload)
            pr = pull.pull_request
            meaning = PULL_ACTIONS.get(pull.action)
            if meaning is None:
                return Parsed(Ignored(f"pull_request action {pull.action!r}"), pull.repository.default_branch,
                              f"refs/heads/{pr.head.ref}")
            return Parsed(PullEvent(pr.number, meaning, pr.title, pr.base.ref, pr.head.ref, pr.head.sha,  # type: ignore[arg-type]
                                    merged=pr.merged),
                          pull.repository.default_branch, f"refs/heads/{pr.head.ref}")
        if event != "push":
            return Parsed(Ignored(f"event {event!r}"))
        push = Push.model_validate(payload)
        listed = push.commits or ([push.head_commit] if push.head_commit else [])
        commits = oldest_first([c.pushed() for c in listed], push.after)
        return Parsed(PushEvent(push.ref, push.before, push.after, commits), push.repository.default_branch, push.ref)

    def auth_headers(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}

    def status_call(self, api_url: str, token: str, project: str, sha: str, state: str, context: str,
                    description: str, target_url: str | None) -> ApiCall:
        body: dict[str, Any] = {"state": self.state_name(state), "context": context, "description": description[:DESCRIPTION_MAX]}
        if target_url:
            body["target_url"] = target_url
        return ApiCall("POST", f"{api_url.rstrip('/')}/repos/{project}/statuses/{sha}", self.auth_headers(token), body)

    def comment_call(self, api_url: str, token: str, project: str, number: int, comment_id: str | None,
                     body: str) -> ApiCall:
        base = f"{api_url.rstrip('/')}/repos/{project}/issues"
        if comment_id:
            return ApiCall("PATCH", f"{base}/comments/{comment_id}", self.auth_headers(token), {"body": body})
        return ApiCall("POST", f"{base}/{number}/comments", self.auth_headers(token), {"body": body})

