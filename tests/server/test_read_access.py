"""Reads are closed by default: open only with PERFCI_ENV=development (the demo runs it), elsewhere
they need an admin or API token unless PERFCI_READ_REQUIRES_TOKEN says otherwise."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from perfci_server import db
from perfci_server.app import create_app
from perfci_server.settings import Settings, get_settings

pytestmark = pytest.mark.services

TOKEN = "a-production-admin-token-of-32-chars"
READS = ("/api/v1/machines", "/api/v1/repositories", "/api/v1/configs", "/api/v1/agents", "/api/v1/alerts", "/api/v1/jobs")


def _client(monkeypatch: pytest.MonkeyPatch, **env: str) -> TestClient:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    db.reset_engine()
    return TestClient(create_app())


@pytest.mark.parametrize("env", ["production", "test"])
def test_reads_need_a_token_outside_development(monkeypatch, pg_settings, env):
    client = _client(monkeypatch, PERFCI_ENV=env, PERFCI_ADMIN_TOKEN=TOKEN)
    for path in READS:
        assert client.get(path).status_code == 401, path
        assert client.get(path, headers={"Authorization": "Bearer wrong-token"}).status_code == 401, path
        assert client.get(path, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200, path


def test_reads_are_open_in_development(monkeypatch, pg_settings):
    client = _client(monkeypatch, PERFCI_ENV="development")
    for path in READS:
        assert client.get(path).status_code == 200, path


def test_an_explicit_setting_wins_either_way(monkeypatch, pg_settings):
    opened = _client(monkeypatch, PERFCI_ENV="production", PERFCI_ADMIN_TOKEN=TOKEN, PERFCI_READ_REQUIRES_TOKEN="false")
    assert opened.get("/api/v1/machines").status_code == 200
    closed = _client(monkeypatch, PERFCI_ENV="development", PERFCI_READ_REQUIRES_TOKEN="true")
    assert closed.get("/api/v1/machines").status_code == 401


def test_the_default_follows_the_environment():
    assert Settings(env="development").reads_require_token is False
    assert Settings(env="production", admin_token=TOKEN).reads_require_token is True
    assert Settings(env="test", admin_token=TOKEN).reads_require_token is True
