"""metric_values: one row per run x metric x backend, the repetitions' values as one array

An upload wrote one row per sample x metric x backend (~230 for 5 repetitions), each with its
primary key and two secondary index entries: most of the statement's time. The row becomes the
run's (run, metric, backend), with the values of its repetitions in repetition order as one
array (~46 rows per upload): `rep_values` is double precision[] on PostgreSQL and a JSON list on
SQLite. Element i belongs to the run's i-th sample in rep order; a sample that has no value for
the metric (not measured, or dropped as impossible) keeps its place as a NULL, so the array has
as many elements as the run has samples. A row has at least one value (as before, no value, no
row). The primary key starts with run_id, so it serves what ix_metric_values_run_id did, which
goes; run_id gets a foreign key to runs (ON DELETE CASCADE), which carries the deletes that the
sample's foreign key carried. The series index and the copies of commit/machine/config stay.

Existing values move with their positions: each (run, metric, backend) is aggregated over all of
the run's samples in rep order, a missing value giving NULL (PostgreSQL: array_agg; SQLite: in
Python with json.dumps, because SQLite's JSON functions print doubles with 15 digits only).

The three views that read metric_values are replaced (CREATE OR REPLACE: same columns, so the
views built on them, their owner and the dashboard role's grants stay as they are), reading the
values with unnest. The new table, like the old one, is not granted to the dashboard role.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-25 23:50:00
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
REP_VALUES = sa.ARRAY(sa.Double()).with_variant(sa.JSON(), "sqlite")
SERIES = ["machine_id", "config_id", "metric", "backend", "commit_id"]

# PostgreSQL: the values of one metric_values row, one per repetition that has one.
VIEWS: dict[str, str] = {
    "dash_commit_stats": """
        SELECT mv.commit_id, mv.machine_id, mv.config_id, mv.metric, mv.backend,
               count(*) AS reps, min(v.value) AS min,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY v.value) AS median,
               max(v.value) AS max
        FROM metric_values mv
        CROSS JOIN LATERAL unnest(mv.rep_values) AS v(value)
        WHERE v.value IS NOT NULL
        GROUP BY mv.commit_id, mv.machine_id, mv.config_id, mv.metric, mv.backend
    """,
    "dash_recent_points": """
        SELECT b.id AS branch_id, recent.position, recent.commit_id, recent.plot_time,
               mv.machine_id, mv.config_id, mv.metric, mv.backend,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY v.value) AS median
        FROM branches b
        CROSS JOIN LATERAL (  -- LIMIT, not row_number(): the planner then knows it is 50 rows
            SELECT bc.position, bc.commit_id,
                   max(coalesce(c.committed_at, c.created_at)) OVER (ORDER BY bc.position ROWS UNBOUNDED PRECEDING)
                   + bc.position * interval '1 millisecond' AS plot_time
            FROM branch_commits bc JOIN commits c ON c.id = bc.commit_id
            WHERE bc.branch_id = b.id ORDER BY bc.position DESC LIMIT 50
        ) recent
        JOIN jobs j ON j.commit_id = recent.commit_id
        JOIN runs r ON r.job_id = j.id AND r.status = 'ok'
        JOIN metric_values mv ON mv.run_id = r.id
        CROSS JOIN LATERAL unnest(mv.rep_values) AS v(value)
        WHERE v.value IS NOT NULL
        GROUP BY b.id, recent.position, recent.commit_id, recent.plot_time, mv.machine_id, mv.config_id, mv.metric, mv.backend
    """,
    # A filter on machine and config is pushed into the DISTINCT (ix_metric_values_series).
    "dash_series_backends": "SELECT DISTINCT machine_id, config_id, backend FROM metric_values",
}

_TO_ARRAYS_POSTGRESQL = """
    INSERT INTO metric_values (run_id, metric, backend, commit_id, machine_id, config_id, rep_values)
    SELECT k.run_id, k.metric, k.backend, k.commit_id, k.machine_id, k.config_id, array_agg(old.value ORDER BY s.rep)
    FROM (SELECT DISTINCT run_id, metric, backend, commit_id, machine_id, config_id FROM metric_values_0015) k
    JOIN samples s ON s.run_id = k.run_id
    LEFT JOIN metric_values_0015 old ON old.sample_id = s.id AND old.metric = k.metric AND old.backend = k.backend
    GROUP BY k.run_id, k.metric, k.backend, k.commit_id, k.machine_id, k.config_id
"""

_TO_ROWS_POSTGRESQL = """
    INSERT INTO metric_values (sample_id, run_id, commit_id, machine_id, config_id, rep, metric, backend, value)
    SELECT s.id, mv.run_id, mv.commit_id, mv.machine_id, mv.config_id, s.rep, mv.metric, mv.backend, v.value
    FROM metric_values_0016 mv
    CROSS JOIN LATERAL unnest(mv.rep_values) WITH ORDINALITY AS v(value, position)
    JOIN (SELECT id, run_id, rep, row_number() OVER (PARTITION BY run_id ORDER BY rep) AS position FROM samples) s
      ON s.run_id = mv.run_id AND s.position = v.position
    WHERE v.value IS NOT NULL
