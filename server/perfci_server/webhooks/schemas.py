"""The parts of GitHub, Gitea and GitLab push and pull/merge request deliveries we read, and the
forge-neutral push and pull request event they become.

Only the fields we use are declared; forges add fields freely, so extra ones are ignored.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from ..repos.service import PushedCommit

Sha = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}$")]
ZERO_SHA = "0" * 40


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Author(_Lenient):
    name: str = ""
    email: str = ""


class ForgeCommit(_Lenient):
    id: Sha
    message: str = ""
    timestamp: datetime | None = None
    author: Author = Field(default_factory=Author)


class GitHubRepository(_Lenient):
    full_name: str
    default_branch: str | None = None


class GitHubPush(_Lenient):
    ref: str
    before: Sha
    after: Sha
    deleted: bool = False
    forced: bool = False
    repository: GitHubRepository
    commits: list[ForgeCommit] = Field(default_factory=list)
    # The pushed head; the only commit given when a branch or tag is created at an existing commit.
    head_commit: ForgeCommit | None = None


class GitLabProject(_Lenient):
    path_with_namespace: str
    default_branch: str | None = None


class GitLabPush(_Lenient):
    object_kind: Literal["push", "tag_push"]
    ref: str
    before: Sha
    after: Sha
    project: GitLabProject
    commits: list[ForgeCommit] = Field(default_factory=list)
    checkout_sha: Sha | None = None


class GitHubRef(_Lenient):
    ref: str
    sha: Sha


class GitHubPull(_Lenient):
    number: int = Field(ge=1, le=2**53)
    title: str = ""
    head: GitHubRef
    base: GitHubRef


class GitHubPullRequestEvent(_Lenient):
    """GitHub's ``pull_request`` delivery (Gitea sends the same shape)."""

    action: str
    number: int = Field(ge=1, le=2**53)
    pull_request: GitHubPull
    repository: GitHubRepository


class GitLabLastCommit(_Lenient):
    id: Sha


class GitLabMergeAttributes(_Lenient):
    iid: int = Field(ge=1, le=2**53)
    title: str = ""
    action: str | None = None
    source_branch: str
    target_branch: str
    last_commit: GitLabLastCommit


class GitLabMergeRequestEvent(_Lenient):
    """GitLab's ``Merge Request Hook`` delivery."""

    object_kind: Literal["merge_request"]
    project: GitLabProject
    object_attributes: GitLabMergeAttributes


# What each forge's action means for perfci: measure the (new) head, or stop.
PULL_ACTIONS = {
    # GitHub; Gitea says "synchronized" where GitHub says "synchronize"
    "opened": "open", "reopened": "open", "ready_for_review": "open", "synchronize": "open", "synchronized": "open",
    "closed": "close",
    # GitLab
    "open": "open", "reopen": "open", "update": "open", "close": "close", "merge": "close",
}


class PullEvent(BaseModel):
    """A pull (merge) request event, whatever the forge."""

    number: int
    action: Literal["open", "close"]
    title: str
    base_branch: str
    head_branch: str
    head_sha: str


class ForgePush(BaseModel):
    """A push as a forge delivers it, whatever the forge: the ref and its listed commits, oldest
    first (the model of a recorded push is ``models.Push``)."""

    ref: str
    before: str
    after: str
    commits: list[PushedCommit]

    @property
    def is_tag(self) -> bool:
        return self.ref.startswith("refs/tags/")

    @property
    def is_deletion(self) -> bool:
        return self.after == ZERO_SHA

    @property
    def ref_name(self) -> str:
        for prefix in ("refs/heads/", "refs/tags/"):
            if self.ref.startswith(prefix):
                return self.ref[len(prefix) :]
        return self.ref

    @classmethod
    def from_forge(cls, ref: str, before: str, after: str, commits: list[ForgeCommit]) -> ForgePush:
        ordered = _oldest_first(commits, after)
        return cls(
            ref=ref,
            before=before,
            after=after,
            commits=[
                PushedCommit(
                    sha=c.id,
                    message=c.message,
                    author_name=c.author.name,
                    author_email=c.author.email,
                    committed_at=c.timestamp,
                )
                for c in ordered
            ],
        )


def _oldest_first(commits: list[ForgeCommit], after: str) -> list[ForgeCommit]:
    # Both forges document oldest-first, but GitLab has shipped newest-first payloads; the pushed
    # head (`after`) is the newest commit, so it tells which way round the list is.
    if len(commits) > 1 and commits[0].id == after and commits[-1].id != after:
        return list(reversed(commits))
    return list(commits)


class WebhookAccepted(BaseModel):
    status: Literal["scheduled", "ignored", "duplicate", "pong"]
    detail: str = ""
    commits: int = 0  # a push: the commits its payload listed
    # A recorded push: false until the server's mirror of the repository is fetched (a task after the
    # answer; only the commits the payload listed are recorded until then). None: not a push.
    complete: bool | None = None
