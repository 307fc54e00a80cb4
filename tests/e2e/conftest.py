"""Fixtures of the end-to-end tests: the real PostgreSQL and Redis, and a process stack.

PostgreSQL and Redis are the services `.ci/services` starts (PERFCI_TEST_DATABASE_URL /
PERFCI_TEST_REDIS_URL); the test database is rebuilt with the migrations and emptied after, the
Redis database flushed first.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "server"))  # server_support
sys.path.insert(0, str(TESTS / "bisect"))  # bisect_repo: the bisect tests' 16-commit repository
sys.path.insert(0, str(TESTS / "forge"))  # gitea: the real forge of the forge tests
from server_support import TEST_DATABASE_URL, TEST_REDIS_URL  # noqa: E402

from e2e_support import Stack  # noqa: E402
from gitea_fixture import gitea  # noqa: E402, F401 - the session's real Gitea
from perfci_server import migrate  # noqa: E402
from perfci_server.models import Base  # noqa: E402


@pytest.fixture
def database() -> Iterator[str]:
    engine = create_engine(TEST_DATABASE_URL)
    try:
        with engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    except Exception as exc:  # noqa: BLE001 - any failure to connect means the same thing here
        pytest.fail(f"PostgreSQL is not reachable at {TEST_DATABASE_URL}: {exc}\nstart it with `bash .ci/services`", pytrace=False)
    migrate.upgrade(TEST_DATABASE_URL)
    yield TEST_DATABASE_URL
    tables = ", ".join(t.name for t in Base.metadata.sorted_tables)
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
    engine.dispose()


@pytest.fixture
def broker() -> str:
    import redis

    try:
        redis.Redis.from_url(TEST_REDIS_URL, socket_connect_timeout=2).flushdb()
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"Redis is not reachable at {TEST_REDIS_URL}: {exc}\nstart it with `bash .ci/services`", pytrace=False)
    return TEST_REDIS_URL


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    yield s
    for proc in reversed(s.procs):
        proc.stop()