"""


def _revision(filename: str) -> ModuleType:
    """An earlier revision file as a module (revision files are not a package)."""
    path = Path(__file__).with_name(filename)
    spec = importlib.util.spec_from_file_location(f"perfci_migration_{filename[:4]}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _set_aside(old_name: str) -> None:
    """Rename metric_values out of the way of the table that replaces it (index and primary key
    names are the schema's, so they go too or are renamed; on PostgreSQL its views follow it)."""
    op.drop_index("ix_metric_values_series", table_name="metric_values")
    if old_name == "metric_values_0015":
        op.drop_index("ix_metric_values_run_id", table_name="metric_values")
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE metric_values RENAME CONSTRAINT pk_metric_values TO pk_{old_name}")
    op.rename_table("metric_values", old_name)


def _sqlite_batches(rows: Iterator[dict[str, Any]], size: int = 1000) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _sqlite_reps(connection: sa.Connection) -> dict[int, list[int]]:
    reps: dict[int, list[int]] = {}
    for run_id, rep in connection.execute(sa.text("SELECT run_id, rep FROM samples ORDER BY run_id, rep")):
        reps.setdefault(run_id, []).append(rep)
    return reps


def _sqlite_to_arrays(connection: sa.Connection) -> Iterator[dict[str, Any]]:
    reps = _sqlite_reps(connection)
    rows: dict[tuple[int, str, str], dict[str, Any]] = {}
    old = connection.execute(sa.text(
        "SELECT run_id, metric, backend, commit_id, machine_id, config_id, rep, value FROM metric_values_0015"))
    for run_id, metric, backend, commit_id, machine_id, config_id, rep, value in old:
        row = rows.get((run_id, metric, backend))
        if row is None:
            row = rows[(run_id, metric, backend)] = {
                "run_id": run_id, "metric": metric, "backend": backend, "commit_id": commit_id,
                "machine_id": machine_id, "config_id": config_id, "rep_values": [None] * len(reps[run_id])}
        row["rep_values"][reps[run_id].index(rep)] = value
    for row in rows.values():
        yield {**row, "rep_values": json.dumps(row["rep_values"])}


def _sqlite_to_rows(connection: sa.Connection) -> Iterator[dict[str, Any]]:
    samples: dict[int, list[tuple[int, int]]] = {}
    for sample_id, run_id, rep in connection.execute(sa.text("SELECT id, run_id, rep FROM samples ORDER BY run_id, rep")):
        samples.setdefault(run_id, []).append((sample_id, rep))
    arrays = connection.execute(sa.text(
        "SELECT run_id, metric, backend, commit_id, machine_id, config_id, rep_values FROM metric_values_0016"))
    for run_id, metric, backend, commit_id, machine_id, config_id, rep_values in arrays:
        for (sample_id, rep), value in zip(samples[run_id], json.loads(rep_values), strict=True):
            if value is not None:
                yield {"sample_id": sample_id, "run_id": run_id, "commit_id": commit_id, "machine_id": machine_id,
                       "config_id": config_id, "rep": rep, "metric": metric, "backend": backend, "value": value}


def upgrade() -> None:
    connection = op.get_bind()
    postgresql = connection.dialect.name == "postgresql"
    _set_aside("metric_values_0015")
    table = op.create_table(
        "metric_values",
        sa.Column("run_id", ID, nullable=False),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("backend", sa.String(8), nullable=False),
        sa.Column("commit_id", ID, nullable=False),
        sa.Column("machine_id", ID, nullable=False),
        sa.Column("config_id", ID, nullable=False),
        sa.Column("rep_values", REP_VALUES, nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_metric_values_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "metric", "backend", name=op.f("pk_metric_values")),
    )
    if postgresql:
        op.execute(_TO_ARRAYS_POSTGRESQL)
    else:
        plain = sa.table(table.name, *(sa.column(c.name) for c in table.columns))  # rep_values: JSON text as written
        for batch in _sqlite_batches(_sqlite_to_arrays(connection)):
            connection.execute(plain.insert(), batch)
    op.create_index("ix_metric_values_series", "metric_values", SERIES)
    if postgresql:
        for name, body in VIEWS.items():
            op.execute(f"CREATE OR REPLACE VIEW {name} AS {body}")
    op.drop_table("metric_values_0015")


def downgrade() -> None:
    connection = op.get_bind()
    postgresql = connection.dialect.name == "postgresql"
    _set_aside("metric_values_0016")
    table = op.create_table(
        "metric_values",
        sa.Column("sample_id", ID, nullable=False),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("commit_id", ID, nullable=False),
        sa.Column("machine_id", ID, nullable=False),
        sa.Column("config_id", ID, nullable=False),
        sa.Column("rep", sa.Integer(), nullable=False),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("backend", sa.String(8), nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["sample_id"], ["samples.id"], name=op.f("fk_metric_values_sample_id_samples"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("sample_id", "metric", "backend", name=op.f("pk_metric_values")),
    )
    if postgresql:
        op.execute(_TO_ROWS_POSTGRESQL)
    else:
        for batch in _sqlite_batches(_sqlite_to_rows(connection)):
            connection.execute(table.insert(), batch)
    op.create_index("ix_metric_values_series", "metric_values", SERIES)
    op.create_index("ix_metric_values_run_id", "metric_values", ["run_id"])
    if postgresql:
        old = {**_revision("0004_dashboard_views.py").VIEWS, **_revision("0008_dashboard_reader.py").VIEWS}
        for name in VIEWS:
            op.execute(f"CREATE OR REPLACE VIEW {name} AS {old[name]}")
    op.drop_table("metric_values_0016")
