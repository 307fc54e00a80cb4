"""Shared fixtures of the bisect tests: the real 16-commit repository (:mod:`bisect_repo`),
made once per session, and the server tests' database, Redis and Celery worker fixtures."""

from __future__ import annotations

import pytest

from bisect_repo import ROOT, make_repository


@pytest.fixture(scope="session")
def bisect_repo(tmp_path_factory) -> dict:
    repo = tmp_path_factory.mktemp("bisect") / "repo"
    shas = make_repository(repo)
    return {"repo": repo, "shas": shas, "cache": tmp_path_factory.mktemp("bisect-cache")}


# --- the server tests' fixtures (real PostgreSQL, Redis), shared rather than repeated -------------

def _server_fixtures():
    import importlib.util
    import sys

    server_tests = ROOT / "tests" / "server"
    if str(server_tests) not in sys.path:
        sys.path.insert(0, str(server_tests))  # server_support, as the server tests import it
    spec = importlib.util.spec_from_file_location("perfci_server_test_fixtures", server_tests / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_server = _server_fixtures()
_isolated_settings = _server._isolated_settings
pg_engine, pg_settings, connection, session = _server.pg_engine, _server.pg_settings, _server.connection, _server.session
sent_tasks, client, committed, redis_url = _server.sent_tasks, _server.client, _server.committed, _server.redis_url
worker = __import__("test_celery_worker").worker  # the real Celery worker process
