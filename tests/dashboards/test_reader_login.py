"""Logged in as the role Grafana uses (migration 0007), a session cannot read the tables behind
the dash_* views (webhook secrets, fingerprints) nor write anything. Its own module: setting the
role's password waits for any open transaction that granted the role (test_reader_role.py)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import psycopg
import pytest

from perfci_server import migrate
from perfci_server.settings import Settings

pytestmark = pytest.mark.services

READER = Settings().grafana_db_user
INSUFFICIENT_PRIVILEGE = "42501"
READ_ONLY_TRANSACTION = "25006"


@pytest.fixture
def reader_login(dash_engine) -> Iterator[psycopg.Connection]:
    password = secrets.token_urlsafe(24)
    migrate.set_dashboard_login(dash_engine, READER, password)
    url = dash_engine.url
    with psycopg.connect(host=url.host, port=url.port, dbname=url.database, user=READER, password=password,
                         autocommit=True) as connection:
        yield connection



def _fails(connection: psycopg.Connection, sql: str) -> str:
    with pytest.raises(psycopg.Error) as caught:
        connection.execute(sql)
    return caught.value.sqlstate


def test_the_reader_sees_only_the_dashboard_views_and_cannot_write(reader_login, dash_engine):
    views = [r[0] for r in reader_login.execute(
        "SELECT viewname FROM pg_views WHERE schemaname = current_schema() AND viewname LIKE 'dash\\_%' ORDER BY 1")]
    assert len(views) >= 11
    for view in views:  # every dashboard view, the ones later migrations add included
        reader_login.execute(f"SELECT * FROM {view} LIMIT 1").fetchall()
    tables = [r[0] for r in reader_login.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1")]
    assert {"repositories", "machines", "metric_values", "alembic_version"} <= set(tables)
    for table in tables:
        assert _fails(reader_login, f"SELECT * FROM {table} LIMIT 1") == INSUFFICIENT_PRIVILEGE, table
    writes = ("UPDATE repositories SET name = 'x'", "INSERT INTO machines (name) VALUES ('x')",
              "DELETE FROM metric_values", "CREATE TABLE stolen (x text)", "DROP VIEW dash_alert_groups",
              "CREATE VIEW dash_stolen AS SELECT 1")
    for sql in writes:  # its sessions are read-only, and even a read-write one has no right to write
        assert _fails(reader_login, sql) == READ_ONLY_TRANSACTION, sql
    reader_login.execute("SET default_transaction_read_only = off")
    for sql in writes:
        assert _fails(reader_login, sql) == INSUFFICIENT_PRIVILEGE, sql
    assert reader_login.execute("SHOW standard_conforming_strings").fetchone() == ("on",)
