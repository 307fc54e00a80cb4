"""Real concurrency against PostgreSQL (separate connections, committed data): 20 claimers never
share a job; an expired lease is requeued by the beat task and the late first result is refused."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import joinedload

from perfci_server import db
from perfci_server.jobs import service as job_service
from perfci_server.jobs.tasks import requeue_expired_leases
from perfci_server.models import Agent, Job, Run, utcnow
from perfci_server.settings import get_settings
from tests.server.server_support import complete_pushes, create_config, create_repository, enroll, push_github, result_document

pytestmark = pytest.mark.services


def _schedule(client, sent_tasks):
    """Complete the pushes as their task does (in its own transaction); the jobs they queued."""
    with db.session_scope() as session:
        complete_pushes(session, sent_tasks)
    with db.session_scope() as session:
        return session.scalar(select(func.count()).select_from(Job))


def test_twenty_concurrent_claimers_never_get_the_same_job(committed_client, sent_tasks):
    client = committed_client
    create_repository(client)
    for i in range(8):
        create_config(client, f"cfg-{i}")
    agents = [enroll(client, f"agent-{i}") for i in range(20)]
    push_github(client)
    total = _schedule(client, sent_tasks)
    assert total == 3 * 8

    claims: list[tuple[int, int]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(agents))
    lock = threading.Lock()

    def claimer(agent_id: int) -> None:
        try:
            barrier.wait()
            while True:
                with db.session_scope() as session:  # its own connection and transaction
                    agent = session.scalars(select(Agent).options(joinedload(Agent.machine)).where(Agent.id == agent_id)).one()
                    job = job_service.claim(session, agent, get_settings())
                if job is None:
                    return
                with lock:
                    claims.append((job.job_id, agent_id))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(a["agent_id"],)) for a in agents]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    counts = Counter(job_id for job_id, _ in claims)
    assert len(claims) == total and all(n == 1 for n in counts.values())
    assert len({agent for _, agent in claims}) > 1  # the work really was spread over claimers
    with db.session_scope() as session:
        assert {j.state for j in session.scalars(select(Job))} == {"leased"}
        assert len(session.scalars(select(Run)).all()) == total


def test_expired_lease_is_requeued_by_the_beat_task_and_the_late_result_refused(committed_client, sent_tasks):
    client = committed_client
    create_repository(client)
    create_config(client)
    slow, fast = enroll(client, "slow"), enroll(client, "fast")
    push_github(client)
    _schedule(client, sent_tasks)

    first = client.post("/api/v1/agent/jobs/claim", headers=slow["headers"]).json()
    with db.session_scope() as session:  # the slow agent stops renewing; its lease runs out
        session.execute(update(Job).where(Job.id == first["job_id"]).values(lease_expires_at=utcnow()))

    outcome = requeue_expired_leases.apply().get()  # the beat task, executed in-process
    assert outcome == {"requeued": [first["job_id"]], "failed": []}

    second = client.post("/api/v1/agent/jobs/claim", headers=fast["headers"]).json()
    assert (second["job_id"], second["attempt"]) == (first["job_id"], 2)

    late = client.put(
        f"/api/v1/agent/jobs/{first['job_id']}/attempts/1/result",
        json=result_document(first["commit"]),
        headers=slow["headers"],
    )
    assert late.status_code == 409, late.text
    assert "no longer current" in late.json()["error"]["message"]

    on_time = client.put(
        f"/api/v1/agent/jobs/{first['job_id']}/attempts/2/result",
        json=result_document(first["commit"], values={"cpp": [7.0] * 5}),
        headers=fast["headers"],
    )
    assert on_time.status_code == 201, on_time.text
    with db.session_scope() as session:
        runs = session.scalars(select(Run).where(Run.job_id == first["job_id"]).order_by(Run.attempt)).all()
        assert [(r.attempt, r.status) for r in runs] == [(1, "expired"), (2, "ok")]
        assert session.get(Job, first["job_id"]).state == "done"


def test_a_job_whose_leases_keep_expiring_is_failed_after_max_attempts(committed_client, sent_tasks):
    client = committed_client
    create_repository(client)
    create_config(client)
    agent = enroll(client)
    push_github(client)
    _schedule(client, sent_tasks)
    job_id = None
    for attempt in range(1, get_settings().max_attempts + 1):
        job = client.post("/api/v1/agent/jobs/claim", headers=agent["headers"]).json()
        job_id = job_id or job["job_id"]
        assert (job["job_id"], job["attempt"]) == (job_id, attempt)
        with db.session_scope() as session:
            session.execute(update(Job).where(Job.id == job_id).values(lease_expires_at=utcnow()))
        outcome = requeue_expired_leases.apply().get()
    assert outcome == {"requeued": [], "failed": [job_id]}
    with db.session_scope() as session:
        assert session.get(Job, job_id).state == "failed"
