"""A real Celery worker process, against the test Redis and PostgreSQL, runs the scheduling task."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from celery import Celery
from sqlalchemy import func, select

from perfci_server import db
from perfci_server.models import Job
from perfci_server.repos.service import COMPLETE_PUSH_TASK
from tests.server.server_support import create_config, create_repository, enroll, push_github

pytestmark = pytest.mark.services
ROOT = Path(__file__).resolve().parents[2]


def test_worker_process_completes_a_push(committed_client, sent_tasks, worker, redis_url):
    process, log = worker
    client = committed_client
    create_repository(client)
    create_config(client)
    enroll(client)
    push_github(client)  # answered at once: the push's completion is the worker's
    [(push_id,)] = sent_tasks.named(COMPLETE_PUSH_TASK)
    expected = 3  # the payload's three commits, with their jobs: the repository cannot be fetched from here

    producer = Celery("perfci-test", broker=redis_url)
    producer.send_task(COMPLETE_PUSH_TASK, args=(push_id,), queue="perfci")

    deadline = time.monotonic() + 45
    count = 0
    while time.monotonic() < deadline and process.poll() is None:
        with db.session_scope() as session:
            count = session.scalar(select(func.count()).select_from(Job)) or 0
        if count == expected:
            break
        time.sleep(0.2)
    log.seek(0)
    assert count == expected, f"worker did not schedule the jobs; its log:\n{log.read()[-4000:]}"
    producer.close()
