"""Fixtures for the server tests.

Tests marked `services` run against the real PostgreSQL and Redis that `.ci/services` starts
(URLs from PERFCI_TEST_DATABASE_URL / PERFCI_TEST_REDIS_URL); if those are down the tests fail
with a message saying so. The test database is rebuilt once per session with the Alembic
migrations. Most tests run inside one transaction that is rolled back afterwards; the few that
need several real connections (concurrent claims, a Celery worker) commit and the tables are
truncated after them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import warnings

import pytest

# Starlette now nudges towards httpx2; httpx is what this project's TestClient uses.
warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
from fastapi.testclient import TestClient  # noqa: E402
from sqlalchemy import Connection, Engine, text
from sqlalchemy.orm import Session

from perfci_server import db, dispatch, migrate
from perfci_server.app import create_app
from perfci_server.deps import get_session
from perfci_server.models import Base
from perfci_server.settings import get_settings
from server_support import TEST_DATABASE_URL, TEST_REDIS_URL, complete_pushes, create_config, create_repository, enroll, push_github

SERVICES_HINT = "start them with `bash .ci/services` (CI always does)"


def _settings_env(monkeypatch: pytest.MonkeyPatch, **env: str | None) -> None:
    for key, value in env.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    db.reset_engine()


@pytest.fixture(autouse=True)
def _isolated_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[None]:
    """Every test starts from development settings with no database or broker configured."""
    _settings_env(monkeypatch, PERFCI_ENV="development", PERFCI_DATABASE_URL=None, PERFCI_BROKER_URL=None, PERFCI_DATA_DIR=str(tmp_path / "perfci"), PERFCI_ADMIN_TOKEN=None)
    yield
    get_settings.cache_clear()
    db.reset_engine()


@pytest.fixture(scope="session")
def pg_engine() -> Iterator[Engine]:
    engine = db.make_engine(TEST_DATABASE_URL, pool_size=25)
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:  # noqa: BLE001 - any failure to connect means the same thing here
        pytest.fail(f"PostgreSQL is not reachable at {TEST_DATABASE_URL}: {exc}\n{SERVICES_HINT}", pytrace=False)
    with engine.begin() as connection:  # a clean, migrated schema for the whole session
        connection.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    migrate.upgrade(TEST_DATABASE_URL)
    yield engine
    engine.dispose()


@pytest.fixture
def pg_settings(monkeypatch: pytest.MonkeyPatch, pg_engine: Engine) -> None:
    """Point the process-wide settings (and db.get_engine) at the test database."""
    _settings_env(monkeypatch, PERFCI_DATABASE_URL=TEST_DATABASE_URL)


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


class SentTasks(list[tuple[str, tuple[Any, ...]]]):
    def named(self, name: str) -> list[tuple[Any, ...]]:
        return [args for task, args in self if task == name]


@pytest.fixture
def sent_tasks(monkeypatch: pytest.MonkeyPatch) -> SentTasks:
    """Record the Celery tasks the code sends (after commit) instead of sending them."""
    sent = SentTasks()
    monkeypatch.setattr(dispatch, "sender", lambda name, args: sent.append((name, args)))
    return sent


@pytest.fixture
def client(session: Session, sent_tasks: SentTasks, pg_settings: None) -> Iterator[TestClient]:
    """The app over the test's transaction: each request commits to a savepoint, like in production."""
    app = create_app()

    def _session() -> Iterator[Session]:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise

    app.dependency_overrides[get_session] = _session
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def committed(pg_engine: Engine, pg_settings: None) -> Iterator[Engine]:
    """For tests that need real commits seen by other connections/processes; tables emptied after."""
    yield pg_engine
    db.reset_engine()
    tables = ", ".join(t.name for t in Base.metadata.sorted_tables)
    with pg_engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))


@pytest.fixture
def committed_client(committed: Engine, sent_tasks: SentTasks) -> Iterator[TestClient]:
    """The app with its real per-request sessions against the test database."""
    with TestClient(create_app()) as test_client:
        yield test_client


@pytest.fixture
def redis_url() -> str:
    import redis

    try:
        redis.Redis.from_url(TEST_REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"Redis is not reachable at {TEST_REDIS_URL}: {exc}\n{SERVICES_HINT}", pytrace=False)
    return TEST_REDIS_URL


@pytest.fixture
def queued_jobs(client: TestClient, session: Session, sent_tasks: SentTasks) -> dict[str, Any]:
    """A repository, a config and an enrolled agent; a 3-commit push, which queues 3 jobs."""
    repo = create_repository(client)
    create_config(client)
    agent = enroll(client)
    push_github(client)
    complete_pushes(session, sent_tasks)
    session.commit()
    return {"repo": repo, "agent": agent}
