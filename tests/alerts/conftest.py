"""The alerts tests run on the server tests' fixtures (real PostgreSQL and Redis, one rolled-back
transaction per test, a real Celery worker where it matters) plus builders of measured series."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

SERVER_TESTS = Path(__file__).resolve().parents[1] / "server"
sys.path.insert(0, str(SERVER_TESTS))
sys.path.insert(0, str(Path(__file__).parent))

# Load the server tests' conftest under its own name and re-export its fixtures here.
_spec = importlib.util.spec_from_file_location("server_conftest", SERVER_TESTS / "conftest.py")
assert _spec is not None and _spec.loader is not None
server_conftest = importlib.util.module_from_spec(_spec)
sys.modules["server_conftest"] = server_conftest
_spec.loader.exec_module(server_conftest)

_isolated_settings = server_conftest._isolated_settings
pg_engine = server_conftest.pg_engine
pg_settings = server_conftest.pg_settings
connection = server_conftest.connection
session = server_conftest.session
sent_tasks = server_conftest.sent_tasks
client = server_conftest.client
committed = server_conftest.committed
committed_client = server_conftest.committed_client
redis_url = server_conftest.redis_url
worker = importlib.import_module("test_celery_worker").worker  # a real Celery worker process
