"""The benchmarks' own PostgreSQL databases and Redis databases, and the rule that keeps them apart
from everything else: a benchmark drops, recreates or empties only what a benchmark created.

A database a benchmark creates carries the comment ``perfci benchmark database``; one without it
(the test suite's, production's, anyone's) is refused with a message, never dropped. A Redis
database a benchmark uses holds the key ``perfci:benchmark``; a non-empty one without it is
refused, never emptied. Defaults: ``perfci_bench_<name>`` on the PostgreSQL of `.ci/services`,
Redis database 12 (override with --database-url / --redis-url or PERFCI_BENCH_DATABASE_URL /
PERFCI_BENCH_REDIS_URL).
"""

from __future__ import annotations

import os

import psycopg
from psycopg import sql
from sqlalchemy.engine import URL, make_url

MARK = "perfci benchmark database"
REDIS_MARK = "perfci:benchmark"
SERVER = "postgresql+psycopg://perfci:perfci@127.0.0.1:5432/"


class NotOurs(SystemExit):
    pass


def default_database_url(name: str) -> str:
    return os.environ.get("PERFCI_BENCH_DATABASE_URL") or f"{SERVER}perfci_bench_{name}"


def default_redis_url() -> str:
    return os.environ.get("PERFCI_BENCH_REDIS_URL") or "redis://127.0.0.1:6379/12"


def _libpq(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def recreate_database(url: str) -> str:
    """Drop (when a benchmark made it) and create the database of ``url``; returns ``url``."""
    target = make_url(url)
    name = target.database
    with psycopg.connect(_libpq(target.set(database="postgres")), autocommit=True) as admin:
        row = admin.execute("SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
                            (name,)).fetchone()
        if row is not None and row[0] != MARK:
            raise NotOurs(f"refusing to drop database {name!r}: a benchmark did not create it (no comment {MARK!r}); "
                          "pass --database-url with a new name, e.g. perfci_bench_mine")
        quoted = sql.Identifier(name)
        if row is not None:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(quoted))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(quoted))
        admin.execute(sql.SQL("COMMENT ON DATABASE {} IS {}").format(quoted, sql.Literal(MARK)))
    return url


def server_url(url: str) -> str:
    """The maintenance database of the server of ``url`` (to read its settings without the target)."""
    return make_url(url).set(database="postgres").render_as_string(hide_password=False)


def claim_redis(url: str):
    """A client of the Redis database of ``url``, marked as a benchmark's; refuses one in other use."""
    import redis

    client = redis.Redis.from_url(url)
    if not client.exists(REDIS_MARK) and client.dbsize() > 0:
        client.close()
        raise NotOurs(f"refusing Redis {url}: it holds keys and no benchmark marked it ({REDIS_MARK}); "
                      "pass --redis-url with an empty database")
    client.set(REDIS_MARK, "1")
    return client
