"""SQL for samples and metric values: bulk ingest and the series/compare reads."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, select, text
from sqlalchemy.orm import Session

from .. import db
from ..models import BranchCommit, Commit, MetricValue, Sample


# PostgreSQL: the samples and their metric values in one statement and one round trip, each set
# passed as one JSON array (json_to_recordset) so the statement text never changes and psycopg
# prepares it once per connection. A result is ~100 values: a multi-row VALUES statement would be
# compiled afresh for every upload (~11 ms of CPU for 95 rows), and array parameters cost more to
# adapt than one json.dumps. Floats survive exactly: json.dumps writes the shortest text that reads
# back as the same double, and PostgreSQL's float8 input is correctly rounded. The nested raw and
# running_pct objects are stored as the JSON text json.dumps wrote, as the JSON column type would.
_INSERT_SAMPLES_POSTGRESQL = text("""
WITH sample AS (
    INSERT INTO samples (run_id, rep, raw, running_pct)
    SELECT :run_id, s.rep, s.raw, s.running_pct
    FROM json_to_recordset(CAST(:samples AS json)) AS s(rep integer, raw json, running_pct json)
    RETURNING id, rep
)
INSERT INTO metric_values (sample_id, run_id, commit_id, machine_id, config_id, rep, metric, backend, value)
SELECT sample.id, :run_id, :commit_id, :machine_id, :config_id, v.rep, v.metric, v.backend, v.value
FROM json_to_recordset(CAST(:metric_values AS json)) AS v(rep integer, metric text, backend text, value float8)
JOIN sample ON sample.rep = v.rep""")


def insert_samples(
    session: Session, key: dict[str, int], samples: list[dict[str, Any]], values: list[dict[str, Any]]
) -> None:
    """Store a run's samples and their metric values.

    ``key``: run_id, commit_id, machine_id, config_id (denormalised onto every value);
    ``samples``: dicts of rep, raw, running_pct; ``values``: dicts of rep (naming the sample),
    metric, backend, value.
    """
    if not samples:
        return
    if db.is_postgresql(session):
        session.execute(_INSERT_SAMPLES_POSTGRESQL, {**key, "samples": json.dumps(samples), "metric_values": json.dumps(values)})
        return
    samples_table, values_table = Sample.__table__, MetricValue.__table__
    statement = samples_table.insert().returning(samples_table.c.id, samples_table.c.rep)
    sample_ids = {rep: sample_id for sample_id, rep in session.execute(statement, [{**s, "run_id": key["run_id"]} for s in samples])}
    if values:
        session.execute(values_table.insert(), [{**key, **v, "sample_id": sample_ids[v["rep"]]} for v in values])


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
