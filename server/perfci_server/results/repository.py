"""SQL for samples and metric values: bulk ingest and the series/compare reads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from .. import db
from ..models import BranchCommit, Commit, MetricValue, Sample


def insert_samples(session: Session, rows: list[dict[str, Any]]) -> dict[int, int]:
    """Insert samples; returns rep -> sample id."""
    if not rows:
        return {}
    statement = Sample.__table__.insert().returning(Sample.__table__.c.id, Sample.__table__.c.rep)
    return {rep: sample_id for sample_id, rep in session.execute(statement, rows)}


def insert_metric_values(session: Session, rows: list[dict[str, Any]]) -> None:
    # A result is ~100 rows. A multi-row VALUES statement is compiled afresh for every upload
    # (~11 ms of CPU for 95 rows); COPY costs ~0.5 ms and one round trip. SQLite takes the cached
    # executemany.
    if not rows:
        return
    if db.is_postgresql(session):
        db.copy_rows(session, MetricValue.__table__, rows)
    else:
        session.execute(MetricValue.__table__.insert(), rows)


def series_positions(
    session: Session, branch_id: int, machine_id: int, config_id: int, metric: str, backend: str, after_position: int | None, limit: int
) -> list[int]:
    """Branch positions (ascending) that have values for this series: one page of commits."""
    statement = (
        select(BranchCommit.position)
        .join(MetricValue, MetricValue.commit_id == BranchCommit.commit_id)
        .where(
            BranchCommit.branch_id == branch_id,
            MetricValue.machine_id == machine_id,
            MetricValue.config_id == config_id,
            MetricValue.metric == metric,
            MetricValue.backend == backend,
        )
        .distinct()
        .order_by(BranchCommit.position)
        .limit(limit)
    )
    if after_position is not None:
        statement = statement.where(BranchCommit.position > after_position)
    return list(session.scalars(statement))


def series_values(
    session: Session, branch_id: int, machine_id: int, config_id: int, metric: str, backend: str, first: int, last: int
) -> Sequence[Row[Any]]:
    statement = (
        select(BranchCommit.position, Commit.sha, Commit.committed_at, MetricValue.run_id, MetricValue.rep, MetricValue.value)
        .join(BranchCommit, BranchCommit.commit_id == MetricValue.commit_id)
        .join(Commit, Commit.id == MetricValue.commit_id)
        .where(
            BranchCommit.branch_id == branch_id,
            BranchCommit.position.between(first, last),
            MetricValue.machine_id == machine_id,
            MetricValue.config_id == config_id,
            MetricValue.metric == metric,
            MetricValue.backend == backend,
        )
        .order_by(BranchCommit.position, MetricValue.rep)
    )
    return session.execute(statement).all()


def values_of_commit(session: Session, commit_id: int, machine_id: int, config_id: int) -> Sequence[Row[Any]]:
    """(metric, backend, value) of every sample of the commit's successful run on machine x config."""
    statement = (
        select(MetricValue.metric, MetricValue.backend, MetricValue.value)
        .where(MetricValue.commit_id == commit_id, MetricValue.machine_id == machine_id, MetricValue.config_id == config_id)
        .order_by(MetricValue.metric, MetricValue.backend, MetricValue.rep)
    )
    return session.execute(statement).all()
