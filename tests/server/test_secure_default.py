"""Secure by default: without PERFCI_ENV, a server pointed at a database of its own
(PERFCI_DATABASE_URL) runs production rules and will not start on the public development token;
with the embedded database it runs development, but takes that token only on loopback connections."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from perfci_server import db, migrate
from perfci_server.app import create_app
from perfci_server.settings import Settings, get_settings
from tests.server.server_support import ADMIN
from tests.support.services import TEST_DATABASE_URL

LOOPBACK = {"client": ("127.0.0.1", 40000), "base_url": "http://127.0.0.1:8000"}
FROM_ANOTHER_HOST = {"client": ("192.0.2.7", 40000), "base_url": "http://198.51.100.1:8000"}


@pytest.fixture
def env_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PERFCI_ENV", raising=False)
    get_settings.cache_clear()
    db.reset_engine()


def test_a_database_url_without_perfci_env_is_production_and_refuses_the_public_token(env_unset, monkeypatch):
    monkeypatch.setenv("PERFCI_DATABASE_URL", TEST_DATABASE_URL)
    with pytest.raises(ValidationError, match="PERFCI_ENV is unset and PERFCI_DATABASE_URL is set"):
        Settings()
    monkeypatch.setenv("PERFCI_ADMIN_TOKEN", "a-real-secret-of-32-characters!!")
    settings = Settings()
    assert (settings.env, settings.reads_require_token, settings.development_token_loopback_only) == ("production", True, False)


def test_an_explicit_development_env_is_unchanged(monkeypatch):
    monkeypatch.setenv("PERFCI_DATABASE_URL", TEST_DATABASE_URL)  # conftest set PERFCI_ENV=development
    settings = Settings()
    assert (settings.env, settings.development_token_loopback_only) == ("development", False)


def _embedded_app() -> object:
    db.get_engine()
    migrate.upgrade()
    return create_app()


def test_the_embedded_default_takes_the_public_token_on_loopback_only(env_unset):
    assert get_settings().env == "development" and get_settings().development_token_loopback_only
    app = _embedded_app()
    with TestClient(app, **LOOPBACK) as client:
        assert client.post("/api/v1/configs", json={"name": "self-64B"}, headers=ADMIN).status_code == 201
    with TestClient(app, **FROM_ANOTHER_HOST) as client:
        response = client.post("/api/v1/configs", json={"name": "self-128B", "pkt_size": 128}, headers=ADMIN)
        assert response.status_code == 401, response.text
        assert "only taken on loopback connections" in response.json()["error"]["message"]
        assert client.get("/api/v1/configs").status_code == 200  # development reads stay open


def test_an_explicit_development_env_takes_the_public_token_from_anywhere():
    with TestClient(_embedded_app(), **FROM_ANOTHER_HOST) as client:
        assert client.post("/api/v1/configs", json={"name": "self-64B"}, headers=ADMIN).status_code == 201
