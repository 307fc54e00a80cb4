"""Measurements: one sample per repetition (raw counts kept), one row per sample x metric x backend."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Double, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from .base import Base, BigId, IdMixin


class Sample(IdMixin, Base):
    __tablename__ = "samples"
    __table_args__ = (UniqueConstraint("run_id", "rep"),)

    run_id: Mapped[int] = mapped_column(BigId, ForeignKey("runs.id", ondelete="CASCADE"))
    rep: Mapped[int] = mapped_column(Integer)
    # Raw counts as measured (None = not supported), so a corrected formula can be re-applied.
    raw: Mapped[dict[str, Any]] = mapped_column(default=dict)
    running_pct: Mapped[dict[str, Any]] = mapped_column(default=dict)


class MetricValue(Base):
    """One value, identified by its sample, metric and backend. The run, commit, machine and
    config are copies of the sample's (so a series is one index range scan), written from the job
    row by the statement that stores a result; the sample's foreign key carries every delete."""

    __tablename__ = "metric_values"
    __table_args__ = (
        Index("ix_metric_values_series", "machine_id", "config_id", "metric", "backend", "commit_id"),
        Index("ix_metric_values_run_id", "run_id"),
    )

    sample_id: Mapped[int] = mapped_column(BigId, ForeignKey("samples.id", ondelete="CASCADE"), primary_key=True)
    metric: Mapped[str] = mapped_column(String(64), primary_key=True)
    backend: Mapped[str] = mapped_column(String(8), primary_key=True)
    run_id: Mapped[int] = mapped_column(BigId)
    commit_id: Mapped[int] = mapped_column(BigId)
    machine_id: Mapped[int] = mapped_column(BigId)
    config_id: Mapped[int] = mapped_column(BigId)
    rep: Mapped[int] = mapped_column(Integer)
    value: Mapped[float] = mapped_column(Double)
