"""The production path with real parts: webhook → a real Celery worker schedules the jobs → an
enrolled agent uploads through the API → the upload's hook sends detection to the worker → alert
group at the right commit with its explanation → commit statuses posted to a recording forge
(through two 503s). Then a duplicate upload and a re-detection: still one group, one alert.
And concurrent detection of the same series: the advisory lock keeps it to one group."""

from __future__ import annotations

import json
import threading
import time

import pytest
from celery import Celery
from sqlalchemy import func, select

from tests.alerts.alerts_support import SIM, Lab, push_commits, sha_of, sim_values
from tests.alerts.forge_server import ForgeServer
from perfci_server import db, dispatch
from perfci_server.alerts import detection as alert_detection
from perfci_server.models import Alert, AlertGroup, Commit, CommitStatus, Job, Run
from perfci_server.settings import get_settings
from tests.server.server_support import ADMIN

pytestmark = pytest.mark.services
STEP = 9
N = 16
TOKEN = "ghp_" + "e" * 36


@pytest.fixture
def forge():
    with ForgeServer() as server:
        server.script.extend([503, 503])  # the forge hiccups first
        yield server


@pytest.fixture
def forge_env(forge, monkeypatch):
    """The worker (started by the server tests' fixture from this environment) posts statuses to the recording forge."""
    monkeypatch.setenv("PERFCI_GITHUB_API_URL", forge.url)
    monkeypatch.setenv("PERFCI_GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("PERFCI_FORGE_RETRY_BACKOFF_SECONDS", "0.2")


@pytest.fixture
def to_worker(redis_url, sent_tasks, monkeypatch):
    """Tasks leave through dispatch.sender to the Redis broker (recorded too)."""
    producer = Celery("perfci-test", broker=redis_url)

    def send(name, args):
        sent_tasks.append((name, args))
        producer.send_task(name, args=args, queue="perfci")

    monkeypatch.setattr(dispatch, "sender", send)
    yield sent_tasks
    producer.close()


def _wait(what, condition, worker, timeout=120.0):
    process, log = worker
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        value = condition()
        if value:
            return value
        time.sleep(0.3)
    log.seek(0)
    pytest.fail(f"timed out waiting for {what}; worker log:\n{log.read()[-5000:]}")


def _count(model):
    with db.session_scope() as s:
        return s.scalar(select(func.count()).select_from(model)) or 0


@pytest.mark.usefixtures("forge_env")  # before `worker` copies the environment
def test_upload_to_alert_to_forge_status_through_a_real_worker(committed_client, to_worker, worker, forge):
    client = committed_client
    session = db.new_session()
    lab = Lab(client, session, to_worker, configs=(SIM,))
    agent = lab.agent("dut-01")
    subjects = [f"fwd: tidy {i}" for i in range(N)]
    subjects[STEP] = "fwd: copy the header twice"
    # The webhook's scheduling task runs in the worker (Lab.push would schedule in-process; don't).
    shas = [sha_of(i, "e2e") for i in range(N)]
    lab.shas["main"] = shas
    push_commits(client, shas, "6113728f27ae82c7b1a177c8d03f9e96e0adf246", subjects=subjects)
    _wait("the worker to schedule the jobs", lambda: _count(Job) == N, worker)

    lab.measure(lambda i, _: sim_values(81.72 * (1.029 if i >= STEP else 1.0)), agent)
    assert len(to_worker.named(alert_detection.DETECT_TASK)) == N  # one per upload, sent after commit

    def one_group():
        items = client.get("/api/v1/alerts").json()["items"]
        return items if items and _count(CommitStatus) == N else None

    [group] = _wait("detection to alert", one_group, worker)
    assert (group["first_bad"]["sha"], group["last_good"]["sha"]) == (shas[STEP], shas[STEP - 1])
    assert group["first_bad"]["subject"] == "fwd: copy the header twice"
    assert group["explanation"]["cause"] == "instructions" and "IPP +2.9 %" in group["summary"]
    [alert] = group["alerts"]
    assert (alert["metric"], alert["backend"], alert["change_pct"]) == ("ipp", "sim", pytest.approx(2.9))

    # Every measured commit gets its status on the forge, despite the two 503s (retried with backoff).
    def newest() -> dict[str, dict]:  # the newest accepted post per commit: pending once its job was queued, then its verdict
        return {r.path.rsplit("/", 1)[1]: r.body for r in forge.accepted()}

    _wait("every verdict to be posted",
          lambda: len(newest()) == N and all(b["state"] != "pending" for b in newest().values()), worker)
    posted = newest()
    assert posted[shas[STEP]]["state"] == "failure" and "regression: ipp +2.90%" in posted[shas[STEP]]["description"]
    assert posted[shas[0]]["state"] == "error"  # the first measured commit has no baseline: no verdict, never success
    assert {posted[s]["state"] for s in shas[1:] if s != shas[STEP]} == {"success"}
    assert [r.answered for r in forge.requests[:2]] == [503, 503]
    _wait("deliveries to be recorded", lambda: _sent_count() == N, worker)

    # A retried upload is a duplicate (no new detection); a re-detection changes nothing.
    detections = len(to_worker.named(alert_detection.DETECT_TASK))
    claim_again = _reupload_first(client, agent, session, shas[0])
    assert claim_again.status_code == 200 and claim_again.json()["duplicate"] is True
    assert len(to_worker.named(alert_detection.DETECT_TASK)) == detections
    detected = _log(worker).count("detection for 1 run(s) of machine")
    response = client.post("/api/v1/alerts/detect", json={"repository_id": lab.repo["id"], "branch": "main",
                                                          "machine_id": agent["machine_id"]}, headers=ADMIN)
    assert response.status_code == 202
    _wait("the re-detection", lambda: _log(worker).count("detection for 1 run(s) of machine") > detected, worker)
    assert (_count(AlertGroup), _count(Alert)) == (1, 1)
    assert client.get("/api/v1/alerts").json()["items"][0]["alerts"] == group["alerts"]
    session.close()


def _sent_count():
    with db.session_scope() as s:
        return s.scalar(select(func.count()).select_from(CommitStatus).where(CommitStatus.delivery == "sent"))


def _log(worker):
    _, log = worker
    log.seek(0)
    return log.read()


def _reupload_first(client, agent, session, sha):
    """Send the first commit's document again, as an agent retrying after a lost response would."""
    from perfci_server.models import Run

    run, job = session.execute(
        select(Run, Job).join(Job, Job.id == Run.job_id).join(Commit, Commit.id == Job.commit_id).where(Commit.sha == sha)
    ).one()
    return client.put(f"/api/v1/agent/jobs/{job.id}/attempts/{run.attempt}/result", content=json.dumps(_SENT[sha]),
                      headers={**agent["headers"], "Content-Type": "application/json"})


_SENT: dict[str, dict] = {}


@pytest.fixture(autouse=True)
def _remember_documents(monkeypatch):
    """Keep each uploaded document so a retry can send exactly the same content."""
    from tests.alerts import alerts_support

    real = alerts_support.document

    def remembering(commit, *args, **kwargs):
        doc = real(commit, *args, **kwargs)
        _SENT[commit] = doc
        return doc

    monkeypatch.setattr(alerts_support, "document", remembering)
    yield
    _SENT.clear()


def test_concurrent_detection_of_one_series_makes_one_group(committed_client, sent_tasks):
    """Four transactions detect on the same machine at once (a detection, its redelivered message,
    and the straggler sweep's resends): the pending runs go to exactly one of the detections and the
    advisory lock serialises the group matching."""
    session = db.new_session()
    lab = Lab(committed_client, session, sent_tasks, configs=(SIM,))
    agent = lab.agent("dut-01")
    lab.push(12)
    lab.measure(lambda i, _: sim_values(81.72 * (1.05 if i >= 6 else 1.0)), agent)
    session.close()
    machine_id = agent["machine_id"]
    errors, barrier, outcomes = [], threading.Barrier(4), []

    def detect():
        try:
            with db.session_scope() as s:
                barrier.wait(timeout=30)
                outcomes.append(alert_detection.detect_pending(s, machine_id, get_settings()).as_dict())
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=detect) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert (_count(AlertGroup), _count(Alert)) == (1, 1)
    assert sorted(o["commits"] for o in outcomes) == [0, 0, 0, 12]  # the runs went to one detection only
    with db.session_scope() as s:  # every measured commit got its verdict, every run is analysed
        judged = set(s.scalars(select(Commit.sha).join(CommitStatus, CommitStatus.commit_id == Commit.id)))
        pending = s.scalar(select(func.count()).select_from(Run).where(Run.status == "ok", Run.detected_at.is_(None)))
    assert judged == set(lab.shas["main"]) and pending == 0
