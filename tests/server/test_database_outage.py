"""A database that cannot be reached answers 503 with Retry-After and the error envelope, so agents
and forges retry and whoever reads the logs knows why."""

from __future__ import annotations

import logging
import socket

import pytest
from fastapi.testclient import TestClient

from perfci_server import db
from perfci_server.app import create_app
from perfci_server.errors import DATABASE_RETRY_AFTER_SECONDS
from perfci_server.settings import get_settings
from tests.server.server_support import ADMIN, body_of, github_headers, push_payload


@pytest.fixture
def closed_port_database(monkeypatch: pytest.MonkeyPatch) -> str:
    """A PostgreSQL URL on a loopback port nothing listens on (the shared server keeps running)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql+psycopg://perfci:perfci@127.0.0.1:{port}/perfci?connect_timeout=2"
    monkeypatch.setenv("PERFCI_DATABASE_URL", url)
    get_settings.cache_clear()
    db.reset_engine()
    return url


@pytest.mark.parametrize(
    ("method", "path", "kind"),
    [
        ("GET", "/api/v1/machines", "reader"),
        ("POST", "/api/v1/repositories", "admin"),
        ("POST", "/api/v1/agent/jobs/claim", "agent"),
        ("POST", "/api/v1/webhooks/github", "forge"),
    ],
)
def test_database_outage_is_503_with_retry_after_and_the_envelope(closed_port_database, caplog, method, path, kind):
    body = body_of(push_payload())
    headers = {
        "reader": {},
        "admin": ADMIN,
        "agent": {"Authorization": "Bearer pca_" + "x" * 43},
        "forge": github_headers(body),
    }[kind]
    content = body if kind == "forge" else (b'{"name": "a/b", "forge": "github", "clone_url": "https://example.com/a/b.git"}' if kind == "admin" else None)
    with caplog.at_level(logging.WARNING, logger="perfci_server.errors"), TestClient(create_app()) as client:
        response = client.request(method, path, content=content, headers={**headers, "Content-Type": "application/json"})
    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"] == str(DATABASE_RETRY_AFTER_SECONDS)
    assert response.json() == {"error": {"code": "database_unavailable", "message": "the database is unavailable; retry later", "details": None}}
    assert any("database unavailable" in r.getMessage() and path in r.getMessage() for r in caplog.records)
