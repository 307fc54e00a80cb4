"""One forge that hangs costs only its own repositories: with two worker processes, a push to a
repository on another forge is completed while the hanging forge still holds its fetch, and the
pushes queued behind that fetch wait for a slot instead of taking the other worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from celery import Celery
from sqlalchemy import select

from perfci_server import db
from perfci_server.models import Push
from perfci_server.repos.service import COMPLETE_PUSH_TASK
from tests.server.git_forge import GitForge, HangingForge
from tests.server.server_support import ADMIN, SECRET, body_of, create_config, enroll, fixture, github_headers
from tests.support.services import TEST_DATABASE_URL

pytestmark = pytest.mark.services
ROOT = Path(__file__).resolve().parents[2]
ZERO = "0" * 40
HANG_S = 90  # how long the hanging forge's fetch may take: far longer than anything else here


def _bare(forge: GitForge, tmp_path: Path, name: str) -> Path:
    bare = tmp_path / f"{name}.git"
    subprocess.run(["git", "clone", "--quiet", "--bare", str(forge.path), str(bare)], check=True)
    subprocess.run(["git", "-C", str(bare), "update-server-info"], check=True)
    return bare


def _push(client, forge: GitForge, name: str, before: str, after: str, delivery: str) -> int:
    payload = fixture("github_push.json")
    listed = [forge.forge_commit(after)]
    payload.update(ref="refs/heads/main", before=before, after=after, commits=listed, head_commit=listed[0],
                   repository={**payload["repository"], "full_name": name})
    body = body_of(payload)
    assert client.post("/api/v1/webhooks/github", content=body, headers=github_headers(body, delivery=delivery)).status_code == 202
    with db.session_scope() as session:
        return session.scalar(select(Push.id).where(Push.after == after).order_by(Push.id.desc()).limit(1))


@pytest.fixture
def two_workers(redis_url, committed, tmp_path):
    import redis

    queue = redis.Redis.from_url(redis_url)
    queue.flushdb()  # no task or fetch slot of an earlier test
    env = {**os.environ, "PERFCI_DATABASE_URL": TEST_DATABASE_URL, "PERFCI_BROKER_URL": redis_url, "PERFCI_ENV": "development",
           "PERFCI_DATA_DIR": str(tmp_path / "server"), "PERFCI_MIRROR_FETCH_TIMEOUT_SECONDS": str(HANG_S)}
    log = open(tmp_path / "worker.log", "w+")
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "perfci_server.celery_app", "worker", "--concurrency=2", "-Q", "perfci",
         "--loglevel=info", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    yield process, log
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    log.close()
    queue.flushdb()  # the hanging forge's pushes keep coming back for a slot: none is left for the next test
    queue.close()


def test_a_hanging_forge_stalls_only_its_own_repositories(committed_client, sent_tasks, two_workers, redis_url, tmp_path):
    process, log = two_workers
    client = committed_client
    slow, quick = GitForge(tmp_path / "slow"), GitForge(tmp_path / "quick")
    slow_base, *slow_pushed = slow.commit(4)
    quick_base, quick_head = quick.commit(2, "docs: the other repository")
    hanging, answering = HangingForge(_bare(slow, tmp_path, "slow")), HangingForge(_bare(quick, tmp_path, "quick"))
    producer = Celery("perfci-test", broker=redis_url)
    try:
        for name, url in (("team/slow", hanging.url), ("team/quick", answering.url)):
            body = {"name": name, "forge": "github", "clone_url": url, "webhook_secret": SECRET}
            assert client.post("/api/v1/repositories", json=body, headers=ADMIN).status_code == 201
        create_config(client)
        enroll(client)
        hanging.hanging.set()
        slow_ids = [_push(client, slow, "team/slow", before, after, f"slow-{i}")
                    for i, (before, after) in enumerate(zip([slow_base, *slow_pushed], slow_pushed))]
        for push_id in slow_ids:  # the hanging forge's pushes reach the workers first
            producer.send_task(COMPLETE_PUSH_TASK, args=(push_id,), queue="perfci")
        deadline = time.monotonic() + 60
        while hanging.requests == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert hanging.requests >= 1, "the hanging forge was never asked"
        delivered = time.monotonic()
        quick_id = _push(client, quick, "team/quick", quick_base, quick_head, "quick-0")
        producer.send_task(COMPLETE_PUSH_TASK, args=(quick_id,), queue="perfci")

        def state(push_id: int) -> bool:
            with db.session_scope() as session:
                return bool(session.get(Push, push_id).complete)

        deadline = time.monotonic() + HANG_S / 2
        while not state(quick_id) and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.2)
        log.seek(0)
        assert state(quick_id), f"the other forge's push waited on the hanging one; worker log:\n{log.read()[-4000:]}"
        # The figure, not a verdict (a busy host may take longer): `pytest -s -k forge_fairness` prints it.
        print(f"\nthe other forge's push was complete {time.monotonic() - delivered:.1f} s after its delivery")
        assert hanging.hanging.is_set() and not any(state(i) for i in slow_ids)  # it was done while the forge still hung
        assert hanging.requests == 1  # one fetch held the forge's one slot; the others waited for it
        log.seek(0)
        assert "every fetch slot of 127.0.0.1" in log.read()
    finally:
        producer.close()
        hanging.close()
        answering.close()
