"""SQL for results: an attempt's outcome stored in one go (run, job, samples, metric values) and
the series/compare reads."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import bindparam, select, text, update
from sqlalchemy.orm import Session

from .. import db
from ..models import BranchCommit, Commit, Job, MetricValue, Run, Sample
from ..models.base import UTCDateTime


_RESULT_COLUMNS = (
    "status", "reason", "log_tail", "backend", "backend_reason", "build_id", "tuning", "notes", "unavailable", "noisy",
    "reused_from", "started_at", "finished_at", "received_at", "document_sha256",
)
_JSON_COLUMNS = ("tuning", "notes", "unavailable", "noisy", "reused_from")
_TIMES = tuple(bindparam(name, type_=UTCDateTime()) for name in ("started_at", "finished_at", "received_at"))

# PostgreSQL: the whole outcome of an attempt in one statement and one round trip — the run's
# result columns, the job's new state, the samples and the metric values (one row per metric x
# backend, the repetitions' values as one float8[]). Each set of rows is passed as one JSON array
# (json_to_recordset, which also turns a JSON list into the float8[] column) so the statement text
# never changes and psycopg prepares it once per connection. A result is ~50 rows of ~5 values: a
# multi-row VALUES statement would be compiled afresh for every upload (~11 ms of CPU for 95 rows),
# and array parameters cost more to adapt than one json.dumps. Floats survive exactly: json.dumps
# writes the shortest text that reads back as the same double, and PostgreSQL's float8 input is
# correctly rounded. The nested raw and running_pct objects are stored as the JSON text json.dumps
# wrote, as the JSON column type would.
# Data-modifying CTEs all run whether or not they are referenced, in one snapshot: if any part
# fails (a second ok run of the job hits the one-ok-run index), none of it is written.
_STORE_RESULT_POSTGRESQL = text(f"""
WITH run AS (
    UPDATE runs SET {", ".join(f"{c} = :{c}" for c in _RESULT_COLUMNS if c not in _JSON_COLUMNS)}, {", ".join(f"{c} = CAST(:{c} AS json)" for c in _JSON_COLUMNS)}
    WHERE id = :run_id
),
job AS (
    UPDATE jobs SET state = :state, agent_id = :agent_id, lease_expires_at = NULL, updated_at = :received_at
    WHERE id = :job_id
),
sample AS (
    INSERT INTO samples (run_id, rep, raw, running_pct)
    SELECT :run_id, s.rep, s.raw, s.running_pct
    FROM json_to_recordset(CAST(:samples AS json)) AS s(rep integer, raw json, running_pct json)
)
INSERT INTO metric_values (run_id, commit_id, machine_id, config_id, metric, backend, rep_values)
SELECT :run_id, :commit_id, :machine_id, :config_id, v.metric, v.backend, v.rep_values
FROM json_to_recordset(CAST(:metric_values AS json)) AS v(metric text, backend text, rep_values float8[])""").bindparams(*_TIMES)

_runs, _jobs, _samples, _values = Run.__table__, Job.__table__, Sample.__table__, MetricValue.__table__
_RECORD_RESULT = update(_runs).where(_runs.c.id == bindparam("run_id")).values({c: bindparam(f"new_{c}") for c in _RESULT_COLUMNS})
_SETTLE_JOB = (
    update(_jobs)
    .where(_jobs.c.id == bindparam("job_id"))
    .values(state=bindparam("state"), agent_id=bindparam("agent_id"), lease_expires_at=None, updated_at=bindparam("now"))
)


def store_result(
    session: Session,
    key: dict[str, int],
    run: dict[str, Any],
    job: dict[str, Any],
    samples: list[dict[str, Any]],
    values: list[dict[str, Any]],
) -> None:
    """Write the outcome of one attempt.

    ``key``: job_id, run_id, commit_id, machine_id, config_id (denormalised onto every value);
    ``run``: every one of the run's result columns (status ... document_sha256); ``job``: its new
    ``state`` and ``agent_id`` (no lease any more; updated at the run's received_at);
    ``samples``: dicts of rep, raw, running_pct; ``values``: dicts of metric, backend and
    rep_values (see :class:`~perfci_server.models.MetricValue`: one element per sample in rep
    order, None where the sample has no value).
    """
    if db.is_postgresql(session):
        # None stays SQL NULL (a run with no noisy mark), not a JSON null
        params = {**key, **run, **job, **{c: None if run[c] is None else json.dumps(run[c]) for c in _JSON_COLUMNS},
                  "samples": json.dumps(samples), "metric_values": json.dumps(values)}
        session.execute(_STORE_RESULT_POSTGRESQL, params)
        return
    # Elsewhere (SQLite, one writer at a time): the run first, so a second ok run of the job fails
    # on the one-ok-run index before anything else is written.
    session.execute(_RECORD_RESULT, {"run_id": key["run_id"], **{f"new_{c}": run[c] for c in _RESULT_COLUMNS}})
    if samples:
        session.execute(_samples.insert(), [{**s, "run_id": key["run_id"]} for s in samples])
    if values:
        columns = {k: key[k] for k in ("run_id", "commit_id", "machine_id", "config_id")}
        session.execute(_values.insert(), [{**columns, **v} for v in values])
    session.execute(_SETTLE_JOB, {"job_id": key["job_id"], **job, "now": run["received_at"]})


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


class SeriesValue(NamedTuple):
    position: int
    sha: str
    committed_at: datetime | None
    run_id: int
    rep: int
    value: float


def reps_of_runs(session: Session, run_ids: Iterable[int]) -> dict[int, list[int]]:
    """Per run: its samples' reps, ascending (``rep_values[i]`` belongs to the i-th)."""
    ids = sorted(set(run_ids))
    out: dict[int, list[int]] = {run_id: [] for run_id in ids}
    if ids:
        statement = select(Sample.run_id, Sample.rep).where(Sample.run_id.in_(ids)).order_by(Sample.run_id, Sample.rep)
        for run_id, rep in session.execute(statement):
            out[run_id].append(rep)
    return out


def series_values(
    session: Session, branch_id: int, machine_id: int, config_id: int, metric: str, backend: str, first: int, last: int
) -> list[SeriesValue]:
    """Every value of the series at branch positions first..last, ordered by position, rep, run."""
    statement = (
        select(BranchCommit.position, Commit.sha, Commit.committed_at, MetricValue.run_id, MetricValue.rep_values)
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
    )
    rows = session.execute(statement).all()
    reps = reps_of_runs(session, (row.run_id for row in rows))
    out = [
        SeriesValue(row.position, row.sha, row.committed_at, row.run_id, rep, value)
        for row in rows
        for rep, value in zip(reps[row.run_id], row.rep_values, strict=True)
        if value is not None
    ]
    out.sort(key=lambda v: (v.position, v.rep, v.run_id))
    return out


def values_of_commit(session: Session, commit_id: int, machine_id: int, config_id: int) -> list[tuple[str, str, float]]:
    """(metric, backend, value) of every sample of the commit's successful run on machine x config,
    ordered by metric, backend, run and rep."""
    statement = (
        select(MetricValue.metric, MetricValue.backend, MetricValue.rep_values)
        .where(MetricValue.commit_id == commit_id, MetricValue.machine_id == machine_id, MetricValue.config_id == config_id)
        .order_by(MetricValue.metric, MetricValue.backend, MetricValue.run_id)
    )
    return [(metric, backend, value) for metric, backend, rep_values in session.execute(statement)
            for value in rep_values if value is not None]


def run_is_noisy(session: Session, commit_id: int, machine_id: int, config_id: int) -> bool:
    """Whether the commit's successful run on machine x config carries the agent's noisy mark."""
    statement = (
        select(Run.noisy)
        .join(Job, Job.id == Run.job_id)
        .where(Job.commit_id == commit_id, Job.machine_id == machine_id, Job.config_id == config_id, Run.status == "ok")
    )
    return any(mark is not None for mark in session.scalars(statement))


def measured_run(session: Session, job_commit_id: int, sha: str, machine_id: int, config_id: int, started_at: datetime) -> int | None:
    """The ok sim run of commit ``sha`` (in the repository of commit ``job_commit_id``) on machine x
    config that started at ``started_at``: the measurement a reused result names, if it was uploaded here."""
    repository = select(Commit.repository_id).where(Commit.id == job_commit_id).scalar_subquery()
    statement = (
        select(Run.id)
        .join(Job, Job.id == Run.job_id)
        .join(Commit, Commit.id == Job.commit_id)
        .where(Commit.repository_id == repository, Commit.sha == sha, Job.machine_id == machine_id, Job.config_id == config_id,
               Run.status == "ok", Run.backend == "sim", Run.started_at == started_at)
        .order_by(Run.id.desc())
        .limit(1)
    )
    return session.scalar(statement)
