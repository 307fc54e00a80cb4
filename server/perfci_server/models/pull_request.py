"""Pull requests (merge requests on some forges): the head measured against its merge-base before merge.

One row per (repository, number). Each new head supersedes the previous one: its jobs (the head
and the merge-base as interleaved partners, per machine x config, ``jobs.pull_request_id``) are
queued, the old head's queued jobs are dropped, and the one comment on the forge (``comment_id``)
is edited in place with the new table. The comment is written to ``comment_body`` with a new
``comment_version`` in the transaction that decides it; a task posts it after commit (as commit
statuses are), so a forge outage delays the comment but never loses it.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from sqlalchemy import CheckConstraint, ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from .base import Base, BigId, CreatedAtMixin, IdMixin, utcnow


class PullState(str, Enum):
    OPEN = "open"
    # Closed or merged: its queued jobs are dropped, what was still pending ends ("closed before it
    # was measured"), the comment says so.
    CLOSED = "closed"
    MERGED = "merged"


# A comment written (version 1 and up) and not yet posted in that version.
COMMENT_UNSENT = "comment_version > 0 AND comment_version <> coalesce(comment_sent_version, 0)"


class PullRequest(IdMixin, CreatedAtMixin, Base):
    __tablename__ = "pull_requests"
    __table_args__ = (
        UniqueConstraint("repository_id", "number"),
        CheckConstraint("state IN ('open', 'closed', 'merged')", name="state"),
        # /metrics: the comments that changed in the last hour, and those not sent yet, without reading every pull request.
        Index("ix_pull_requests_updated_at", "updated_at"),
        Index("ix_pull_requests_comment_unsent", "id", postgresql_where=text(COMMENT_UNSENT), sqlite_where=text(COMMENT_UNSENT)),
    )

    repository_id: Mapped[int] = mapped_column(BigId, ForeignKey("repositories.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(BigId)  # the number the forge shows (a merge request's iid)
    title: Mapped[str] = mapped_column(String(255), default="")
    state: Mapped[str] = mapped_column(String(16), default=PullState.OPEN.value)
    base_branch: Mapped[str] = mapped_column(String(255))
    head_branch: Mapped[str] = mapped_column(String(255))
    head_sha: Mapped[str] = mapped_column(String(40))
    # The merge-base of head and base, from the server's mirror; None until the mirror has the head.
    base_sha: Mapped[str | None] = mapped_column(String(40))
    head_commit_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("commits.id", ondelete="SET NULL"))
    base_commit_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("commits.id", ondelete="SET NULL"))
    # Why the head has no jobs yet (the mirror could not be fetched, ...); "" once it has them.
    waiting_for: Mapped[str] = mapped_column(Text, default="")
    # The one comment on the forge (an issue comment's or a note's id), edited in place.
    comment_id: Mapped[str | None] = mapped_column(String(64))
    comment_body: Mapped[str] = mapped_column(Text, default="")
    comment_version: Mapped[int] = mapped_column(Integer, default=0)
    comment_sent_version: Mapped[int | None] = mapped_column(Integer)
    comment_error: Mapped[str] = mapped_column(Text, default="")
    # The unguessable id of the pull request's read-only page (pages.router).
    public_id: Mapped[str] = mapped_column(String(32), unique=True)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
