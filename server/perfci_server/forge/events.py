"""What a forge's delivery means, whatever the forge: a push, a pull (merge) request event, a ping,
or something perfci does not act on. Each forge's record (:mod:`.registry`) reads
its own payloads into these; the webhook room acts on them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

ZERO_SHA = "0" * 40


@dataclass(frozen=True)
class PushedCommit:
    sha: str
    message: str = ""
    author_name: str = ""
    author_email: str = ""
    committed_at: datetime | None = None


@dataclass(frozen=True)
class PushEvent:
    """A ref moved: its listed commits oldest first (forges list at most 20; git knows the rest)."""

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
                return self.ref[len(prefix):]
        return self.ref


@dataclass(frozen=True)
class PullEvent:
    """A pull (merge) request was opened or moved ("open": measure its head against its base), or
    closed ("close"; ``merged`` when it closed by merging)."""

    number: int
    action: Literal["open", "close"]
    title: str
    base_branch: str
    head_branch: str
    head_sha: str
    merged: bool = False


@dataclass(frozen=True)
class Ping:
    """The forge checks that the webhook answers."""


@dataclass(frozen=True)
class Ignored:
    """A delivery perfci records and does not act on, and why."""

    why: str


Event = PushEvent | PullEvent | Ping | Ignored


@dataclass(frozen=True)
class Parsed:
    """A delivery's event, and the forge's word on the repository's default branch when it gave one."""

    event: Event
    default_branch: str | None = None
    ref: str | None = field(default=None)  # the ref it concerns, for the delivery's record


def oldest_first(commits: list[PushedCommit], after: str) -> list[PushedCommit]:
    """Forges document oldest-first, but some have shipped newest-first payloads; the pushed head
    (``after``) is the newest commit, so it tells which way round the list is."""
    if len(commits) > 1 and commits[0].sha == after and commits[-1].sha != after:
        return list(reversed(commits))
    return list(commits)
