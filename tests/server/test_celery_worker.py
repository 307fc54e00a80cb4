"""A real Celery worker process, against the test Redis and PostgreSQL, runs the scheduling task."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from celery import Celery
from sqlalchemy import func, select

from perfci_server import db
from perfci_server.models import Commit, Job
from server_support import TEST_DATABASE_URL, create_config, create_repository, enroll, push_github

pytestmark = pytest.mark.services
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def worker(redis_url, committed, tmp_path):
    env = {
        **os.environ,
        "PERFCI_DATABASE_URL": TEST_DATABASE_URL,
        "PERFCI_BROKER_URL": redis_url,
        "PERFCI_ENV": "development",
        "PERFCI_DATA_DIR": str(tmp_path),
    }
    log = open(tmp_path / "worker.log", "w+")
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "perfci_server.celery_app", "worker", "--pool=solo", "-Q", "perfci", "--loglevel=info", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    yield process, log
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    log.close()


def test_worker_process_executes_schedule_push(committed_client, sent_tasks, worker, redis_url):
    process, log = worker
    client = committed_client
    create_repository(client)
    push_github(client)  # before any machine or config: the push itself queues no job
    create_config(client)
    enroll(client)
    with db.session_scope() as session:
        commit_ids = list(session.scalars(select(Commit.id).order_by(Commit.id)))

    producer = Celery("perfci-test", broker=redis_url)
    producer.send_task("perfci.jobs.schedule_push", args=(commit_ids,), queue="perfci")

    deadline = time.monotonic() + 45
    count = 0
    while time.monotonic() < deadline and process.poll() is None:
        with db.session_scope() as session:
            count = session.scalar(select(func.count()).select_from(Job)) or 0
        if count == len(commit_ids):
            break
        time.sleep(0.2)
    log.seek(0)
    assert count == len(commit_ids), f"worker did not schedule the jobs; its log:\n{log.read()[-4000:]}"
    producer.close()
