"""SQL for samples and metric values: bulk ingest and the series/compare reads."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, select, text
from sqlalchemy.orm import Session

from .. import db
from ..models import BranchCommit, Commit, MetricValue, Sample


# PostgreSQL: the samples and their metric values in one statement (column arrays, unnested),
# one round trip and a statement text that never changes, so psycopg prepares it once per
# connection. A result is ~100 values: a multi-row VALUES statement would be compiled afresh for
# every upload (~11 ms of CPU for 95 rows).
_INSERT_SAMPLES_POSTGRESQL = text("""
WITH sample AS (
    INSERT INTO samples (run_id, rep, raw, running_pct)
    SELECT :run_id, s.rep, s.raw, s.running_pct
    FROM unnest(CAST(:reps AS integer[]), CAST(:raws AS json[]), CAST(:running_pcts AS json[])) AS s(rep, raw, running_pct)
    RETURNING id, rep
)
INSERT INTO metric_values (sample_id, run_id, commit_id, machine_id, config_id, rep, metric, backend, value)
SELECT sample.id, :run_id, :commit_id, :machine_id, :config_id, v.rep, v.metric, v.backend, v.value
FROM unnest(CAST(:value_reps AS integer[]), CAST(:metrics AS text[]), CAST(:backends AS text[]), CAST(:values AS float8[]))
     AS v(rep, metric, backend, value)
JOIN sample ON sample.rep = v.rep""")


def insert_samples(
    session: Session, key: dict[str, int], samples: list[dict[str, Any]], values: list[tuple[int, str, str, float]]
) -> None:
    """Store a run's samples and their metric values.

    ``key``: run_id, commit_id, machine_id, config_id (denormalised onto every value);
    ``samples``: rep, raw, running_pct; ``values``: (rep, metric, backend, value), rep naming its sample.
    """
    if not samples:
        return
    if db.is_postgresql(session):
        reps, metrics, backends, numbers = zip(*values) if values else ((), (), (), ())
        params = {
            **key,
            "reps": [s["rep"] for s in samples],
            "raws": [json.dumps(s["raw"]) for s in samples],  # the JSON column's own serialiser
            "running_pcts": [json.dumps(s["running_pct"]) for s in samples],
            "value_reps": list(reps), "metrics": list(metrics), "backends": list(backends), "values": list(numbers),
        }
        session.execute(_INSERT_SAMPLES_POSTGRESQL, params)
        return
    samples_table, values_table = Sample.__table__, MetricValue.__table__
    statement = samples_table.insert().returning(samples_table.c.id, samples_table.c.rep)
    sample_ids = {rep: sample_id for sample_id, rep in session.execute(statement, [{**s, "run_id": key["run_id"]} for s in samples])}
    if values:
        rows = [{**key, "sample_id": sample_ids[rep], "rep": rep, "metric": m, "backend": b, "value": v} for rep, m, b, v in values]
        session.execute(values_table.insert(), rows)


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
