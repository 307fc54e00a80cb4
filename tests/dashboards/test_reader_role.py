"""The role Grafana connects as (migration 0007) reads the dash_* views and nothing else: every
dashboard query runs as it and returns what the schema owner sees; logged in, it cannot read the
tables behind the views (webhook secrets, fingerprints) and cannot write anything
(test_reader_login.py)."""

from __future__ import annotations

import json

import psycopg
import pytest

from dashboards import JSON_DIR
from dashboards.generate import FACTORIES
from dashboards.macros import TimeRange, expand, panel_queries, resolve_variables
from perfci_server.settings import Settings

pytestmark = pytest.mark.services

READER = Settings().grafana_db_user


@pytest.fixture
def as_reader(seeded_db):
    """Run SQL as the reader inside the seeding transaction (membership granted there, rolled back)."""
    connection = seeded_db[0]
    raw = connection.connection.driver_connection
    with raw.cursor() as cursor:
        cursor.execute(f'GRANT "{READER}" TO current_user')

    def run(sql: str) -> list[dict]:
        with raw.transaction(), raw.cursor(row_factory=psycopg.rows.dict_row) as cursor:
            cursor.execute(f'SET LOCAL ROLE "{READER}"')  # a failure rolls the savepoint back, and the role with it
            cursor.execute(sql)
            rows = cursor.fetchall()
            cursor.execute("RESET ROLE")  # SET LOCAL outlives a released savepoint
            return rows

    return run


@pytest.mark.parametrize("file", sorted(FACTORIES))
def test_every_dashboard_query_runs_as_the_reader(run_sql, as_reader, seeded_db, file):
    _, seeded, now = seeded_db
    board = json.loads((JSON_DIR / file).read_text())
    time_range = TimeRange.from_dashboard(board, now)
    names = {v["name"]: v for v in board["templating"]["list"]}
    chosen = {"machine": str(seeded.machines["dut-01"])} if "machine" in names and not names["machine"].get("multi") else {}
    variables = resolve_variables(board, as_reader, time_range, chosen)
    assert variables == resolve_variables(board, run_sql, time_range, chosen)
    read = 0
    for query in panel_queries(board):
        sql = expand(query.sql, variables, time_range)
        rows = as_reader(sql)
        assert rows == run_sql(sql), f"{file} {query.panel}"
        read += bool(rows)
    assert read >= len(panel_queries(board)) / 2, f"{file}: most panels read nothing as {READER}"
