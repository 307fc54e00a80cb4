"""Fixtures for the dashboard tests: a migrated PostgreSQL (PERFCI_TEST_DATABASE_URL) holding the
sample data (dashboards/sample_data.py: 3 machines x 3 configs x 500 commits x 5 repetitions,
alerts), seeded once per test module inside a transaction that is rolled back after it."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from psycopg.rows import dict_row
from sqlalchemy import Connection, Engine, text

from dashboards.sample_data import Seeded, Shape, seed
from perfci_server import db, migrate

TEST_DATABASE_URL = os.environ.get("PERFCI_TEST_DATABASE_URL", "postgresql+psycopg://perfci:perfci@127.0.0.1:5432/perfci_test")
SEED_BUDGET_S = 30.0


@pytest.fixture(scope="session")
def dash_engine() -> Iterator[Engine]:
    engine = db.make_engine(TEST_DATABASE_URL)
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:  # noqa: BLE001 - any failure to connect means the same thing here
        pytest.fail(f"PostgreSQL is not reachable at {TEST_DATABASE_URL}: {exc}\nstart it with `bash .ci/services`", pytrace=False)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    migrate.upgrade(TEST_DATABASE_URL)
    yield engine
    engine.dispose()


# Module scope, not session: the seeding transaction holds locks (it re-adds foreign keys), and
# the server tests' fixture drops the schema later in the same session.
@pytest.fixture(scope="module")
def seeded_db(dash_engine: Engine) -> Iterator[tuple[Connection, Seeded, datetime]]:
    """(connection inside the seeding transaction, what was seeded, the seed's "now")."""
    now = datetime.now(UTC)
    with dash_engine.connect() as connection:
        outer = connection.begin()
        started = time.perf_counter()
        seeded = seed(connection, Shape(), now=now)
        elapsed = time.perf_counter() - started
        assert elapsed < SEED_BUDGET_S, f"seeding took {elapsed:.1f} s (budget {SEED_BUDGET_S} s)"
        yield connection, seeded, now
        outer.rollback()


@pytest.fixture
def run_sql(seeded_db):
    """Run SQL text as Grafana would send it (no driver-side parameter substitution); rows as dicts.
    Each query runs in a savepoint, so a failing one does not poison the session's transaction."""
    connection = seeded_db[0]
    raw = connection.connection.driver_connection

    def run(sql: str) -> list[dict[str, Any]]:
        with raw.transaction(), raw.cursor(row_factory=dict_row) as cursor:
            cursor.execute(sql)
            return cursor.fetchall()

    return run
