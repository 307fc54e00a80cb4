"""Alerts: one group per suspected commit range (last good .. first bad) and machine, one row per
metric that moved there. Detection re-runs update these rows in place (unique keys), never add
duplicates; triage state lives on the group."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any

from sqlalchemy import CheckConstraint, Double, ForeignKey, Index, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from .base import Base, BigId, CreatedAtMixin, IdMixin, JSONType, utcnow


class AlertStatus(str, Enum):
    UNTRIAGED = "untriaged"
    ACKNOWLEDGED = "acknowledged"
    INVALID = "invalid"
    FIXED = "fixed"


class AlertDirection(str, Enum):
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"


class AlertGroup(IdMixin, CreatedAtMixin, Base):
    __tablename__ = "alert_groups"
    __table_args__ = (
        UniqueConstraint("branch_id", "machine_id", "first_bad_commit_id"),
        CheckConstraint("status IN ('untriaged', 'acknowledged', 'invalid', 'fixed')", name="status"),
        CheckConstraint("direction IN ('regression', 'improvement')", name="direction"),
        Index("ix_alert_groups_status_id", "status", "id"),
    )

    repository_id: Mapped[int] = mapped_column(BigId, ForeignKey("repositories.id", ondelete="CASCADE"))
    branch_id: Mapped[int] = mapped_column(BigId, ForeignKey("branches.id", ondelete="CASCADE"))
    machine_id: Mapped[int] = mapped_column(BigId, ForeignKey("machines.id", ondelete="CASCADE"), index=True)
    # The suspected range: the change happened after last_good and at or before first_bad.
    # last_good is None when the change is at the first measured commit of the branch.
    last_good_commit_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("commits.id", ondelete="CASCADE"))
    first_bad_commit_id: Mapped[int] = mapped_column(BigId, ForeignKey("commits.id", ondelete="CASCADE"), index=True)
    # "regression" when any of its metrics got worse, else "improvement".
    direction: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default=AlertStatus.UNTRIAGED.value)
    triage_note: Mapped[str] = mapped_column(Text, default="")
    triaged_by: Mapped[str] = mapped_column(String(128), default="")
    triaged_at: Mapped[datetime | None]
    # Whose change it is (alerts.origins). A change belongs to the first commit that carries it:
    # set, the group is a later sighting — its first bad commit merged the change in (origin: the
    # merged-in parent) or copies it (a cherry-pick or rebase: the original commit) — linked to the
    # origin's own group when it has one; it neither fails a status nor counts as a new alert.
    origin_commit_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("commits.id", ondelete="SET NULL"))
    origin_group_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("alert_groups.id", ondelete="SET NULL"))
    # A merged-in parent being measured: until it is, whose change this is cannot be told (pending).
    awaiting_commit_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("commits.id", ondelete="SET NULL"))
    # The lean-model explanation: structured (JSON) and as one readable sentence.
    explanation: Mapped[dict[str, Any]] = mapped_column(default=dict)
    summary: Mapped[str] = mapped_column(Text, default="")
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class Alert(IdMixin, CreatedAtMixin, Base):
    """One metric of one config that moved in its group's range."""

    __tablename__ = "alerts"
    __table_args__ = (
        UniqueConstraint("group_id", "config_id", "metric", "backend"),
        CheckConstraint("direction IN ('regression', 'improvement')", name="direction"),
    )

    group_id: Mapped[int] = mapped_column(BigId, ForeignKey("alert_groups.id", ondelete="CASCADE"), index=True)
    config_id: Mapped[int] = mapped_column(BigId, ForeignKey("bench_configs.id", ondelete="CASCADE"))
    metric: Mapped[str] = mapped_column(String(64))
    backend: Mapped[str] = mapped_column(String(8))
    direction: Mapped[str] = mapped_column(String(16))
    # This metric's own range (it may be narrower than the group's).
    last_good_commit_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("commits.id", ondelete="CASCADE"))
    first_bad_commit_id: Mapped[int] = mapped_column(BigId, ForeignKey("commits.id", ondelete="CASCADE"))
    before_median: Mapped[float] = mapped_column(Double)
    after_median: Mapped[float] = mapped_column(Double)
    change_pct: Mapped[float] = mapped_column(Double)
    # 1 - p for statistical verdicts; 1.0 for the exact rule on deterministic (sim) metrics.
    confidence: Mapped[float] = mapped_column(Double)
    p_value: Mapped[float | None] = mapped_column(Double)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class DetectionWindow(Base):
    """The measured window detection last analysed for one branch x machine x config (every
    repetition of every metric at its last ``detection_window_commits`` measured commits): a cache
    that lets the next detection read only the new points. Written in the transaction that marks
    the runs detected, so it is never ahead of ``runs.detected_at``; a missing, stale (other
    detector settings) or inconsistent one is rebuilt from the tables (alerts.window)."""

    __tablename__ = "detection_windows"

    branch_id: Mapped[int] = mapped_column(BigId, ForeignKey("branches.id", ondelete="CASCADE"), primary_key=True)
    machine_id: Mapped[int] = mapped_column(BigId, ForeignKey("machines.id", ondelete="CASCADE"), primary_key=True)
    config_id: Mapped[int] = mapped_column(BigId, ForeignKey("bench_configs.id", ondelete="CASCADE"), primary_key=True)
    version: Mapped[str] = mapped_column(String(64))
    data: Mapped[bytes] = mapped_column(LargeBinary)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class SuspectState(str, Enum):
    PENDING = "pending"  # confirmation rounds are queued, running, or about to be asked
    EXHAUSTED = "exhausted"  # undecided, and the series' budget or the rounds per commit are spent
    CONFIRMED = "confirmed"  # detection now reports the change (an alert carries it)
    REJECTED = "rejected"  # the extra repetitions took the evidence away


