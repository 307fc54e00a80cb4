"""Commit statuses over the forges' REST APIs: the GitHub statuses API
(``POST /repos/{owner}/{repo}/statuses/{sha}``) and the GitLab commit status API
(``POST /projects/{url-encoded path}/statuses/{sha}``).

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


class ForgeUnavailable(Exception):
    """The forge did not take the status this time (network, 5xx, rate limit)."""


class ForgeRejected(Exception):
    """The forge refused the status (4xx other than 429)."""


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
    if post.forge is Forge.GITHUB:
        url = f"{base}/repos/{post.project}/statuses/{post.sha}"
        headers = {"Authorization": f"Bearer {post.token}", "Accept": "application/vnd.github+json",
                   "X-GitHub-Api-Version": "2022-11-28"}
        body: dict[str, Any] = {"state": post.state.value, "context": post.context, "description": description}
    else:
        url = f"{base}/projects/{quote(post.project, safe='')}/statuses/{post.sha}"
        headers = {"PRIVATE-TOKEN": post.token}
        state = {CommitState.SUCCESS: "success", CommitState.FAILURE: "failed", CommitState.PENDING: "pending"}[post.state]
        body = {"state": state, "name": post.context, "description": description}
    if post.target_url:
        body["target_url"] = post.target_url
    return url, headers, body


def send(post: StatusPost, timeout: float) -> int:
    """Post one status; returns the HTTP status code, raises ForgeUnavailable / ForgeRejected."""
    url, headers, body = request_of(post)
    try:
        response = httpx.post(url, headers={**headers, "User-Agent": "perfci"}, json=body, timeout=timeout)
    except httpx.HTTPError as exc:
        raise ForgeUnavailable(f"{post.forge.value} {url}: {exc.__class__.__name__}: {exc}") from exc
    if response.status_code >= 500 or response.status_code == 429:
        raise ForgeUnavailable(f"{post.forge.value} {url}: HTTP {response.status_code} {response.text[:300]}")
    if response.status_code >= 400:
        raise ForgeRejected(f"{post.forge.value} {url}: HTTP {response.status_code} {response.text[:300]}")
    return response.status_code
