"""/health is liveness (answers while the database is down); /ready is readiness: 200 only when the
database and, where configured, the broker answer, 503 with the envelope naming what is down."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.server.broker_outage import closed_port
from perfci_server import db
from perfci_server.app import create_app
from perfci_server.settings import get_settings
from tests.support.services import TEST_DATABASE_URL

pytestmark = pytest.mark.services


def _env(monkeypatch: pytest.MonkeyPatch, **env: str) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    db.reset_engine()


def _get(path: str):
    with TestClient(create_app()) as client:
        return client.get(f"/api/v1/{path}")


def test_ready_with_the_database_and_the_broker_up(monkeypatch, pg_engine, redis_url):
    _env(monkeypatch, PERFCI_DATABASE_URL=TEST_DATABASE_URL, PERFCI_BROKER_URL=redis_url)
    response = _get("ready")
    assert response.status_code == 200, response.text
    assert response.json() == {"status": "ready", "checks": {"database": "ok", "broker": "ok"}}


def test_the_embedded_default_has_no_broker_to_check():
    response = _get("ready")  # conftest: SQLite under a temporary data dir, tasks in-process
    assert response.status_code == 200, response.text
    assert response.json()["checks"] == {"database": "ok"}


def test_a_database_down_is_503_on_ready_while_health_stays_ok(monkeypatch):
    _env(monkeypatch, PERFCI_DATABASE_URL=f"postgresql+psycopg://perfci:perfci@127.0.0.1:{closed_port()}/perfci?connect_timeout=2")
    assert _get("health").status_code == 200
    response = _get("ready")
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert (error["code"], error["message"]) == ("not_ready", "not ready: database unavailable")
    assert error["details"]["database"].startswith("OperationalError")


def test_a_broker_down_is_503_on_ready(monkeypatch, pg_engine):
    _env(monkeypatch, PERFCI_DATABASE_URL=TEST_DATABASE_URL, PERFCI_BROKER_URL=f"redis://127.0.0.1:{closed_port()}/0")
    response = _get("ready")
    assert response.status_code == 503, response.text
    assert response.json()["error"]["details"]["database"] == "ok"
    assert response.json()["error"]["details"]["broker"] != "ok"
