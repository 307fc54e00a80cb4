"""Builders shared by the server tests: payloads shaped like the real thing, result documents."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from perfci_server.forge.github import signature as github_signature
from perfci_server.settings import get_settings
from tests.support.services import BASE_DATABASE_URL, WORKER, database_name, database_url


@contextmanager
def scratch_database(suffix: str) -> Iterator[str]:
    """The URL of an empty PostgreSQL database (not a clone of the template: for the tests of the
    migrations themselves), dropped afterwards. Named after the test database, the xdist worker and
    ``suffix``, so no two runs or workers collide."""
    scratch = database_name(WORKER, suffix)
    admin = create_engine(BASE_DATABASE_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {scratch} WITH (FORCE)"))
            conn.execute(text(f"CREATE DATABASE {scratch}"))
        yield database_url(scratch)
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {scratch} WITH (FORCE)"))
    finally:
        admin.dispose()


FIXTURES = Path(__file__).parent / "fixtures"
ADMIN = {"Authorization": "Bearer perfci-development-admin-token"}
MACHINE = {"cpu_model": "Intel(R) Xeon(R) Gold 6338", "cores": 32, "kernel": "6.1.0-18-amd64", "governor": "performance", "turbo": False}
MACHINE_ID = hashlib.sha256(json.dumps(MACHINE, sort_keys=True).encode()).hexdigest()
GITHUB_COMMITS = [
    "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c",
    "5b3c8e8a6f1d4c2b9a7e6d5c4b3a2f1e0d9c8b7a",
    "a3c1f9b2e4d5c6b7a8f9e0d1c2b3a4f5e6d7c8b9",
]
GITHUB_BEFORE = "6113728f27ae82c7b1a177c8d03f9e96e0adf246"
SECRET = "s3cret-webhook-key-for-tests"


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def github_headers(body: bytes, event: str = "push", delivery: str = "72d3162e-cc78-11e3-81ab-4c9367dc0958", secret: str = SECRET) -> dict[str, str]:
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": github_signature(secret, body),
        "X-GitHub-Hook-ID": "109948940",
        "User-Agent": "GitHub-Hookshot/044aadd",
        "Content-Type": "application/json",
    }


def push_payload(**changes: Any) -> dict[str, Any]:
    payload = copy.deepcopy(fixture("github_push.json"))
    payload.update(changes)
    return payload


def body_of(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload).encode()


def create_repository(client: Any, name: str = "perfci-org/dataplane", forge: str = "github") -> dict[str, Any]:
    response = client.post(
        "/api/v1/repositories",
        json={"name": name, "forge": forge, "clone_url": f"https://example.com/{name}.git", "webhook_secret": SECRET},
        headers=ADMIN,
    )
    assert response.status_code == 201, response.text
    return response.json()


def create_config(client: Any, name: str = "self-64B", **fields: Any) -> dict[str, Any]:
    response = client.post("/api/v1/configs", json={"name": name, **fields}, headers=ADMIN)
    assert response.status_code == 201, response.text
    return response.json()


def enroll(client: Any, name: str = "agent-1", machine: dict[str, Any] | None = None, backends: list[str] | None = None) -> dict[str, Any]:
    machine = machine or MACHINE
    machine_id = hashlib.sha256(json.dumps(machine, sort_keys=True).encode()).hexdigest()
    token = client.post("/api/v1/enrollment-tokens", json={"note": name}, headers=ADMIN).json()["token"]
    response = client.post(
        "/api/v1/agent/enroll",
        json={
            "enrollment_token": token,
            "name": name,
            "machine_id": machine_id,
            "machine": machine,
            "backends": backends or ["tsc", "sim"],
        },
    )
    assert response.status_code == 201, response.text
    enrolled = response.json()
    enrolled["headers"] = {"Authorization": f"Bearer {enrolled['token']}"}
    enrolled["fingerprint"] = machine_id
    return enrolled


def complete_pushes(session: Any, sent_tasks: Any, done: int = 0) -> int:
    """Run the push completions the webhooks sent since ``done`` as the completion task does
    (fetch the mirror, then record the range; a failed fetch places the payload's commits), in the
    test's session; returns how many completions were sent so far."""
    from contextlib import nullcontext

    from perfci_server.repos import service as repo_service
    from perfci_server.repos.tasks import complete_one

    sent = sent_tasks.named(repo_service.COMPLETE_PUSH_TASK)
    for (push_id,) in sent[done:]:
        complete_one(push_id, get_settings(), 30, sessions=lambda: nullcontext(session))
    session.flush()
    return len(sent)


def push_github(client: Any, payload: dict[str, Any] | None = None, delivery: str = "d-1") -> Any:
    body = body_of(payload or push_payload())
    return client.post("/api/v1/webhooks/github", content=body, headers=github_headers(body, delivery=delivery))


def result_document(
    commit: str,
    *,
    config: dict[str, Any] | None = None,
    machine_id: str = MACHINE_ID,
    reps: int = 5,
    values: dict[str, list[float]] | None = None,
    status: str = "ok",
    backend: str = "tsc",
) -> dict[str, Any]:
    """A document shaped like `perfci measure --json`; ``values`` maps metric -> one value per rep."""
    bench = {"name": "self-64B", "harness": "self", "pkt_size": 64, "flows": 1024, "routes": "default", "packets": 2_000_000, "warmup": 200_000}
    bench.update(config or {})
    values = values if values is not None else {"cpp": [7.61, 7.72, 7.58, 7.9, 7.66][:reps], "pps": [3.1e7, 3.05e7, 3.12e7, 2.99e7, 3.08e7][:reps]}
    samples = [
        {
            "rep": rep,
            "raw": {"tsc.packets": 2_000_000.0, "tsc.busy_cycles": 15_220_000.0 + rep, "tsc.window_cycles": 16_000_000.0, "tsc.tsc_hz": 2.1e9, "pmu.cycles": None},
            "running_pct": {},
            "metrics": [{"metric": name, "backend": backend, "value": series[rep]} for name, series in values.items()],
        }
        for rep in range(reps)
    ]
    now = datetime.now(UTC).isoformat()
    document: dict[str, Any] = {
        "schema": "perfci.result/1",
        "status": status,
        "commit": commit,
        "config": bench,
        "backend": backend,
        "machine": MACHINE,
        "machine_id": machine_id,
        "samples": samples if status == "ok" else [],
        "started_at": now,
        "finished_at": now,
    }
    if status != "ok":
        document["reason"] = "meson: compile error in fwd.c"
    return document
