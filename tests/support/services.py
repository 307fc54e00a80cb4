"""Where the tests' PostgreSQL and Redis are, and how one xdist worker's share of them is named.

``PERFCI_TEST_DATABASE_URL`` names a database that exists (``.ci/services`` creates it): it is the
maintenance connection and the prefix of every database the tests make: ``<name>_template`` (the
migrated schema, built once per run), ``<name>_<worker>`` (each worker's clone of it) and
``<name>_<worker>_<suffix>`` (a test's own). ``PERFCI_TEST_REDIS_URL`` is one Redis database:
the tests that use Redis share one xdist worker (:mod:`tests.support.groups`).
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest
from sqlalchemy.engine import URL, make_url

SERVICES_HINT = "start them with `bash .ci/services` (CI always does)"
BASE_DATABASE_URL = os.environ.get("PERFCI_TEST_DATABASE_URL", "postgresql+psycopg://perfci:perfci@127.0.0.1:5432/perfci_test")
TEST_REDIS_URL = os.environ.get("PERFCI_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
# pytest-xdist names its workers gw0, gw1, ...; a run without it is one worker of its own.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")


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
