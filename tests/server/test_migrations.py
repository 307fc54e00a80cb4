"""Alembic: upgrade on an empty database, no drift from the models, downgrade to base."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url

from perfci_server import migrate
from perfci_server.models import Base
from server_support import TEST_DATABASE_URL


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
def test_postgresql_upgrade_check_downgrade(pg_engine):
    scratch = f"{make_url(TEST_DATABASE_URL).database}_migrations"  # one per test database: runs in parallel never collide
    admin = create_engine(TEST_DATABASE_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {scratch} WITH (FORCE)"))
            conn.execute(text(f"CREATE DATABASE {scratch}"))
        _round_trip(make_url(TEST_DATABASE_URL).set(database=scratch).render_as_string(hide_password=False))
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {scratch} WITH (FORCE)"))
    finally:
        admin.dispose()


def test_sqlite_upgrade_check_downgrade(tmp_path):
    _round_trip(f"sqlite:///{tmp_path / 'perfci.db'}")
