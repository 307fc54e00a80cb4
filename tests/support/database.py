"""The test databases: one migrated template per run, cloned wherever a test needs a database.

Alembic runs once per run, on ``<name>_template``; every xdist worker works in its own clone
(``CREATE DATABASE ... TEMPLATE``, a file copy that takes a fraction of a second), and a test that
runs the server as separate processes gets a fresh clone of its own (:func:`cloned_database`).
Workers build the template under a PostgreSQL advisory lock; the database's comment names the run
that built it (pytest-xdist's shared run id), so a later run never reuses a stale schema. Tests of
the migrations themselves make their own empty scratch databases (``server_support``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from perfci_server import db, migrate

from .services import BASE_DATABASE_URL, TEST_DATABASE_URL, WORKER, WORKER_DATABASE, database_name, database_url, unreachable

TEMPLATE = database_name("template")
# One run's workers share PYTEST_XDIST_TESTRUNUID; a run without xdist is a run of its own.
RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID") or uuid.uuid4().hex
_LOCK = 0x7065_7266_6369  # pg_advisory_lock key: "perfci"


@contextmanager
def _admin() -> Iterator[Connection]:
    """A connection to the test database named in the environment (it always exists), under the
    advisory lock that serialises creating and dropping the databases made from it."""
    engine = create_engine(BASE_DATABASE_URL, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        try:
            connect = engine.connect()
        except OperationalError as exc:
            unreachable("PostgreSQL", BASE_DATABASE_URL, exc)
        with connect as connection:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _LOCK})
            try:
                yield connection
            finally:
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": _LOCK})
    finally:
        engine.dispose()


def _ensure_template(admin: Connection) -> None:
    stamp = f"perfci test template, run {RUN}"
    current = admin.scalar(text("SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = :name"), {"name": TEMPLATE})
    if current == stamp:
        return
    admin.execute(text(f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)'))
    admin.execute(text(f'CREATE DATABASE "{TEMPLATE}"'))
    migrate.upgrade(database_url(TEMPLATE))
    admin.execute(text(f"COMMENT ON DATABASE \"{TEMPLATE}\" IS '{stamp}'"))


def clone_template(name: str) -> str:
    """(Re)create database ``name`` as a copy of this run's migrated template; returns its URL."""
    with _admin() as admin:
        _ensure_template(admin)
        admin.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"'))
    return database_url(name)


def drop_database(name: str) -> None:
    with _admin() as admin:
        admin.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@contextmanager
def cloned_database(suffix: str) -> Iterator[str]:
    """A fresh migrated database of the test's own (``<name>_<worker>_<suffix>``), dropped after."""
    name = database_name(WORKER, suffix)
    url = clone_template(name)
    try:
        yield url
    finally:
        drop_database(name)


@pytest.fixture(scope="session")
def pg_engine() -> Iterator[Engine]:
    """This worker's migrated database (TEST_DATABASE_URL), empty at the start of every test:
    tests roll back (``session``) or truncate after themselves (``committed``)."""
    clone_template(WORKER_DATABASE)
    engine = db.make_engine(TEST_DATABASE_URL, pool_size=25)
    yield engine
    engine.dispose()
    drop_database(WORKER_DATABASE)


@pytest.fixture
def connection(pg_engine: Engine) -> Iterator[Connection]:
    with pg_engine.connect() as conn:
        outer = conn.begin()
        yield conn
        outer.rollback()


@pytest.fixture
def session(connection: Connection) -> Iterator[Session]:
    """A session inside the test's transaction: commits become savepoints, everything is rolled back."""
    with Session(bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False) as s:
        yield s


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The end of the run (the xdist controller, or a run without xdist): the template goes too."""
    if hasattr(session.config, "workerinput"):
        return  # a worker: its clone is dropped with pg_engine; others may still clone the template
    engine = create_engine(BASE_DATABASE_URL, isolation_level="AUTOCOMMIT", poolclass=NullPool, connect_args={"connect_timeout": 2})
    try:
        with engine.connect() as admin:
            admin.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _LOCK})
            admin.execute(text(f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)'))
            admin.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": _LOCK})
    except OperationalError:
        pass  # no PostgreSQL: this run made no template
    finally:
        engine.dispose()
