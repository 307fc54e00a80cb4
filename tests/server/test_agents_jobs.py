"""Enrollment, token separation, claim, lease renewal, failure reports and retries."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from perfci_server.models import Agent, Job, Run
from perfci_server.settings import get_settings
from tests.server.server_support import ADMIN, GITHUB_COMMITS, MACHINE, MACHINE_ID, complete_pushes, create_config, create_repository, enroll, push_github

pytestmark = pytest.mark.services


@pytest.fixture
def queued(queued_jobs):
    """The enrolled agent of the three queued jobs."""
    return queued_jobs["agent"]


def test_enrollment_token_is_single_use_and_agent_token_is_stored_hashed(client, session):
    token = client.post("/api/v1/enrollment-tokens", json={}, headers=ADMIN).json()["token"]
    body = {"enrollment_token": token, "name": "a1", "machine_id": MACHINE_ID, "machine": MACHINE, "backends": ["tsc"]}
    first = client.post("/api/v1/agent/enroll", json=body)
    assert first.status_code == 201
    again = client.post("/api/v1/agent/enroll", json=body)
    assert again.status_code == 401
    agent_token = first.json()["token"]
    stored = session.scalars(select(Agent.token_hash)).all()
    assert agent_token not in stored and len(stored) == 1 and len(stored[0]) == 64


def test_enrollment_needs_an_admin_issued_token(client):
    body = {"enrollment_token": "pce_made_up", "name": "a1", "machine_id": MACHINE_ID, "machine": MACHINE}
    assert client.post("/api/v1/agent/enroll", json=body).status_code == 401
    assert client.post("/api/v1/enrollment-tokens", json={}).status_code == 401
    assert client.post("/api/v1/enrollment-tokens", json={}, headers={"Authorization": "Bearer nope"}).status_code == 401


def test_agent_and_admin_tokens_are_not_interchangeable(client):
    agent = enroll(client)
    assert client.post("/api/v1/configs", json={"name": "x"}, headers=agent["headers"]).status_code == 403
    assert client.post("/api/v1/agent/heartbeat", json={}, headers=ADMIN).status_code == 403
    assert client.post("/api/v1/agent/heartbeat", json={}, headers=agent["headers"]).status_code == 200


def test_api_tokens_work_for_mutations(client):
    issued = client.post("/api/v1/api-tokens", json={"name": "ci"}, headers=ADMIN).json()
    headers = {"Authorization": f"Bearer {issued['token']}"}
    assert client.post("/api/v1/configs", json={"name": "via-api-token"}, headers=headers).status_code == 201


def test_an_agent_that_stopped_claiming_says_why_and_the_agents_api_shows_it(client, session):
    agent = enroll(client)
    why = "this machine's identity changed since enrollment (cpu_model_name): re-enroll it as a new machine"
    headers = agent["headers"]
    assert client.post("/api/v1/agent/heartbeat", json={"stopped_claiming": why}, headers=headers).status_code == 200
    def listed():
        return {a["id"]: a["stopped_claiming"] for a in client.get("/api/v1/agents", headers=ADMIN).json()["items"]}
    assert listed()[agent["agent_id"]] == why
    assert client.post("/api/v1/agent/heartbeat", json={"version": "0.2"}, headers=headers).status_code == 200
    assert listed()[agent["agent_id"]] == why  # an older agent's heartbeat without the field leaves it
    assert client.post("/api/v1/agent/heartbeat", json={"stopped_claiming": None}, headers=headers).status_code == 200
    assert listed()[agent["agent_id"]] is None


def test_heartbeat_updates_backends_and_last_seen(client, session):
    agent = enroll(client, backends=["tsc"])
    response = client.post("/api/v1/agent/heartbeat", json={"backends": ["tsc", "pmu"], "version": "0.2"}, headers=agent["headers"])
    assert response.status_code == 200
    row = session.get(Agent, agent["agent_id"])
    assert row.backends == ["tsc", "pmu"] and row.version == "0.2" and row.last_seen_at is not None


def test_claim_leases_oldest_job_then_204_when_empty(client, session, queued):
    claimed = [client.post("/api/v1/agent/jobs/claim", headers=queued["headers"]) for _ in range(4)]
    assert [r.status_code for r in claimed] == [200, 200, 200, 204]
    jobs = [r.json() for r in claimed[:3]]
    assert [j["commit"] for j in jobs] == GITHUB_COMMITS
    assert all(j["attempt"] == 1 and j["config"]["name"] == "self-64B" for j in jobs)
    assert jobs[0]["clone_url"] == "https://example.com/perfci-org/dataplane.git"
    states = {j.state for j in session.scalars(select(Job))}
    assert states == {"leased"}
    assert len(session.scalars(select(Run)).all()) == 3


def test_an_agent_only_claims_jobs_of_its_machine(client, queued, session):
    other = enroll(client, "other", machine={"cpu": "elsewhere"})  # enrolling late: the branch's commits as history
    claimed = []
    while (claim := client.post("/api/v1/agent/jobs/claim", headers=other["headers"])).status_code == 200:
        claimed.append(session.get(Job, claim.json()["job_id"]))
    assert claim.status_code == 204
    assert [(j.machine_id, j.purpose) for j in claimed] == [(other["machine_id"], "backfill")] * 3


def test_disabled_machine_gets_no_jobs(client, queued):
    client.patch(f"/api/v1/machines/{queued['machine_id']}", json={"enabled": False}, headers=ADMIN)
    assert client.post("/api/v1/agent/jobs/claim", headers=queued["headers"]).status_code == 204


def test_claim_respects_the_backend_a_config_requires(client, session, sent_tasks):
    create_repository(client)
    create_config(client, "pmu-only", backend="pmu")
    agent = enroll(client, backends=["tsc"])
    push_github(client)
    complete_pushes(session, sent_tasks)
    assert client.post("/api/v1/agent/jobs/claim", headers=agent["headers"]).status_code == 204


def test_lease_renewal_marks_running_and_refuses_stale_attempts(client, session, queued):
    job = client.post("/api/v1/agent/jobs/claim", headers=queued["headers"]).json()
    renew = client.post(f"/api/v1/agent/jobs/{job['job_id']}/lease", json={"attempt": 1}, headers=queued["headers"])
    assert renew.status_code == 200
    assert session.get(Job, job["job_id"]).state == "running"
    stale = client.post(f"/api/v1/agent/jobs/{job['job_id']}/lease", json={"attempt": 2}, headers=queued["headers"])
    assert stale.status_code == 409
    missing = client.post("/api/v1/agent/jobs/999999/lease", json={"attempt": 1}, headers=queued["headers"])
    assert missing.status_code == 404


def test_failures_are_retried_until_attempts_run_out(client, session, queued):
    max_attempts = get_settings().max_attempts
    job_id = None
    for attempt in range(1, max_attempts + 1):
        job = client.post("/api/v1/agent/jobs/claim", headers=queued["headers"]).json()
        job_id = job_id or job["job_id"]
        assert (job["job_id"], job["attempt"]) == (job_id, attempt)
        response = client.post(
            f"/api/v1/agent/jobs/{job_id}/attempts/{attempt}/failure",
            json={"reason": "git clone: connection reset", "log_tail": "fatal: ..."},
            headers=queued["headers"],
        )
        assert response.status_code == 200, response.text
        expected = "failed" if attempt == max_attempts else "queued"
        assert response.json() == {"job_id": job_id, "attempt": attempt, "job_state": expected, "run_status": "error"}
    runs = session.scalars(select(Run).where(Run.job_id == job_id).order_by(Run.attempt)).all()
    assert [r.status for r in runs] == ["error"] * max_attempts
    again = client.post(f"/api/v1/agent/jobs/{job_id}/attempts/{max_attempts}/failure", json={"reason": "x"}, headers=queued["headers"])
    assert again.status_code == 409


def test_job_lists_and_detail(client, queued):
    page = client.get("/api/v1/jobs", params={"limit": 2}).json()
    assert page["total"] == 3 and len(page["items"]) == 2 and page["limit"] == 2
    assert client.get("/api/v1/jobs", params={"state": "done"}).json()["total"] == 0
    job_id = page["items"][0]["id"]
    detail = client.get(f"/api/v1/jobs/{job_id}").json()
    assert detail["runs"] == [] and detail["state"] == "queued"
    machines = client.get("/api/v1/machines").json()
    assert machines["total"] == 1 and machines["items"][0]["fingerprint"] == queued["fingerprint"]
    agents = client.get("/api/v1/agents").json()
    assert agents["items"][0]["machine"]["id"] == queued["machine_id"]
    repo_id = client.get("/api/v1/repositories").json()["items"][0]["id"]
    commits = client.get(f"/api/v1/repositories/{repo_id}/commits", params={"branch": "main"}).json()
    assert [c["sha"] for c in commits["items"]] == list(reversed(GITHUB_COMMITS))
    assert [c["position"] for c in commits["items"]] == [2, 1, 0]


def test_a_new_config_gets_history_from_the_backfill_task_it_sends(client, session, sent_tasks):
    from perfci_server import dispatch
    from perfci_server.jobs import service as job_service

    create_repository(client)
    agent = enroll(client)
    push_github(client)
    complete_pushes(session, sent_tasks)
    config = create_config(client, "added-later")
    assert sent_tasks.named(dispatch.BACKFILL_TASK) == [(None, [config["id"]])]
    assert session.scalars(select(Job).where(Job.config_id == config["id"])).all() == []  # not before the task runs
    for machine_ids, config_ids in sent_tasks.named(dispatch.BACKFILL_TASK):
        assert job_service.backfill(session, get_settings(), machine_ids, config_ids) == len(GITHUB_COMMITS)
    jobs = session.scalars(select(Job).where(Job.config_id == config["id"])).all()
    assert {(j.machine_id, j.purpose) for j in jobs} == {(agent["machine_id"], "backfill")}
