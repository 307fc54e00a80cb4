"""A push answered 202 while the broker is down is scheduled all the same: its jobs are written in
the push's own transaction, not left to a task that may never be sent."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from broker_outage import broker_down  # noqa: F401 - fixture
from perfci_server import db
from perfci_server.app import create_app
from perfci_server.models import Job
from perfci_server.repos import tasks as repo_tasks
from server_support import create_config, create_repository, enroll, push_github

pytestmark = pytest.mark.services


def _jobs() -> int:
    with db.session_scope() as session:
        return session.scalar(select(func.count()).select_from(Job)) or 0


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
