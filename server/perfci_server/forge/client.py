"""Commit statuses and pull-request comments over the forges' REST APIs.

Statuses: the GitHub statuses API (``POST /repos/{owner}/{repo}/statuses/{sha}``, which Gitea
serves under its ``/api/v1`` with the same shapes) and the GitLab commit status API
(``POST /projects/{url-encoded path}/statuses/{sha}``). Comments: GitHub and Gitea issue comments
(``POST /repos/{o}/{r}/issues/{n}/comments``, ``PATCH /repos/{o}/{r}/issues/comments/{id}``),
GitLab merge-request notes (``POST /projects/{id}/merge_requests/{iid}/notes``, ``PUT .../notes/{id}``).

A verdict with no answer (``neutral``) has no state of its own on GitHub's statuses: it is sent as
``error`` there (never ``success`` by absence), as ``warning`` on Gitea and ``skipped`` on GitLab,
with the description saying why.

A post either succeeds, fails for now (:class:`ForgeUnavailable`: no answer, 5xx, 429 — worth
retrying), or is refused (:class:`ForgeRejected`: any other 4xx, e.g. a bad token or an unknown
project — retrying the same request cannot help).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from ..models import CommitState, Forge

GITHUB_DESCRIPTION_MAX = 140  # GitHub rejects longer descriptions

_STATE = {
    Forge.GITHUB: {CommitState.NEUTRAL: "error"},
    Forge.GITEA: {CommitState.NEUTRAL: "warning"},
    Forge.GITLAB: {CommitState.SUCCESS: "success", CommitState.FAILURE: "failed", CommitState.PENDING: "pending",
                   CommitState.NEUTRAL: "skipped"},
}


class ForgeUnavailable(Exception):
    """The forge did not take the status this time (network, 5xx, rate limit)."""


class ForgeRejected(Exception):
    """The forge refused the request (4xx other than 429)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class StatusPost:
    forge: Forge
    api_url: str
    token: str
    project: str  # GitHub full_name / GitLab path_with_namespace
    sha: str
    state: CommitState
    context: str
    description: str
    target_url: str | None


def request_of(post: StatusPost) -> tuple[str, dict[str, str], dict[str, Any]]:
    """(url, headers, JSON body) of the forge's create-status call."""
    base = post.api_url.rstrip("/")
    description = post.description[:GITHUB_DESCRIPTION_MAX]
    state = _STATE[post.forge].get(post.state, post.state.value)
    if post.forge is Forge.GITLAB:
        url = f"{base}/projects/{quote(post.project, safe='')}/statuses/{post.sha}"
        body: dict[str, Any] = {"state": state, "name": post.context, "description": description}
    else:
        url = f"{base}/repos/{post.project}/statuses/{post.sha}"
        body = {"state": state, "context": post.context, "description": description}
    if post.target_url:
        body["target_url"] = post.target_url
    return url, auth_headers(post.forge, post.token), body


def auth_headers(forge: Forge, token: str) -> dict[str, str]:
    if forge is Forge.GITHUB:
        return {"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
    if forge is Forge.GITEA:
        return {"Authorization": f"token {token}", "Accept": "application/json"}
    return {"PRIVATE-TOKEN": token}


def send(post: StatusPost, timeout: float) -> int:
    """Post one status; returns the HTTP status code, raises ForgeUnavailable / ForgeRejected."""
    url, headers, body = request_of(post)
    return _call(post.forge, "POST", url, headers, body, timeout).status_code


@dataclass(frozen=True)
class CommentPost:
    """The one comment of a pull request: created on the first post, edited in place after."""

    forge: Forge
    api_url: str
    token: str
    project: str
    number: int  # GitHub/Gitea pull request number, GitLab merge request iid
    comment_id: str | None  # None: create it
    body: str


def comment_request(post: CommentPost) -> tuple[str, str, dict[str, Any]]:
    """(method, url, JSON body) of the create or edit call."""
    base = post.api_url.rstrip("/")
    if post.forge is Forge.GITLAB:
        notes = f"{base}/projects/{quote(post.project, safe='')}/merge_requests/{post.number}/notes"
        return ("PUT", f"{notes}/{post.comment_id}", {"body": post.body}) if post.comment_id else ("POST", notes, {"body": post.body})
    if post.comment_id:
        return "PATCH", f"{base}/repos/{post.project}/issues/comments/{post.comment_id}", {"body": post.body}
    return "POST", f"{base}/repos/{post.project}/issues/{post.number}/comments", {"body": post.body}


def send_comment(post: CommentPost, timeout: float) -> str:
    """Create or edit the comment; returns its id. A comment someone deleted is created again."""
    method, url, body = comment_request(post)
    headers = auth_headers(post.forge, post.token)
    try:
        response = _call(post.forge, method, url, headers, body, timeout)
    except ForgeRejected as exc:
        if post.comment_id is None or exc.status != 404:
            raise
        return send_comment(CommentPost(**{**post.__dict__, "comment_id": None}), timeout)
    try:
        return str(response.json()["id"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ForgeUnavailable(f"{post.forge.value} {url}: the answer names no comment id: {response.text[:200]}") from exc


def _call(forge: Forge, method: str, url: str, headers: dict[str, str], body: dict[str, Any], timeout: float) -> httpx.Response:
    try:
        response = httpx.request(method, url, headers={**headers, "User-Agent": "perfci"}, json=body, timeout=timeout)
    except httpx.HTTPError as exc:
        raise ForgeUnavailable(f"{forge.value} {url}: {exc.__class__.__name__}: {exc}") from exc
    if response.status_code >= 500 or response.status_code == 429:
        raise ForgeUnavailable(f"{forge.value} {url}: HTTP {response.status_code} {response.text[:300]}")
    if response.status_code >= 400:
        raise ForgeRejected(f"{forge.value} {url}: HTTP {response.status_code} {response.text[:300]}", response.status_code)
    return response
