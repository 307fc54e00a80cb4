"""Alembic: upgrade on an empty database, no drift from the models, downgrade to base."""

from __future__ import annotations

import importlib.util
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import create_engine, inspect
from sqlalchemy.engine import make_url

from perfci_server import migrate
from perfci_server.models import Base
from tests.server.server_support import scratch_database
from tests.support.services import TEST_DATABASE_URL


def _round_trip(url: str) -> None:
    migrate.upgrade(url)
    engine = create_engine(url)
    try:
        assert set(inspect(engine).get_table_names()) >= set(Base.metadata.tables)
        migrate.check(url)  # raises when the models and the migrations differ
        migrate.downgrade(url, "base")
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
        migrate.upgrade(url)  # and back up again
    finally:
        engine.dispose()


@pytest.mark.services
@pytest.mark.xdist_group("pg-roles")  # the migrations alter the cluster-wide dashboard role
def test_postgresql_upgrade_check_downgrade(pg_engine):
    with scratch_database("migrations") as url:
        _round_trip(url)


def test_sqlite_upgrade_check_downgrade(tmp_path):
    _round_trip(f"sqlite:///{tmp_path / 'perfci.db'}")


def _ensure_role_block() -> str:
    path = Path(__file__).parents[2] / "migrations" / "versions" / "0008_dashboard_reader.py"
    spec = importlib.util.spec_from_file_location("dashboard_reader_migration", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._ENSURE_ROLE


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.mark.services
@pytest.mark.parametrize("settings_before", [[], ["standard_conforming_strings = on"]], ids=["first", "again"])
def test_two_databases_migrated_at_once_both_set_the_dashboard_role(pg_engine, settings_before):
    """The dashboard role's settings are one cluster-wide row: while one database's migration holds
    it (set, not yet committed), another's waits, then goes on once the first commits (it failed with
    "tuple concurrently updated", or a duplicate key on the role's first settings)."""
    ensure_role = _ensure_role_block()
    role = f"perfci_race_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(_libpq(TEST_DATABASE_URL), autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" NOLOGIN')
        try:
            for setting in settings_before:
                admin.execute(f'ALTER ROLE "{role}" SET {setting}')
            with scratch_database("role_race") as other:
                _migrate_at_once(ensure_role, role, admin, TEST_DATABASE_URL, other)
            settings = admin.execute("SELECT s.setconfig FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole"
                                     " WHERE r.rolname = %s AND s.setdatabase = 0", (role,)).fetchone()[0]
            assert {"default_transaction_read_only=on", "standard_conforming_strings=on"} <= set(settings)
        finally:  # the scratch database and its grants are gone; this one's go with the role
            admin.execute(f'REVOKE USAGE ON SCHEMA public FROM "{role}"')
            admin.execute(f'REVOKE CONNECT ON DATABASE "{make_url(TEST_DATABASE_URL).database}" FROM "{role}"')
            admin.execute(f'DROP ROLE "{role}"')


def _migrate_at_once(ensure_role: str, role: str, admin: psycopg.Connection, first_url: str, second_url: str) -> None:
    """The role block in two databases: the second runs while the first holds the row, uncommitted."""
    with psycopg.connect(_libpq(first_url)) as first, psycopg.connect(_libpq(second_url)) as second:
        for conn in (first, second):
            conn.execute("SELECT set_config('perfci.dashboard_role', %s, false)", (role,))
        first.execute(ensure_role)
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(second.execute, ensure_role)
            pid = second.info.backend_pid
            deadline = time.monotonic() + 60
            while admin.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0] != "Lock":
                assert not waiting.done(), f"the second migration did not wait for the first: {waiting.exception()}"
                assert time.monotonic() < deadline, "the second migration never waited for the first"
                time.sleep(0.05)
            first.commit()
            waiting.result(timeout=60)
        second.commit()
