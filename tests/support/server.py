"""The server under test: settings, the app over the test database, recorded task sends, Redis.

Most tests run the app inside one transaction that is rolled back afterwards (``client``); the
few that need several real connections (concurrent claims, a Celery worker) commit, and the tables
are truncated after them (``committed``, ``committed_client``).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from perfci_server import db, dispatch
from perfci_server.app import create_app
from perfci_server.deps import get_session
from perfci_server.models import Base
from perfci_server.settings import get_settings

from .services import TEST_DATABASE_URL, TEST_REDIS_URL, unreachable


def settings_env(monkeypatch: pytest.MonkeyPatch, **env: str | None) -> None:
    """Set (or, with None, unset) PERFCI_* variables and let the settings and engine see them."""
    for key, value in env.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    db.reset_engine()


@pytest.fixture
def isolated_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[None]:
    """Development settings with no database or broker configured (the server, alerts and bisect
    tests use it for every test: see their conftest)."""
    settings_env(monkeypatch, PERFCI_ENV="development", PERFCI_DATABASE_URL=None, PERFCI_BROKER_URL=None,
                 PERFCI_DATA_DIR=str(tmp_path / "perfci"), PERFCI_ADMIN_TOKEN=None)
    yield
    get_settings.cache_clear()
    db.reset_engine()


@pytest.fixture
def pg_settings(monkeypatch: pytest.MonkeyPatch, pg_engine: Engine) -> None:
    """Point the process-wide settings (and db.get_engine) at this worker's test database."""
    settings_env(monkeypatch, PERFCI_DATABASE_URL=TEST_DATABASE_URL)


class SentTasks(list[tuple[str, tuple[Any, ...]]]):
    def named(self, name: str) -> list[tuple[Any, ...]]:
        return [args for task, args in self if task == name]


@pytest.fixture
def sent_tasks(monkeypatch: pytest.MonkeyPatch) -> SentTasks:
    """Record the Celery tasks the code sends (after commit) instead of sending them."""
    sent = SentTasks()
    monkeypatch.setattr(dispatch, "sender", lambda name, args: sent.append((name, args)))
    return sent


@functools.cache
def shared_app() -> FastAPI:
    """One app per process for the clients below: making one takes a fifth of a second (FastAPI builds
    every route's validators), and the app reads its settings per request, so a test that changes
    them sees them. What a test leaves on it (overrides, the cached OpenAPI document, whose limits
    are settings) is cleared after it."""
    return create_app()


@contextmanager
def app_client(overrides: dict[Any, Any] | None = None) -> Iterator[TestClient]:
    app = shared_app()
    app.dependency_overrides.update(overrides or {})
    try:
        with TestClient(app) as test_client:
            yield test_client
    finally:
        app.dependency_overrides.clear()
        app.openapi_schema = None


@pytest.fixture
def client(session: Session, sent_tasks: SentTasks, pg_settings: None) -> Iterator[TestClient]:
    """The app over the test's transaction: each request commits to a savepoint, like in production."""

    def _session() -> Iterator[Session]:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise

    with app_client({get_session: _session}) as test_client:
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
    with app_client() as test_client:
        yield test_client


@pytest.fixture
def redis_url() -> str:
    """This xdist worker's test Redis database (reachable, as it is: tests/support/services.py)."""
    import redis

    try:
        redis.Redis.from_url(TEST_REDIS_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        unreachable("Redis", TEST_REDIS_URL, exc)
    return TEST_REDIS_URL


class LiveServer:
    """The app served by uvicorn on a free loopback port, in a thread: for clients that speak HTTP
    (the CLI) against the committed test database. ``stop()`` ends it."""

    def __init__(self) -> None:
        self._server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=0, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self._server.started, "uvicorn did not start within 20 s"
        self.url = f"http://127.0.0.1:{self._server.servers[0].sockets[0].getsockname()[1]}"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
