"""/health is liveness (answers while the database is down); /ready is readiness: 200 only when the
database and, where configured, the broker answer, 503 with the envelope naming what is down (and,
to an admin or API token only, why: the driver's error names hosts and ports)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.server.broker_outage import closed_port
from perfci_server import db
from perfci_server.app import create_app
from perfci_server.settings import get_settings
from tests.server.server_support import ADMIN
from tests.support.services import TEST_DATABASE_URL

pytestmark = pytest.mark.services


def _env(monkeypatch: pytest.MonkeyPatch, **env: str) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    db.reset_engine()


def _get(path: str, headers: dict[str, str] | None = None):
    with TestClient(create_app()) as client:
        return client.get(f"/api/v1/{path}", headers=headers)


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
    port = closed_port()
    _env(monkeypatch, PERFCI_DATABASE_URL=f"postgresql+psycopg://perfci:perfci@127.0.0.1:{port}/perfci?connect_timeout=2")
    assert _get("health").status_code == 200
    response = _get("ready")
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error == {"code": "not_ready", "message": "not ready: database unavailable", "details": {"database": "unavailable"}}
    assert "127.0.0.1" not in response.text and str(port) not in response.text


def test_an_admin_sees_why_a_dependency_is_down(monkeypatch):
    port = closed_port()
    _env(monkeypatch, PERFCI_DATABASE_URL=f"postgresql+psycopg://perfci:perfci@127.0.0.1:{port}/perfci?connect_timeout=2")
    for headers in ({"Authorization": "Bearer not-the-token"}, {"Authorization": "Bearer pca_" + "x" * 43}):
        assert _get("ready", headers).json()["error"]["details"] == {"database": "unavailable"}
    details = _get("ready", ADMIN).json()["error"]["details"]
    assert details["database"].startswith("OperationalError") and str(port) in details["database"]


def test_an_api_token_sees_the_reasons_while_the_database_answers(monkeypatch, committed, redis_url):
    _env(monkeypatch, PERFCI_BROKER_URL=f"redis://127.0.0.1:{closed_port()}/0")
    with TestClient(create_app()) as client:
        token = client.post("/api/v1/api-tokens", json={"name": "ops"}, headers=ADMIN).json()["token"]
        anonymous = client.get("/api/v1/ready").json()["error"]["details"]
        with_token = client.get("/api/v1/ready", headers={"Authorization": f"Bearer {token}"}).json()["error"]["details"]
    assert anonymous == {"database": "ok", "broker": "unavailable"}
    assert with_token["database"] == "ok" and with_token["broker"] not in ("ok", "unavailable")


def test_a_broker_down_is_503_on_ready(monkeypatch, pg_engine):
    _env(monkeypatch, PERFCI_DATABASE_URL=TEST_DATABASE_URL, PERFCI_BROKER_URL=f"redis://127.0.0.1:{closed_port()}/0")
    response = _get("ready")
    assert response.status_code == 503, response.text
    assert response.json()["error"]["details"] == {"database": "ok", "broker": "unavailable"}


def test_an_app_made_before_a_settings_change_answers_with_the_new_settings(monkeypatch):
    """create_app() reads no setting (the tests' clients share one app per process): a route
    answers with the settings of the moment it is asked."""
    with TestClient(create_app()) as client:
        _env(monkeypatch, PERFCI_ENV="test", PERFCI_ADMIN_TOKEN="a-test-admin-token-of-32-characters")
        assert client.get("/api/v1/health").json()["env"] == "test"
        _env(monkeypatch, PERFCI_ENV="development")
        assert client.get("/api/v1/health").json()["env"] == "development"
