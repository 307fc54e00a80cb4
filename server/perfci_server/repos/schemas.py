from __future__ import annotations

from datetime import datetime

import re
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..forge.registry import Forge
from ..settings import get_settings

# git's scp-like syntax: [user@]host:path, no slash before the colon (git reads that as a path).
_SCP_LIKE = re.compile(r"^(?:[A-Za-z0-9._~-]+@)?[A-Za-z0-9.-]+:")
# https://<token>@host/...: a token in the user part (GitHub and GitLab accept one there).
_TOKEN_AS_USER = re.compile(r"^https?://[^/@:]{20,}@")


class RepositoryCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=255, description="The repository as its forge's webhooks name it (owner/name)")
    forge: Forge
    clone_url: str = Field(min_length=1, max_length=1024, description="http(s), ssh or scp-like (git@host:path); "
                           "file:// and local paths only with PERFCI_ALLOW_LOCAL_CLONE_URLS")
    webhook_secret: str | None = Field(None, min_length=16, max_length=255, description="Generated when omitted")
    track_tags: bool = False
    default_branch: str = Field("main", min_length=1, max_length=255,
                                description="The base other branches are judged against (deliveries keep it up to date)")

    @field_validator("clone_url")
    @classmethod
    def _remote_unless_allowed(cls, url: str) -> str:
        kind = clone_url_kind(url)
        if kind == "local" and not get_settings().allow_local_clone_urls:
            raise ValueError("a file:// or local clone URL would mirror a repository on the server's own disk; "
                             "set PERFCI_ALLOW_LOCAL_CLONE_URLS=true to allow it (the demo and tests do)")
        if kind is None:
            raise ValueError("not a clone URL git fetches over the network: use https://, http://, ssh:// or user@host:path")
        if kind == "remote" and _carries_credentials(url):
            raise ValueError("a clone URL carries no credentials (every API token holder could read them back): the "
                             "server fetches with the forge's token setting (PERFCI_<FORGE>_TOKEN) or the deploy key of "
                             "PERFCI_MIRROR_SSH_KEY_FILE")
        return url


def _carries_credentials(url: str) -> bool:
    """A password in the URL, or a token as its user name (https://<token>@host/...)."""
    return ("://" in url and urlsplit(url).password is not None) or _TOKEN_AS_USER.match(url) is not None


def clone_url_kind(url: str) -> str | None:
    """"remote" (http(s), ssh, scp-like), "local" (file://, a path) or None (another transport:
    git://, ext::, a remote helper, or something that is no URL)."""
    if any(c.isspace() or ord(c) < 32 for c in url) or url.startswith("-") or "::" in url:
        return None
    if "://" in url:
        parts = urlsplit(url)
        if parts.scheme == "file":
            return "local"
        return "remote" if parts.scheme in ("https", "http", "ssh") and parts.hostname else None
    if _SCP_LIKE.match(url):
        return "remote"
    return "local"


class RepositoryRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    forge: Forge
    clone_url: str
    track_tags: bool
    default_branch: str
    created_at: datetime


class RepositoryCreated(RepositoryRead):
    webhook_secret: str = Field(description="Shown once: configure it as the forge's webhook secret")


class BranchRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    head_sha: str | None
    base_branch_id: int | None = Field(None, description="The branch whose history this one starts with")
    fork_position: int | None = Field(None, description="Its last inherited position (the merge-base); its own commits follow")


class CommitRead(BaseModel):
    sha: str
    position: int | None = Field(None, description="Order on the requested branch")
    parents: list[str]
    author_name: str
    author_email: str
    committed_at: datetime | None
    message: str


class PushRead(BaseModel):
    """A push to a branch; ``complete`` false while only the payload's commits are recorded."""

    id: int
    branch: str
    before: str | None = Field(description="The branch's previous head; null for a new branch")
    after: str
    listed_commits: int = Field(description="Commits the forge's payload listed (forges list at most 20)")
    recorded_commits: int = Field(description="Commits of the push recorded on the branch")
    complete: bool = Field(description="Every first-parent commit of before..after is recorded, with git's parents")
    fetch_attempts: int
    last_error: str | None = Field(description="Why the repository could not be fetched (incomplete pushes)")
    created_at: datetime
    completed_at: datetime | None
