"""Measurements: one sample per repetition (raw counts kept), and per run x metric x backend one
row holding the values of every repetition in repetition order."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Double, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from .base import Base, BigId, IdMixin


class Sample(IdMixin, Base):
    __tablename__ = "samples"
    __table_args__ = (UniqueConstraint("run_id", "rep"),)

    run_id: Mapped[int] = mapped_column(BigId, ForeignKey("runs.id", ondelete="CASCADE"))
    rep: Mapped[int] = mapped_column(Integer)
    # Raw counts as measured (None = not supported), so a corrected formula can be re-applied.
    raw: Mapped[dict[str, Any]] = mapped_column(default=dict)
    running_pct: Mapped[dict[str, Any]] = mapped_column(default=dict)


class _FloatArray(TypeDecorator[list[float | None]]):
    """double precision[], read as psycopg returns it (a list of float or None): SQLAlchemy's
    ARRAY would pass over every element again with no conversion to make (~11 us a row, and
    detection reads ~9 000 rows for 50 uploads). A decorator, because the psycopg dialect adapts
    any ARRAY subclass to its own and an override of the subclass would be lost."""

    impl = postgresql.ARRAY(Double())
    cache_ok = True

    def result_processor(self, dialect: Any, coltype: object) -> None:
        return None


# PostgreSQL: double precision[]; SQLite: a JSON list (json.dumps writes floats exactly).
RepValues = _FloatArray().with_variant(JSON(), "sqlite")


class MetricValue(Base):
    """The values of one metric from one backend in one run: ``rep_values[i]`` belongs to the
    run's i-th sample in repetition order (its i-th smallest ``rep``), None where that sample
    has no value for the metric (not measured, or dropped as impossible). A row has at least one
    value and as many elements as the run has samples.

    The commit, machine and config are copies of the run's job's (so a series is one range scan
    of the series index), written from the job row by the statement that stores a result; the
    run's foreign key carries every delete."""

    __tablename__ = "metric_values"
    __table_args__ = (
        Index("ix_metric_values_series", "machine_id", "config_id", "metric", "backend", "commit_id"),
    )

    run_id: Mapped[int] = mapped_column(BigId, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    metric: Mapped[str] = mapped_column(String(64), primary_key=True)
    backend: Mapped[str] = mapped_column(String(8), primary_key=True)
    commit_id: Mapped[int] = mapped_column(BigId)
    machine_id: Mapped[int] = mapped_column(BigId)
    config_id: Mapped[int] = mapped_column(BigId)
    rep_values: Mapped[list[float | None]] = mapped_column(RepValues)

