"""Where the tests' PostgreSQL and Redis are, and one xdist worker's share of them and of the CPUs.

``PERFCI_TEST_DATABASE_URL`` names a database that exists (``.ci/services`` creates it): it is the
maintenance connection and the prefix of every database the tests make: ``<name>_template`` (the
migrated schema, built once per run), ``<name>_<worker>`` (each worker's clone of it) and
``<name>_<worker>_<suffix>`` (a test's own). ``PERFCI_TEST_REDIS_URL`` is worker 0's Redis database;
worker ``i`` uses the database ``i`` below it (15, 14, ... by default), so a Celery worker of one
xdist worker never takes another's task. Each xdist worker forwards on a CPU of its own where there
are enough (``PERFCI_CORE``: the highest allowed for worker 0, the next for worker 1, round the
allowed CPUs): otherwise every pinned dataplane run of every worker shares the highest CPU.
"""

from __future__ import annotations

import os
from typing import NoReturn
from urllib.parse import urlsplit

import pytest
from sqlalchemy.engine import URL, make_url

SERVICES_HINT = "start them with `bash .ci/services` (CI always does)"
BASE_DATABASE_URL = os.environ.get("PERFCI_TEST_DATABASE_URL", "postgresql+psycopg://perfci:perfci@127.0.0.1:5432/perfci_test")
# pytest-xdist names its workers gw0, gw1, ...; a run without it is one worker of its own.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
WORKER_INDEX = int(WORKER.removeprefix("gw")) if WORKER.startswith("gw") else 0


def worker_redis_url(base: str, index: int) -> str:
    """Worker ``index``'s Redis database: the base URL's database number minus ``index``."""
    parts = urlsplit(base)
    database = int(parts.path.strip("/") or 0) - index
    if database < 0:
        raise pytest.UsageError(f"PERFCI_TEST_REDIS_URL {base}: xdist worker {index} would need Redis database {database}; "
                                "name a higher database (up to 15)")
    return parts._replace(path=f"/{database}").geturl()


TEST_REDIS_URL = worker_redis_url(os.environ.get("PERFCI_TEST_REDIS_URL", "redis://127.0.0.1:6379/15"), WORKER_INDEX)


def database_url(name: str) -> str:
    """The URL of database ``name`` on the test server, with the test credentials."""
    url: URL = make_url(BASE_DATABASE_URL).set(database=name)
    return url.render_as_string(hide_password=False)


def database_name(*parts: str) -> str:
    """``<test database>_<parts>``: names every database the tests make apart from other runs'."""
    return "_".join([make_url(BASE_DATABASE_URL).database or "perfci_test", *parts])


WORKER_DATABASE = database_name(WORKER)
TEST_DATABASE_URL = database_url(WORKER_DATABASE)


def unreachable(service: str, url: str, exc: BaseException) -> NoReturn:
    raise pytest.fail.Exception(f"{service} is not reachable at {url}: {exc}\n{SERVICES_HINT}", pytrace=False) from None


def pytest_configure(config: pytest.Config) -> None:
    """An xdist worker's forwarding CPU (see the module's docstring); one the developer set is kept."""
    cpus = sorted(os.sched_getaffinity(0), reverse=True)
    if WORKER.startswith("gw") and len(cpus) >= 2 and "PERFCI_CORE" not in os.environ:
        os.environ["PERFCI_CORE"] = str(cpus[WORKER_INDEX % len(cpus)])
