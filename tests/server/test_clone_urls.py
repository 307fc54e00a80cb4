"""Clone URLs: what git fetches over the network (http(s), ssh, scp-like); a repository on the
server's own disk (file://, a path) only when the server is told to allow it."""

from __future__ import annotations

import pytest

from perfci_server.settings import get_settings
from tests.server.server_support import ADMIN, SECRET

pytestmark = pytest.mark.services

REMOTE = ["https://github.com/perfci-org/dataplane.git", "http://git.internal:3000/net/dataplane.git",
          "ssh://git@gitlab.example.com:2222/net/dataplane.git", "git@github.com:perfci-org/dataplane.git",
          "git@host:/srv/git/dataplane.git"]
LOCAL = ["file:///srv/git/dataplane.git", "/srv/git/dataplane.git", "../dataplane"]
NEVER = ["git://github.com/perfci-org/dataplane.git", "ext::sh -c touch% /tmp/pwned", "-uhttps://x", "https:///no-host",
         "https://github.com/a b.git"]


def _create(client, clone_url: str):
    body = {"name": "perfci-org/dataplane", "forge": "github", "clone_url": clone_url, "webhook_secret": SECRET}
    return client.post("/api/v1/repositories", json=body, headers=ADMIN)


@pytest.mark.parametrize("url", REMOTE)
def test_network_clone_urls_are_taken(client, sent_tasks, url):
    response = _create(client, url)
    assert response.status_code == 201, response.text
    assert response.json()["clone_url"] == url


@pytest.mark.parametrize("url", LOCAL + NEVER)
def test_local_and_other_transports_are_refused_by_default(client, sent_tasks, url):
    response = _create(client, url)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["details"][0]["loc"] == ["body", "clone_url"]
    if url in LOCAL:
        assert "PERFCI_ALLOW_LOCAL_CLONE_URLS" in error["message"]


@pytest.mark.parametrize("url", LOCAL)
def test_local_clone_urls_with_the_setting(client, sent_tasks, monkeypatch, url):
    monkeypatch.setenv("PERFCI_ALLOW_LOCAL_CLONE_URLS", "true")
    get_settings.cache_clear()
    assert _create(client, url).status_code == 201


@pytest.mark.parametrize("url", NEVER)
def test_other_transports_stay_refused_with_the_setting(client, sent_tasks, monkeypatch, url):
    monkeypatch.setenv("PERFCI_ALLOW_LOCAL_CLONE_URLS", "true")
    get_settings.cache_clear()
    assert _create(client, url).status_code == 422


@pytest.mark.parametrize("url", ["https://x-access-token:ghp_0123456789abcdefghij@github.com/perfci-org/dataplane.git",
                                 "https://ghp_0123456789abcdefghijklmn@github.com/perfci-org/dataplane.git",
                                 "http://perfci:s3cret@git.internal:3000/net/dataplane.git",
                                 "ssh://git:s3cret@gitlab.example.com/net/dataplane.git"])
def test_credentials_never_enter_a_clone_url(client, sent_tasks, url):
    """Every API token holder reads clone URLs back: a token there would leave the server. The
    answer says where a token belongs instead."""
    response = _create(client, url)
    assert response.status_code == 422
    assert "PERFCI_<FORGE>_TOKEN" in response.text and "s3cret" not in response.text and "ghp_0123" not in response.text
