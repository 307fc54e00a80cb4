"""Migration 0016 (metric_values: one row per run x metric x backend, values as an array) moves
existing values with their repetitions' positions, and back on downgrade, on PostgreSQL and SQLite."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from perfci_server import db, migrate
from perfci_server.alerts import series_repository as series_sql
from perfci_server.bisect import repository as bisect_sql
from perfci_server.results import repository as result_sql
from perfci_server.settings import get_settings
from tests.server.server_support import scratch_database

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
# (run, rep) -> {(metric, backend): value}: run 1's reps are not contiguous, cpp is missing at
# two of its reps (the sample did not measure it), and the values need all 17 digits.
SAMPLES = {
    (1, 0): {("pps", "tsc"): 0.30000000000000004, ("cpp", "tsc"): None},
    (1, 2): {("pps", "tsc"): 1.2345678901234567e-07, ("cpp", "tsc"): 812.5},
    (1, 5): {("pps", "tsc"): 14880952.380952381, ("cpp", "tsc"): None},
    (2, 0): {("pps", "tsc"): 2.0000000000000004, ("cpp", "tsc"): None},
    (2, 1): {("pps", "tsc"): 1e-300, ("cpp", "tsc"): None},
}
ROWS_0015 = "SELECT sample_id, run_id, commit_id, machine_id, config_id, rep, metric, backend, value FROM metric_values ORDER BY sample_id, metric"
VIEWS = {
    "dash_commit_stats": "SELECT * FROM dash_commit_stats ORDER BY metric, backend",
    "dash_recent_points": "SELECT * FROM dash_recent_points ORDER BY metric, backend",
    "dash_series_points": "SELECT * FROM dash_series_points ORDER BY metric, backend",
    "dash_series_changes": "SELECT * FROM dash_series_changes ORDER BY metric, backend",
    "dash_series_backends": "SELECT * FROM dash_series_backends ORDER BY backend",
}


def _seed_0015(engine: Engine) -> None:
    """One commit measured by two runs (two jobs: its own and a confirmation round) at revision 0015."""
    with engine.begin() as c:
        c.execute(text("INSERT INTO repositories (id, name, forge, clone_url, webhook_secret, track_tags, created_at) "
                       "VALUES (1, 'acme/router', 'github', 'https://github.com/acme/router.git', 's', false, :now)"), {"now": NOW})
        c.execute(text("INSERT INTO commits (id, repository_id, sha, parents, author_name, author_email, message, created_at) "
                       "VALUES (1, 1, :sha, '[]', 'a', 'a@example.com', 'm', :now)"), {"sha": "a" * 40, "now": NOW})
        c.execute(text("INSERT INTO branches (id, repository_id, name, created_at) VALUES (1, 1, 'main', :now)"), {"now": NOW})
        c.execute(text("INSERT INTO branch_commits (branch_id, commit_id, position) VALUES (1, 1, 0)"))
        c.execute(text("INSERT INTO machines (id, fingerprint, name, details, enabled, created_at) "
                       "VALUES (1, :fp, 'm1', '{}', true, :now)"), {"fp": "f" * 64, "now": NOW})
        c.execute(text("INSERT INTO bench_configs (id, name, harness, pkt_size, flows, routes, packets, warmup, backend, repetitions, "
                       "enabled, created_at) VALUES (1, 'c1', 'testpmd', 64, 1, 'small', 1000, 10, 'auto', 5, true, :now)"), {"now": NOW})
        for run_id in (1, 2):
            c.execute(text("INSERT INTO jobs (id, commit_id, machine_id, config_id, state, attempts, max_attempts, round, updated_at, "
                           "created_at) VALUES (:id, 1, 1, 1, 'done', 1, 3, :round, :now, :now)"),
                      {"id": run_id, "round": run_id - 1, "now": NOW})
            c.execute(text("INSERT INTO runs (id, job_id, attempt, status, backend_reason, created_at) "
                           "VALUES (:id, :id, 1, 'ok', '', :now)"), {"id": run_id, "now": NOW})
        for sample_id, ((run_id, rep), values) in enumerate(SAMPLES.items(), start=1):
            c.execute(text("INSERT INTO samples (id, run_id, rep, raw, running_pct) VALUES (:id, :run, :rep, '{}', '{}')"),
                      {"id": sample_id, "run": run_id, "rep": rep})
            for (metric, backend), value in values.items():
                if value is not None:
                    c.execute(text("INSERT INTO metric_values (sample_id, run_id, commit_id, machine_id, config_id, rep, metric, "
                                   "backend, value) VALUES (:s, :run, 1, 1, 1, :rep, :metric, :backend, :value)"),
                              {"s": sample_id, "run": run_id, "rep": rep, "metric": metric, "backend": backend, "value": value})


def _read(engine: Engine, postgresql: bool, rows: str) -> dict[str, list[tuple]]:
    with engine.connect() as c:
        out = {"rows": [tuple(r) for r in c.execute(text(rows))]}
        if postgresql:
            out.update({name: [tuple(r) for r in c.execute(text(sql))] for name, sql in VIEWS.items()})
    return out


def _check(url: str, postgresql: bool) -> None:
    migrate.upgrade(url, "0015")
    engine = db.make_engine(url)  # SQLite: with its foreign keys enforced, as the server runs it
    try:
        _seed_0015(engine)
        before = _read(engine, postgresql, ROWS_0015)
        assert len(before["rows"]) == 6
        assert all(before[name] for name in VIEWS) if postgresql else True

        migrate.upgrade(url)
        after = _read(engine, postgresql, "SELECT run_id, metric, backend, commit_id, machine_id, config_id, rep_values "
                                          "FROM metric_values ORDER BY run_id, metric")
        rep_values = {(run_id, metric, backend): values for run_id, metric, backend, *_, values in after.pop("rows")}
        if not postgresql:
            rep_values = {key: json.loads(values) for key, values in rep_values.items()}
        assert rep_values == {
            (1, "cpp", "tsc"): [None, 812.5, None],
            (1, "pps", "tsc"): [0.30000000000000004, 1.2345678901234567e-07, 14880952.380952381],
            (2, "pps", "tsc"): [2.0000000000000004, 1e-300],
        }
        assert after == {k: v for k, v in before.items() if k != "rows"}  # every view reads the same
        with Session(engine) as session:
            assert [tuple(v) for v in result_sql.series_values(session, 1, 1, 1, "cpp", "tsc", 0, 0)] == [
                (0, "a" * 40, None, 1, 2, 812.5)]
            assert [(v.run_id, v.rep, v.value) for v in result_sql.series_values(session, 1, 1, 1, "pps", "tsc", 0, 0)] == [
                (1, 0, 0.30000000000000004), (2, 0, 2.0000000000000004), (2, 1, 1e-300),
                (1, 2, 1.2345678901234567e-07), (1, 5, 14880952.380952381)]
            assert bisect_sql.values(session, [1], 1, 1, "pps", "tsc") == {  # (value, session key: measured alone)
                1: [(0.30000000000000004, 0), (1.2345678901234567e-07, 0), (14880952.380952381, 0), (2.0000000000000004, 0),
                    (1e-300, 0)]}
            assert [(v.metric, v.run_id, v.values) for v in series_sql.window_runs(session, 1, 1, 1, [0])] == [
                ("cpp", 1, [812.5]), ("pps", 1, [0.30000000000000004, 1.2345678901234567e-07, 14880952.380952381]),
                ("pps", 2, [2.0000000000000004, 1e-300])]
        if postgresql:
            with engine.connect() as c:
                role = get_settings().grafana_db_user
                granted = {name: c.scalar(text("SELECT has_table_privilege(:role, :name, 'SELECT')"), {"role": role, "name": name})
                           for name in (*VIEWS, "metric_values", "samples")}
            assert granted == {**dict.fromkeys(VIEWS, True), "metric_values": False, "samples": False}
        with engine.begin() as c:  # a run's delete takes its values along (runs -> metric_values)
            c.execute(text("DELETE FROM runs WHERE id = 2"))
            assert c.scalar(text("SELECT count(*) FROM metric_values WHERE run_id = 2")) == 0
            c.execute(text("INSERT INTO runs (id, job_id, attempt, status, backend_reason, created_at) "
                           "VALUES (2, 2, 1, 'ok', '', :now)"), {"now": NOW})
        with engine.begin() as c:
            c.execute(text("INSERT INTO samples (id, run_id, rep, raw, running_pct) VALUES (4, 2, 0, '{}', '{}'), (5, 2, 1, '{}', '{}')"))
            c.execute(text("INSERT INTO metric_values (run_id, metric, backend, commit_id, machine_id, config_id, rep_values) "
                           "VALUES (2, 'pps', 'tsc', 1, 1, 1, :values)"),
                      {"values": [2.0000000000000004, 1e-300] if postgresql else "[2.0000000000000004, 1e-300]"})

        migrate.downgrade(url, "0015")
        assert _read(engine, postgresql, ROWS_0015) == before
    finally:
        engine.dispose()


@pytest.fixture
def scratch_url(pg_engine: Engine) -> Iterator[str]:
    with scratch_database("m0016") as url:
        yield url


@pytest.mark.services
@pytest.mark.xdist_group("pg-roles")  # the migrations alter the cluster-wide dashboard role
def test_postgresql_values_survive_upgrade_and_downgrade(scratch_url):
    _check(scratch_url, postgresql=True)


def test_sqlite_values_survive_upgrade_and_downgrade(tmp_path):
    _check(f"sqlite:///{tmp_path / 'perfci.db'}", postgresql=False)
