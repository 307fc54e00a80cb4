"""One log line per request: method, the route's template (never the path with its ids), status,
latency and, for a webhook, the forge's delivery id; never the query string, a header or a body.
In the app, and from a real `perfci server` in production (JSON by default, two uvicorn worker
processes, no access-log duplicate)."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.server.broker_outage import closed_port
from perfci_server.logs import FIELDS, JsonFormatter, TextFormatter
from perfci_server.request_log import RequestLog
from tests.server.server_support import ADMIN, SECRET, body_of, create_repository, fixture, github_headers
from tests.support.services import TEST_DATABASE_URL

pytestmark = pytest.mark.services

SECRET_QUERY = "token=hunter2-query-secret"


def _request_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "perfci.request"]


def test_each_request_is_one_line_naming_its_route_template(client, caplog):
    create_repository(client)
    caplog.clear()
    caplog.set_level(logging.INFO, logger="perfci.request")
    body = body_of(fixture("github_ping.json"))
    answers = [
        client.get(f"/api/v1/alerts/987654321?{SECRET_QUERY}", headers=ADMIN),
        client.post("/api/v1/webhooks/github", content=body, headers=github_headers(body, event="ping", delivery="d-observe-7")),
        client.get("/no/such/route/424242"),
        client.get("/api/v1/health"),
    ]
    assert [a.status_code for a in answers] == [404, 200, 404, 200]
    lines = _request_lines(caplog)
    assert [(r.perfci_fields["method"], r.perfci_fields["route"], r.perfci_fields["status"]) for r in lines] == [
        ("GET", "/api/v1/alerts/{group_id}", 404),
        ("POST", "/api/v1/webhooks/github", 200),
        ("GET", None, 404),  # unmatched: no route, and the raw path is not written either
        ("GET", "/api/v1/health", 200),
    ]
    assert all(r.perfci_fields["duration_ms"] >= 0 for r in lines)
    assert lines[1].perfci_fields["delivery_id"] == "d-observe-7"
    assert "delivery_id" not in lines[0].perfci_fields  # only webhooks carry one
    assert all(r.levelno == logging.INFO and r.getMessage() == "request" for r in lines)
    written = "\n".join(formatter.format(r) for r in lines for formatter in (TextFormatter(), JsonFormatter()))
    for secret in ("987654321", "hunter2", "424242", ADMIN["Authorization"].split()[1], SECRET):
        assert secret not in written


def test_the_json_line_and_the_text_line_carry_the_same_fields(client, caplog):
    caplog.set_level(logging.INFO, logger="perfci.request")
    client.get("/api/v1/health")
    [record] = _request_lines(caplog)
    line = json.loads(JsonFormatter().format(record))
    assert set(line) == {"timestamp", "level", "logger", "message", "method", "route", "status", "duration_ms", "client"}
    assert (line["level"], line["logger"], line["message"], line["method"], line["route"], line["status"]) == (
        "info", "perfci.request", "request", "GET", "/api/v1/health", 200)
    assert line["timestamp"].endswith("Z") and "T" in line["timestamp"]
    text = TextFormatter().format(record)
    assert text.split()[1:4] == ["INFO", "perfci.request", "request"]
    pairs = dict(part.split("=", 1) for part in text.split()[4:])
    assert pairs == {"method": "GET", "route": "/api/v1/health", "status": "200", "duration_ms": str(line["duration_ms"]),
                     "client": "testclient"}


def test_a_value_with_spaces_or_line_breaks_stays_on_one_text_line():
    record = logging.LogRecord("perfci.request", logging.INFO, __file__, 1, "request", None, None)
    setattr(record, FIELDS, {"delivery_id": 'forged\n2025-01-01 ERROR x="y"', "route": None})
    text = TextFormatter().format(record)
    assert "\n" not in text
    assert text.endswith('delivery_id="forged\\n2025-01-01 ERROR x=\\"y\\"" route=-')


def test_an_application_that_raises_is_a_500_line_at_error_level(caplog):
    async def broken(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("boom")

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        pass

    caplog.set_level(logging.INFO, logger="perfci.request")
    scope = {"type": "http", "method": "GET", "path": "/api/v1/jobs/12", "headers": [], "client": ("10.0.0.9", 4711)}
    with pytest.raises(RuntimeError, match="boom"):
        anyio.run(RequestLog(broken), scope, receive, send)
    [record] = _request_lines(caplog)
    assert (record.levelno, record.perfci_fields["status"], record.perfci_fields["route"], record.perfci_fields["client"]) == (
        logging.ERROR, 500, None, "10.0.0.9")


# --- a real `perfci server` -------------------------------------------------------------------


@pytest.fixture
def production_server(committed, tmp_path):
    """`perfci server --workers 2` in production against the test database; yields its URL and log."""
    port = closed_port()
    env = {**os.environ, "PERFCI_ENV": "production", "PERFCI_DATABASE_URL": TEST_DATABASE_URL,
           "PERFCI_ADMIN_TOKEN": "observe-admin-token-0123456789", "PERFCI_METRICS_TOKEN": "observe-metrics-token-0123456789",
           "PERFCI_DATA_DIR": str(tmp_path / "data")}
    for name in ("PERFCI_LOG_FORMAT", "PERFCI_LOG_LEVEL", "PERFCI_BROKER_URL"):
        env.pop(name, None)
    log_path = tmp_path / "server.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen([str(Path(sys.executable).parent / "perfci"), "server", "--port", str(port), "--workers", "2",
                                    "--no-migrate"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if httpx.get(f"{url}/api/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        else:
            pytest.fail(f"perfci server did not answer; its log:\n{log_path.read_text()[-4000:]}")
        yield url, log_path
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _lines(log_path: Path) -> list[dict[str, Any]]:
    text = log_path.read_text()
    lines = []
    for raw in text.splitlines():
        try:
            lines.append(json.loads(raw))
        except ValueError:
            pytest.fail(f"not a JSON line: {raw!r}\nthe log:\n{text[-4000:]}")
    return lines


def test_a_production_server_writes_one_json_line_per_request_and_nothing_else(production_server):
    url, log_path = production_server
    admin = {"Authorization": "Bearer observe-admin-token-0123456789"}
    with httpx.Client(base_url=url, timeout=30) as http:
        created = http.post("/api/v1/repositories", headers=admin, json={
            "name": "perfci-org/dataplane", "forge": "github", "clone_url": "https://example.com/d.git", "webhook_secret": SECRET})
        assert created.status_code == 201, created.text
        body = body_of(fixture("github_ping.json"))
        ping = http.post("/api/v1/webhooks/github", content=body, headers=github_headers(body, event="ping", delivery="d-prod-1"))
        assert ping.status_code == 200, ping.text
        assert http.get(f"/api/v1/alerts/31337?{SECRET_QUERY}", headers=admin).status_code == 404
        assert http.get("/metrics").status_code == 401  # production: a token for reads, /metrics included
        scraped = http.get("/metrics", headers={"Authorization": "Bearer observe-metrics-token-0123456789"})
        assert scraped.status_code == 200 and "perfci_database_up 1.0" in scraped.text
        assert http.get("/api/v1/jobs", headers={"Authorization": "Bearer observe-metrics-token-0123456789"}).status_code == 401
    def requests() -> list[tuple[str, str, int]]:
        return sorted((line["method"], line["route"], line["status"]) for line in _lines(log_path)
                      if line["message"] == "request" and line["route"] != "/api/v1/health")

    deadline = time.monotonic() + 10  # a line is written once its response is sent: let the last one reach the file
    while time.monotonic() < deadline and len(requests()) < 6:
        time.sleep(0.2)
    lines = _lines(log_path)
    assert all({"timestamp", "level", "logger", "message"} <= set(line) for line in lines)
    assert any("Uvicorn running" in line["message"] for line in lines)  # uvicorn's own lines are JSON too
    assert not any(line["logger"] == "uvicorn.access" for line in lines)
    # two worker processes write to one stream: the order of lines is the order they finished writing
    assert requests() == sorted([
        ("POST", "/api/v1/repositories", 201),
        ("POST", "/api/v1/webhooks/github", 200),
        ("GET", "/api/v1/alerts/{group_id}", 404),
        ("GET", "/metrics", 401),
        ("GET", "/metrics", 200),
        ("GET", "/api/v1/jobs", 401),
    ])
    [webhook] = [line for line in lines if line.get("route") == "/api/v1/webhooks/github"]
    assert webhook["delivery_id"] == "d-prod-1" and webhook["duration_ms"] >= 0 and webhook["level"] == "info"
    text = log_path.read_text()
    for secret in ("31337", "hunter2", "observe-admin-token", "observe-metrics-token", SECRET):
        assert secret not in text
