"""The forge token goes to the forge's host only: a forge that answers 302 to another host never
hands that host the token. (With a global http.extraHeader, git moves its base URL to where the
first request was redirected and sends the header with every later request there.)"""

from __future__ import annotations

import base64
import functools
import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from perfci_server.models import Repository
from perfci_server.repos import mirror
from perfci_server.settings import Settings

TOKEN = "ghp_redirect_test_secret"


class Listener:
    """A loopback HTTP server recording each request's Authorization header. It answers 302 to
    the same file of the repository at ``redirect_to``, or serves ``repository`` (a bare one) over git's dumb HTTP protocol:
    static files, so a git that follows the redirect really fetches from it."""

    def __init__(self, *, redirect_to: str | None = None, repository: Path | None = None) -> None:
        self.authorizations: list[str | None] = []
        listener = self

        class Handler(SimpleHTTPRequestHandler):
            def do_GET(self) -> None:
                listener.authorizations.append(self.headers.get("Authorization"))
                if redirect_to is None:
                    self.path = self.path.split("?", 1)[0]  # info/refs?service=...: the dumb file
                    super().do_GET()
                    return
                self.send_response(302)
                self.send_header("Location", redirect_to + "/" + self.path.split(".git/", 1)[-1])
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        handler = functools.partial(Handler, directory=str(repository)) if repository else Handler
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _git(*args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "A", "GIT_AUTHOR_EMAIL": "a@example.com", "GIT_COMMITTER_NAME": "A", "GIT_COMMITTER_EMAIL": "a@example.com"}
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True, env={**os.environ, **env}).stdout.strip()


@pytest.fixture
def served_commit(tmp_path: Path) -> tuple[Path, str]:
    """A bare repository with one commit, ready for dumb HTTP, and that commit."""
    work, bare = tmp_path / "work", tmp_path / "served.git"
    _git("init", "--quiet", "--initial-branch=main", str(work))
    _git("-C", str(work), "commit", "--quiet", "--allow-empty", "-m", "one")
    _git("clone", "--quiet", "--bare", str(work), str(bare))
    _git("-C", str(bare), "update-server-info")
    return bare, _git("-C", str(work), "rev-parse", "HEAD")


@pytest.fixture
def elsewhere(served_commit: tuple[Path, str]) -> Iterator[Listener]:
    listener = Listener(repository=served_commit[0])
    yield listener
    listener.close()


@pytest.fixture
def forge(elsewhere: Listener) -> Iterator[Listener]:
    listener = Listener(redirect_to=elsewhere.url)
    yield listener
    listener.close()


def test_a_redirecting_forge_never_hands_the_token_to_the_other_host(tmp_path, forge, elsewhere, served_commit):
    settings = Settings(data_dir=tmp_path / "server", github_token=TOKEN, github_api_url=f"{forge.url}/api/v3")
    repository = Repository(id=1, forge="github", clone_url=f"{forge.url}/perfci-org/dataplane.git")

    try:
        mirror.fetch(settings, repository, served_commit[1], timeout=20)
        fetched = None
    except mirror.MirrorUnavailable as exc:
        fetched = str(exc)

    basic = "Basic " + base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    assert forge.authorizations and set(forge.authorizations) == {basic}  # the forge itself got it
    assert basic not in elsewhere.authorizations
    assert elsewhere.authorizations == []  # the redirect is not followed at all
    assert fetched is not None and "git fetch failed" in fetched


def test_the_token_is_scoped_to_the_forges_scheme_host_and_port():
    settings = Settings(github_token=TOKEN)
    env = mirror._credentials(settings, Repository(forge="github", clone_url="https://github.com/perfci-org/dataplane.git"))
    assert env["GIT_CONFIG_KEY_0"] == "http.https://github.com:443/.extraHeader"
    assert (env["GIT_CONFIG_KEY_1"], env["GIT_CONFIG_VALUE_1"]) == ("http.followRedirects", "false")
    for other in ("http://github.com/perfci-org/dataplane.git", "https://github.com:8443/perfci-org/dataplane.git",
                  "https://github.com.evil.example/perfci-org/dataplane.git"):
        assert mirror._credentials(settings, Repository(forge="github", clone_url=other)) == {}


def test_a_gitea_token_goes_to_the_gitea_host_only():
    settings = Settings(gitea_token="gitea-secret", gitea_api_url="http://127.0.0.1:3000/api/v1", github_token=TOKEN)
    env = mirror._credentials(settings, Repository(forge="gitea", clone_url="http://127.0.0.1:3000/perfci/dataplane.git"))
    assert env["GIT_CONFIG_KEY_0"] == "http.http://127.0.0.1:3000/.extraHeader"
    assert base64.b64decode(env["GIT_CONFIG_VALUE_0"].split()[-1]) == b"perfci:gitea-secret"
    assert mirror._credentials(settings, Repository(forge="gitea", clone_url="https://github.com/perfci-org/dataplane.git")) == {}
