"""Fixtures of the end-to-end tests: the real PostgreSQL and Redis, and a process stack.

PostgreSQL and Redis are the services `.ci/services` starts (PERFCI_TEST_DATABASE_URL /
PERFCI_TEST_REDIS_URL): each test gets a fresh clone of the migrated template database, dropped
after it, and the Redis database flushed first. The real Gitea is ``gitea`` (:mod:`tests.support.gitea`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.e2e_support import Stack
from tests.support.database import cloned_database
from tests.support.services import TEST_REDIS_URL, unreachable


@pytest.fixture
def database() -> Iterator[str]:
    with cloned_database("e2e") as url:
        yield url


@pytest.fixture
def broker() -> str:
    import redis

    try:
        redis.Redis.from_url(TEST_REDIS_URL, socket_connect_timeout=2).flushdb()
    except redis.RedisError as exc:
        unreachable("Redis", TEST_REDIS_URL, exc)
    return TEST_REDIS_URL


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    yield s
    for proc in reversed(s.procs):
        proc.stop()
