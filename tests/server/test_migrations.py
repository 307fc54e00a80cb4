"""Alembic: upgrade on an empty database, no drift from the models, downgrade to base."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, inspect

from perfci_server import migrate
from perfci_server.models import Base
from tests.server.server_support import scratch_database


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
