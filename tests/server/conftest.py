"""The server tests: the app over this worker's database (``client``, ``session``, ``committed``
... from :mod:`tests.support`), every test starting from development settings with no database or
broker configured."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from tests.server.server_support import complete_pushes, create_config, create_repository, enroll, push_github
from tests.support.server import SentTasks


@pytest.fixture(autouse=True)
def _isolated(isolated_settings: None) -> None:
    """Every test starts from development settings with no database or broker configured."""


@pytest.fixture
def queued_jobs(client: TestClient, session: Session, sent_tasks: SentTasks) -> dict[str, Any]:
    """A repository, a config and an enrolled agent; a 3-commit push, which queues 3 jobs."""
    repo = create_repository(client)
    create_config(client)
    agent = enroll(client)
    push_github(client)
    complete_pushes(session, sent_tasks)
    session.commit()
    return {"repo": repo, "agent": agent}