class Suspect(IdMixin, CreatedAtMixin, Base):
    """A change detection finds likely but cannot decide yet (analysis.detect.Suspect): extra
    repetitions of its commits are scheduled (alerts.confirm) and detection decides again. Not an
    alert: the API, the dashboards and the CI gate show it as pending."""

    __tablename__ = "suspects"
    __table_args__ = (
        UniqueConstraint("branch_id", "machine_id", "config_id", "metric", "backend", "suspect_commit_id",
                         name="uq_suspects_series_commit"),
        CheckConstraint("state IN ('pending', 'exhausted', 'confirmed', 'rejected')", name="state"),
        CheckConstraint("why IN ('unconfirmed', 'unpinned')", name="why"),
        Index("ix_suspects_state_id", "state", "id"),
    )

    branch_id: Mapped[int] = mapped_column(BigId, ForeignKey("branches.id", ondelete="CASCADE"))
    machine_id: Mapped[int] = mapped_column(BigId, ForeignKey("machines.id", ondelete="CASCADE"), index=True)
    config_id: Mapped[int] = mapped_column(BigId, ForeignKey("bench_configs.id", ondelete="CASCADE"))
    metric: Mapped[str] = mapped_column(String(64))
    backend: Mapped[str] = mapped_column(String(8))
    suspect_commit_id: Mapped[int] = mapped_column(BigId, ForeignKey("commits.id", ondelete="CASCADE"), index=True)
    # The commits whose extra repetitions decide it (commit ids, series order).
    commit_ids: Mapped[list[int]] = mapped_column(JSONType, default=list)
    why: Mapped[str] = mapped_column(String(16))  # unconfirmed / unpinned
    direction: Mapped[str] = mapped_column(String(16))  # regression / improvement / change
    change_pct: Mapped[float] = mapped_column(Double)
    p_value: Mapped[float] = mapped_column(Double)
    state: Mapped[str] = mapped_column(String(16), default=SuspectState.PENDING.value)
    reason: Mapped[str] = mapped_column(Text, default="")  # what the last detection said about it
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class Creep(IdMixin, CreatedAtMixin, Base):
    """A level that moved gradually from ``first_commit`` to ``last_commit`` with no single commit
    to blame (analysis.detect.Creep: a host aging, a cache filling, many small commits). Kept apart
    from alerts and from the commits' verdicts: no status fails for it. Each detection of a series
    replaces the creeps it sees in its window; ``created_at`` is when one was first seen."""

    __tablename__ = "creeps"
    __table_args__ = (
        CheckConstraint("direction IN ('regression', 'improvement', 'change')", name="direction"),
        Index("ix_creeps_series", "branch_id", "machine_id", "config_id"),
    )

    branch_id: Mapped[int] = mapped_column(BigId, ForeignKey("branches.id", ondelete="CASCADE"))
    machine_id: Mapped[int] = mapped_column(BigId, ForeignKey("machines.id", ondelete="CASCADE"), index=True)
    config_id: Mapped[int] = mapped_column(BigId, ForeignKey("bench_configs.id", ondelete="CASCADE"))
    metric: Mapped[str] = mapped_column(String(64))
    backend: Mapped[str] = mapped_column(String(8))
    first_commit_id: Mapped[int] = mapped_column(BigId, ForeignKey("commits.id", ondelete="CASCADE"))
    last_commit_id: Mapped[int] = mapped_column(BigId, ForeignKey("commits.id", ondelete="CASCADE"))
    direction: Mapped[str] = mapped_column(String(16))  # regression / improvement / change
    change_pct: Mapped[float] = mapped_column(Double)  # the whole move from first to last
    p_value: Mapped[float] = mapped_column(Double)  # the trend test over its commits
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
