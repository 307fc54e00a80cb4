"""A push answered 202 while the broker is down is scheduled all the same: its jobs are written in
the push's own transaction, not left to a task that may never be sent."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from perfci_server import db, dispatch
from perfci_server.app import create_app
from perfci_server.models import Job
from perfci_server.repos import tasks as repo_tasks
from perfci_server.settings import get_settings
from tests.server.broker_outage import closed_port
from tests.server.server_support import create_config, create_repository, enroll, push_github

pytestmark = pytest.mark.services


def _jobs() -> int:
    with db.session_scope() as session:
        return session.scalar(select(func.count()).select_from(Job)) or 0


@pytest.fixture
def broker_down(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every task the code sends goes to a dead broker (a Redis URL on a loopback port nothing
    listens on, and the real Celery publish, which retries briefly, then raises); yields the names
    whose send failed."""
    url = f"redis://127.0.0.1:{closed_port()}/0"
    producer = Celery("perfci-broker-down", broker=url)
    producer.conf.broker_connection_timeout = 1
    failed: list[str] = []

    def send(name: str, args: tuple[Any, ...]) -> None:
        try:
            producer.send_task(name, args=args, queue="perfci", retry=False)
        except Exception:
            failed.append(name)
            raise

    monkeypatch.setenv("PERFCI_BROKER_URL", url)  # the coalescing marks meet the same dead Redis
    get_settings.cache_clear()
    monkeypatch.setattr(dispatch, "sender", send)
    monkeypatch.setattr(dispatch, "_redis_clients", {})
    yield failed
    producer.close()


def test_a_push_during_a_broker_outage_has_its_jobs_and_an_agent_gets_them(committed, broker_down):
    """The push is recorded (incomplete) although its completion task cannot be sent; beat's sweep
    completes it (here the repository cannot be fetched: its listed commits get their jobs)."""
    with TestClient(create_app()) as client:
        create_repository(client)
        create_config(client)
        agent = enroll(client)
        response = push_github(client)
        assert response.status_code == 202, response.text
        assert _jobs() == 0
        assert repo_tasks.complete_pushes() == {"incomplete": 1, "completed": 0, "commits_added": 0}
        assert _jobs() == 3
        redelivery = push_github(client)  # the forge's "redeliver": nothing more to do, nothing lost
        assert (redelivery.status_code, redelivery.json()["status"]) == (200, "duplicate")
        claimed = client.post("/api/v1/agent/jobs/claim", headers=agent["headers"])
        assert claimed.status_code == 200, claimed.text
    assert _jobs() == 3
