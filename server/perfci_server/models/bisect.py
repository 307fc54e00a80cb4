"""Server-orchestrated bisections: one row per search over a commit range on one machine."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any

from sqlalchemy import CheckConstraint, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from .base import Base, BigId, CreatedAtMixin, IdMixin, JSONType, utcnow


class BisectStatus(str, Enum):
    RUNNING = "running"
    CULPRIT = "culprit"  # found and confirmed
    AMBIGUOUS = "ambiguous"  # only unbuildable commits separate parent and culprit
    UNCONFIRMED = "unconfirmed"
    NO_CHANGE = "no_change"
    INCONCLUSIVE = "inconclusive"
    FAILED = "failed"  # the search could not go on (e.g. the range's commits vanished)


BISECT_STATUSES = tuple(s.value for s in BisectStatus)


class Bisect(IdMixin, CreatedAtMixin, Base):
    __tablename__ = "bisects"
    __table_args__ = (
        CheckConstraint("status IN (" + ", ".join(f"'{s}'" for s in BISECT_STATUSES) + ")", name="status"),
        # The ingest hook looks up running bisects of the machine x config a result belongs to.
        Index("ix_bisects_status_machine_id_config_id", "status", "machine_id", "config_id"),
    )

    repository_id: Mapped[int] = mapped_column(BigId, ForeignKey("repositories.id", ondelete="CASCADE"))
    branch_id: Mapped[int] = mapped_column(BigId, ForeignKey("branches.id", ondelete="CASCADE"))
    machine_id: Mapped[int] = mapped_column(BigId, ForeignKey("machines.id", ondelete="CASCADE"))
    config_id: Mapped[int] = mapped_column(BigId, ForeignKey("bench_configs.id", ondelete="CASCADE"))
    metric: Mapped[str] = mapped_column(String(64))
    backend: Mapped[str] = mapped_column(String(8))
    good_commit_id: Mapped[int] = mapped_column(BigId, ForeignKey("commits.id", ondelete="CASCADE"))
    bad_commit_id: Mapped[int] = mapped_column(BigId, ForeignKey("commits.id", ondelete="CASCADE"))
    # The range in branch order, good first: the search's indices are positions in this list.
    commit_ids: Mapped[list[int]] = mapped_column(JSONType, default=list)
    alert_group_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("alert_groups.id", ondelete="SET NULL"), index=True)
    status: Mapped[str] = mapped_column(String(16), default=BisectStatus.RUNNING.value)
    message: Mapped[str] = mapped_column(Text, default="")
    # analysis.bisect.State as JSON: the search resumes from it each time a result arrives.
    state: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # Indices of the commits this bisect scheduled jobs for (the rest were measured already).
    scheduled: Mapped[list[int]] = mapped_column(JSONType, default=list)
    # The outcome (comparisons, skipped commits, notes) once the search ends.
    result: Mapped[dict[str, Any]] = mapped_column(default=dict)
    parent_commit_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("commits.id", ondelete="SET NULL"))
    culprit_commit_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("commits.id", ondelete="SET NULL"))
    repetitions: Mapped[int] = mapped_column(Integer, default=0)
    finished_at: Mapped[datetime | None]
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
