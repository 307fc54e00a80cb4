"""Commit verdicts per machine, and their delivery to the forge as a commit status.

One row per commit x machine x subject: the commit on its branch's series (``series``), or a pull
request's head against its base (``pull``, one row per base branch, so two pull requests that share a
head keep their own verdicts, contexts and pages). The deciding room writes the verdict in the same
transaction as what it decided from, so it survives any forge outage; the delivery columns say
whether the forge has it yet. ``version`` grows with every verdict change;
a delivery records the version it posted, so a late retry of an old verdict cannot mark a newer
one as sent.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from sqlalchemy import CheckConstraint, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from .base import Base, BigId, CreatedAtMixin, IdMixin, utcnow


class CommitState(str, Enum):
    SUCCESS = "success"
    FAILURE = "failure"
    # A suspected change names the commit and its confirmation rounds decide; or the commit's
    # baseline (the commit before it on its series, a pull request's merge-base) is being measured.
    PENDING = "pending"
    # No verdict can be given (no baseline measured, one side failed to build): never "success"
    # by absence. Forges without a neutral status state get their nearest (forge.client).
    NEUTRAL = "neutral"


class StatusScope(str, Enum):
    """What a verdict judges: the commit on its branch's series (detection), or a pull request's
    head against its merge-base (measured interleaved, pulls.service). Each has its own context."""

    SERIES = "series"
    PULL = "pull"


class Delivery(str, Enum):
    PENDING = "pending"  # to be posted (again): a task is queued or the resend sweep will pick it up
    SENT = "sent"  # the forge accepted ``sent_version``
    FAILED = "failed"  # the forge refused it (4xx: bad token, unknown project); see last_error
    DISABLED = "disabled"  # no token configured for this forge: verdict kept, nothing to post


class CommitStatus(IdMixin, CreatedAtMixin, Base):
    __tablename__ = "commit_statuses"
    __table_args__ = (
        UniqueConstraint("commit_id", "machine_id", "scope", "base_branch"),
        CheckConstraint("state IN ('success', 'failure', 'pending', 'neutral')", name="state"),
        CheckConstraint("scope IN ('series', 'pull')", name="scope"),
        CheckConstraint("delivery IN ('pending', 'sent', 'failed', 'disabled')", name="delivery"),
        # The resend sweep: pending deliveries, oldest first.
        Index("ix_commit_statuses_delivery_updated_at", "delivery", "updated_at"),
    )

    repository_id: Mapped[int] = mapped_column(BigId, ForeignKey("repositories.id", ondelete="CASCADE"))
    commit_id: Mapped[int] = mapped_column(BigId, ForeignKey("commits.id", ondelete="CASCADE"))
    machine_id: Mapped[int] = mapped_column(BigId, ForeignKey("machines.id", ondelete="CASCADE"), index=True)
    scope: Mapped[str] = mapped_column(String(16), default=StatusScope.SERIES.value, server_default="series")
    # A pull request's verdict: the base branch it is judged against ("" on the series) and the
    # pull request (its page shows that one's comment).
    base_branch: Mapped[str] = mapped_column(String(255), default="", server_default="")
    pull_request_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("pull_requests.id", ondelete="SET NULL"))
    # The unguessable id of the verdict's read-only page (pages.router): the link a forge shows.
    public_id: Mapped[str] = mapped_column(String(32), unique=True)
    state: Mapped[str] = mapped_column(String(16))
    context: Mapped[str] = mapped_column(String(255))
    description: Mapped[str] = mapped_column(String(255), default="")
    target_url: Mapped[str | None] = mapped_column(String(1024))
    version: Mapped[int] = mapped_column(Integer, default=1)
    delivery: Mapped[str] = mapped_column(String(16), default=Delivery.PENDING.value)
    sent_version: Mapped[int | None] = mapped_column(Integer)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str] = mapped_column(Text, default="")
    sent_at: Mapped[datetime | None]
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
