"""Detection is coalesced per machine: with a Redis broker at most one detection of a machine
waits in the queue (a mark set with NX next to the queue); the task clears the mark before it reads,
so an upload after that queues a new one; runs whose task was lost are resent by the beat sweep."""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis
from sqlalchemy import func, select, update

from tests.alerts.alerts_support import SIM, Lab, sim_values
from perfci_server import db, dispatch
from perfci_server.alerts import detection as alert_detection
from perfci_server.alerts import tasks as alert_tasks
from perfci_server.models import Job, Run, utcnow
from perfci_server.settings import get_settings
from tests.server.server_support import ADMIN

pytestmark = pytest.mark.services


@pytest.fixture
def redis_marks(redis_url, monkeypatch):
    """The server's settings name the Redis broker (tasks are still recorded by sent_tasks)."""
    client = redis.Redis.from_url(redis_url)
    client.delete(*client.keys("perfci.queued:*") or ["-"])
    monkeypatch.setenv("PERFCI_BROKER_URL", redis_url)
    get_settings.cache_clear()
    yield client
    client.delete(*client.keys("perfci.queued:*") or ["-"])
    client.close()


def _pending(machine_id):
    with db.session_scope() as s:
        return s.scalar(
            select(func.count()).select_from(Run).join(Job, Job.id == Run.job_id)
            .where(Job.machine_id == machine_id, Run.status == "ok", Run.detected_at.is_(None))
        )


def test_uploads_coalesce_into_one_waiting_detection_per_machine(committed_client, sent_tasks, redis_marks):
    session = db.new_session()
    lab = Lab(committed_client, session, sent_tasks, configs=(SIM,))
    one, two = lab.agent("dut-01"), lab.agent("dut-02")
    lab.push(3)
    lab.measure(lambda i, _: sim_values(81.72), one)
    lab.measure(lambda i, _: sim_values(81.72), two)
    m1, m2 = one["machine_id"], two["machine_id"]
    # Six uploads, two machines: one detection waits per machine, covering all of its runs.
    assert sent_tasks.named(alert_detection.DETECT_TASK) == [(m1,), (m2,)]
    assert (_pending(m1), _pending(m2)) == (3, 3)

    # The worker runs machine 1's task: every run it finds is analysed, the mark is gone.
    outcome = alert_tasks.detect_pending(m1)
    assert outcome["commits"] == 3 and _pending(m1) == 0
    lab.push(1)
    lab.measure(lambda i, _: sim_values(81.72), one)  # after the task started: a new detection
    lab.measure(lambda i, _: sim_values(81.72), two)  # machine 2's detection is still waiting: none
    assert sent_tasks.named(alert_detection.DETECT_TASK) == [(m1,), (m2,), (m1,)]
    assert (_pending(m1), _pending(m2)) == (1, 4)

    # Machine 2's task was lost (its mark stays until it expires): the beat sweep resends it once
    # its runs have waited long enough; machine 1's fresh run is left to its waiting task.
    with db.session_scope() as s:
        old = utcnow() - timedelta(seconds=get_settings().detection_straggler_seconds + 60)
        s.execute(update(Run).where(Run.job_id.in_(select(Job.id).where(Job.machine_id == m2))).values(received_at=old))
    assert alert_tasks.detect_stragglers() == [m2]
    assert sent_tasks.named(alert_detection.DETECT_TASK)[-1] == (m2,)
    assert alert_tasks.detect_pending(m2)["commits"] == 4 and _pending(m2) == 0
    assert alert_tasks.detect_stragglers() == []
    session.close()


def test_a_failed_send_leaves_no_mark_behind(committed_client, sent_tasks, redis_marks, monkeypatch):
    session = db.new_session()
    lab = Lab(committed_client, session, sent_tasks, configs=(SIM,))
    agent = lab.agent("dut-01")
    lab.push(2)
    attempts = []

    def broker_down_once(name, args):
        attempts.append(name)
        if len(attempts) == 1:
            raise ConnectionError("broker unreachable")
        sent_tasks.append((name, args))

    monkeypatch.setattr(dispatch, "sender", broker_down_once)
    lab.measure(lambda i, _: sim_values(81.72), agent)  # the first upload's send fails, the second's goes out
    assert attempts == [alert_detection.DETECT_TASK] * 2
    assert sent_tasks.named(alert_detection.DETECT_TASK) == [(agent["machine_id"],)]
    session.close()


def test_a_backlog_is_taken_in_batches(committed_client, sent_tasks, redis_marks, monkeypatch):
    monkeypatch.setattr(alert_detection, "PENDING_BATCH", 2)
    session = db.new_session()
    lab = Lab(committed_client, session, sent_tasks, configs=(SIM,))
    agent = lab.agent("dut-01")
    machine = agent["machine_id"]
    lab.push(3)
    lab.measure(lambda i, _: sim_values(81.72), agent)
    assert sent_tasks.named(alert_detection.DETECT_TASK) == [(machine,)]
    assert alert_tasks.detect_pending(machine)["commits"] == 2 and _pending(machine) == 1
    assert sent_tasks.named(alert_detection.DETECT_TASK) == [(machine,)] * 2  # the rest goes to the next task
    # the last run's commit, and the first commit again: it had no baseline, and is decided anew
    assert alert_tasks.detect_pending(machine)["commits"] == 2 and _pending(machine) == 0
    assert sent_tasks.named(alert_detection.DETECT_TASK) == [(machine,)] * 2
    session.close()


def test_a_redetection_requested_while_the_broker_is_down_is_done_by_the_sweep(client, session, sent_tasks, monkeypatch):
    """POST /alerts/detect answers 202; with the broker down its task is lost, but the request
    marked the series' newest runs for detection in its own transaction, so once the broker is
    back the straggler sweep sends detection and the series are examined again."""
    from tests.server.broker_outage import closed_port
    from celery import Celery

    lab = Lab(client, session, sent_tasks, configs=(SIM,))
    agent = lab.agent("dut-01")
    lab.push(8)
    lab.measure(lambda i, _: sim_values(100.0 if i < 4 else 103.0), agent)
    lab.detect()
    assert alert_detection.resend_stragglers(session, get_settings().model_copy(update={"detection_straggler_seconds": 1e-6})) == []

    dead = Celery("perfci-broker-down", broker=f"redis://127.0.0.1:{closed_port()}/0")
    monkeypatch.setattr(dispatch, "sender", lambda name, args: dead.send_task(name, args=args, retry=False))
    response = lab.client.post("/api/v1/alerts/detect", headers=ADMIN,
                               json={"repository_id": lab.repo["id"], "branch": "main", "machine_id": agent["machine_id"]})
    assert response.status_code == 202, response.text
    dead.close()

    monkeypatch.setattr(dispatch, "sender", lambda name, args: sent_tasks.append((name, args)))  # the broker is back
    sent_before = len(sent_tasks.named(alert_detection.DETECT_TASK))
    swept = alert_detection.resend_stragglers(session, get_settings().model_copy(update={"detection_straggler_seconds": 1e-6}))
    assert swept == [agent["machine_id"]]
    assert sent_tasks.named(alert_detection.DETECT_TASK)[sent_before:] == [(agent["machine_id"],)]
    assert alert_detection.detect_pending(session, agent["machine_id"], get_settings()).found == 1
