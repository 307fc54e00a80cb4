"""A real server under hostile bodies: `perfci server` (uvicorn) in its own process with production
settings on PostgreSQL, fed malformed and oversized bodies with a declared length and chunked, in
every encoding, on every operation of its own OpenAPI document. Its memory, read from /proc, stays
put, and no answer is a 5xx."""

from __future__ import annotations

import codecs
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from perfci_server import migrate
from tests.server.server_support import MACHINE, MACHINE_ID, scratch_database

pytestmark = pytest.mark.services

BIN = Path(sys.executable).parent
MB = 1024 * 1024
MALFORMED = b'{"name": "' + b"a" * (40 * MB)  # never closed: no parser could take it
ROUNDS = 12
NO_SUCH_ID = "999999"  # in every path: the sweeps must not revoke their own agent
GROWTH_LIMIT_MB = 100


class LiveServer:
    def __init__(self, proc: subprocess.Popen[bytes], base: str, log: Path, admin: dict[str, str]) -> None:
        self.proc, self.base, self.log, self.admin = proc, base, log, admin
        self.http = httpx.Client(base_url=base, timeout=120)
        self.agent: dict[str, str] = {}
        self.statuses: list[tuple[str, str, int]] = []

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.M).group(1)) / 1024

    def send(self, method: str, path: str, content: Any, headers: dict[str, str]) -> httpx.Response:
        response = self.http.request(method, path, content=content, headers={"Content-Type": "application/json", **headers})
        self.statuses.append((method, path, response.status_code))
        return response

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("live")
    admin_token = secrets.token_urlsafe(32)
    port = _free_port()
    with scratch_database("live_bodies") as database:
        migrate.upgrade(database)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PERFCI_")}
        env.update({"PERFCI_ENV": "production", "PERFCI_DATABASE_URL": database, "PERFCI_ADMIN_TOKEN": admin_token,
                    "PERFCI_DATA_DIR": str(tmp / "data"), "PERFCI_PORT": str(port)})
        log = tmp / "server.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([str(BIN / "perfci"), "server"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        server = LiveServer(proc, f"http://127.0.0.1:{port}", log, {"Authorization": f"Bearer {admin_token}"})
        try:
            _wait_until_up(server)
            server.agent = _enrolled_agent(server)
            yield server
        finally:
            server.http.close()
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _wait_until_up(server: LiveServer) -> None:
    for _ in range(300):
        if server.proc.poll() is not None:
            pytest.fail(f"the server exited with {server.proc.returncode}\n{server.tail()}", pytrace=False)
        try:
            if server.http.get("/api/v1/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    pytest.fail(f"the server did not answer\n{server.tail()}", pytrace=False)


def _enrolled_agent(server: LiveServer) -> dict[str, str]:
    token = server.http.post("/api/v1/enrollment-tokens", json={"note": "live"}, headers=server.admin).json()["token"]
    enrolled = server.http.post("/api/v1/agent/enroll", json={"enrollment_token": token, "name": "live-agent", "machine_id": MACHINE_ID,
                                                              "machine": MACHINE, "backends": ["sim"]})
    assert enrolled.status_code == 201, enrolled.text
    return {"Authorization": f"Bearer {enrolled.json()['token']}"}


def _chunked(body: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    """A generator: httpx sends it with Transfer-Encoding: chunked and no Content-Length."""
    for start in range(0, len(body), size):
        yield body[start:start + size]


def _caller(server: LiveServer, path: str) -> dict[str, str]:
    return server.agent if path.startswith("/api/v1/agent/") else server.admin


# The routes of the malformed rounds: the unauthenticated ones (enrollment, a webhook without a
# signature), an agent's and an admin's, the upload and the machine update that once answered 500.
ROUND_ROUTES = [("POST", "/api/v1/agent/enroll"), ("POST", "/api/v1/agent/heartbeat"), ("PUT", "/api/v1/agent/jobs/1/attempts/1/result"),
                ("POST", "/api/v1/repositories"), ("PATCH", "/api/v1/machines/1"), ("POST", "/api/v1/webhooks/github")]


def test_memory_stays_put_under_malformed_40_mb_bodies(live):
    for method, path in ROUND_ROUTES:  # warm up: every route once, so first-use allocations are in the baseline
        live.send(method, path, b'{"name": ', _caller(live, path))
    before = live.rss_mb()
    for n in range(ROUNDS):
        method, path = ROUND_ROUTES[n % len(ROUND_ROUTES)]
        content = MALFORMED if n % 2 == 0 else _chunked(MALFORMED)
        response = live.send(method, path, content, _caller(live, path))
        assert response.status_code == 413, (method, path, response.text)
        assert response.json()["error"]["code"] == "payload_too_large"
    after = live.rss_mb()
    print(f"server RSS {before:.0f} MB before, {after:.0f} MB after {ROUNDS} malformed 40 MB bodies (growth {after - before:+.1f} MB)")
    assert after - before < GROWTH_LIMIT_MB, f"RSS grew from {before:.0f} to {after:.0f} MB"
    assert live.proc.poll() is None


def _operations(live: LiveServer) -> list[tuple[str, str, dict[str, Any]]]:
    schema = live.http.get("/api/v1/openapi.json", headers=live.admin).json()
    found = [(method.upper(), path, operation) for path, operations in schema["paths"].items() for method, operation in operations.items()]
    assert len(found) >= 38
    return found


ENCODINGS = {
    "utf-8 BOM": codecs.BOM_UTF8, "utf-16-le": b"", "utf-16-be": b"", "utf-32-le": b"", "utf-32-be": b"",
    "utf-16-le BOM": codecs.BOM_UTF16_LE, "utf-16-be BOM": codecs.BOM_UTF16_BE,
    "utf-32-le BOM": codecs.BOM_UTF32_LE, "utf-32-be BOM": codecs.BOM_UTF32_BE,
}
DOCUMENT = '{"name": "x\ud800", "reason": "x\ud800", "repository": {"full_name": "x\ud800"}}'


def _encoded(name: str) -> bytes:
    codec = name.split()[0] if name != "utf-8 BOM" else "utf-8"
    return ENCODINGS[name] + DOCUMENT.encode(codec, "surrogatepass")


def test_no_encoding_on_any_route_is_a_server_error(live):
    for method, path, operation in _operations(live):
        url = re.sub(r"\{\w+\}", NO_SUCH_ID, path)
        for name in ENCODINGS:
            for caller in (_caller(live, path), {}):
                response = live.send(method, url, _encoded(name), caller)
                assert response.status_code < 500, (method, path, name, response.text)
                if "requestBody" in operation and (caller or not operation.get("security")):
                    assert response.status_code == 415, (method, path, name, response.text)


def test_no_oversized_body_on_any_route_is_a_server_error(live):
    for method, path, operation in _operations(live):
        url = re.sub(r"\{\w+\}", NO_SUCH_ID, path)
        documented = operation["responses"].get("413", {}).get("description", "")
        limit = int(re.search(r"(\d+) bytes", documented).group(1)) if "requestBody" in operation else MB
        body = b'{"name": "' + b"a" * limit + b'"}'
        for content in (body, _chunked(body)):
            response = live.send(method, url, content, _caller(live, path))
            assert response.status_code < 500, (method, path, response.text)
            if "requestBody" in operation:
                assert response.status_code == 413, (method, path, response.text)
                assert response.json()["error"]["details"]["limit"] == limit


def test_no_answer_at_all_was_a_server_error(live):
    """Runs last in this module: every request the tests above sent, warm-ups included."""
    assert live.statuses and not [s for s in live.statuses if s[2] >= 500]
    assert live.proc.poll() is None, live.tail()
