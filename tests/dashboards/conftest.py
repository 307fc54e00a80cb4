"""Fixtures for the dashboard tests: this worker's migrated PostgreSQL database holding the
sample data (dashboards/sample_data.py: 3 machines x 3 configs x 500 commits x 5 repetitions,
alerts), seeded once per test module inside a transaction that is rolled back after it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from psycopg.rows import dict_row
from sqlalchemy import Connection, Engine

from dashboards.sample_data import Seeded, Shape, seed

@pytest.fixture(scope="session")
def dash_engine(pg_engine: Engine) -> Engine:
    """This worker's database (``pg_engine``); the tests using it share one xdist worker, since
    they set the cluster-wide dashboard role's password (:mod:`tests.support.groups`)."""
    return pg_engine


# Module scope, not session: the seeding transaction holds locks (it re-adds foreign keys) that
# the other tests of this worker would wait on.
@pytest.fixture(scope="module")
def seeded_db(dash_engine: Engine) -> Iterator[tuple[Connection, Seeded, datetime]]:
    """(connection inside the seeding transaction, what was seeded, the seed's "now")."""
    now = datetime.now(UTC)
    with dash_engine.connect() as connection:
        outer = connection.begin()
        seeded = seed(connection, Shape(), now=now)
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
