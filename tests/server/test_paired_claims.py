"""Interleaved confirmation pairs in the claim (alerts.confirm links a suspect's k - 1 and k as
partner jobs): one claim leases both to one agent, each attempt's run names the other job, each
side is uploaded on its own; a partner that is not queued any more leaves the pick to be measured
alone. On PostgreSQL (concurrent claimers, separate connections) and on the embedded SQLite."""

from __future__ import annotations

import threading

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from perfci_server import db, migrate
from perfci_server.app import create_app
from perfci_server.celery_app import celery_app
from perfci_server.jobs import repository as job_sql
from perfci_server.models import Job, Run
from perfci_server.settings import get_settings
from tests.server.server_support import GITHUB_COMMITS, complete_pushes, create_config, create_repository, enroll, push_github, result_document


def _pair_rounds(rounds: int) -> list[tuple[int, int]]:
    """Confirmation rounds 1..``rounds`` of the first two pushed commits, partners round by round,
    and one unpaired round of the third: the ids of each pair."""
    with db.session_scope() as session:
        first = session.scalars(select(Job).where(Job.round == 0).order_by(Job.id)).all()
        machine, config = first[0].machine_id, first[0].config_id
        a, b, c = (j.commit_id for j in first[:3])
        job_sql.insert_confirm_jobs(session, machine, config,
                                    [(x, r, "test") for r in range(1, rounds + 1) for x in (a, b)] + [(c, 1, "test")], 3)
        linked = job_sql.link_partners(session, machine, config, [((a, r), (b, r)) for r in range(1, rounds + 1)])
        assert linked == rounds
        # linking again changes nothing: a paired job is never paired twice
        assert job_sql.link_partners(session, machine, config, [((a, 1), (c, 1))]) == 0
        jobs = session.scalars(select(Job).where(Job.round > 0, Job.partner_job_id.is_not(None))).all()
        return sorted({tuple(sorted((j.id, j.partner_job_id))) for j in jobs})


def _claim_all(client: TestClient, agent: dict) -> list[dict]:
    claims = []
    while (response := client.post("/api/v1/agent/jobs/claim", headers=agent["headers"])).status_code == 200:
        claims.append(response.json())
    assert response.status_code == 204, response.text
    return claims


def _check_runs(pairs: list[tuple[int, int]]) -> None:
    with db.session_scope() as session:
        runs = {r.job_id: r for r in session.scalars(select(Run))}
        for a, b in pairs:
            assert (runs[a].paired_with, runs[b].paired_with) == (b, a)
        assert all(r.paired_with is None for job_id, r in runs.items() if not any(job_id in p for p in pairs))


def _upload_both_sides(client: TestClient, agent: dict, claim: dict) -> None:
    for side in (claim, claim["partner"]):
        response = client.put(f"/api/v1/agent/jobs/{side['job_id']}/attempts/{side['attempt']}/result",
                              json=result_document(side["commit"], values={"cpp": [7.0, 7.1, 7.2, 7.3, 7.4]}),
                              headers=agent["headers"])
        assert response.status_code == 201, response.text


@pytest.mark.services
def test_a_claim_never_takes_the_second_job_of_a_pair_whose_first_another_claim_holds(committed_client, sent_tasks):
    client = committed_client
    create_repository(client)
    create_config(client)
    holder_agent, other = enroll(client, "agent-0"), enroll(client, "agent-1")
    push_github(client)
    with db.session_scope() as session:
        complete_pushes(session, sent_tasks)
    [(first, second)] = _pair_rounds(1)
    holder = db.new_session()  # a claim in flight elsewhere: it holds the row lock of the pair's first job
    try:
        holder.execute(select(Job.id).where(Job.id == first).with_for_update())
        claim = client.post("/api/v1/agent/jobs/claim", headers=other["headers"]).json()
        assert claim["job_id"] not in (first, second) and claim["partner"] is None  # the next job, not half a pair
    finally:
        holder.rollback()
        holder.close()
    claims = _claim_all(client, holder_agent)
    assert [(c["job_id"], c["partner"]["job_id"]) for c in claims if c["partner"]] == [(first, second)]
    _check_runs([(first, second)])


@pytest.mark.services
def test_concurrent_claimers_lease_each_pair_whole_to_one_agent(committed_client, sent_tasks):
    client = committed_client
    create_repository(client)
    create_config(client)
    agents = [enroll(client, f"agent-{i}") for i in range(6)]
    push_github(client)
    with db.session_scope() as session:
        complete_pushes(session, sent_tasks)
    pairs = _pair_rounds(4)
    claims: list[tuple[dict, int]] = []
    barrier, lock = threading.Barrier(len(agents)), threading.Lock()

    def claimer(i: int) -> None:
        barrier.wait()
        while (response := client.post("/api/v1/agent/jobs/claim", headers=agents[i]["headers"])).status_code == 200:
            with lock:
                claims.append((response.json(), i))

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(len(agents))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    leased = [c["job_id"] for c, _ in claims] + [c["partner"]["job_id"] for c, _ in claims if c["partner"]]
    assert sorted(leased) == sorted(set(leased)) and len(leased) == 3 + 2 * 4 + 1  # every job once
    together = sorted(tuple(sorted((c["job_id"], c["partner"]["job_id"]))) for c, _ in claims if c["partner"])
    assert together == pairs  # no pair was split between two claims
    assert all(c["pair_seed"] is not None and c["partner"]["commit"] != c["commit"] for c, _ in claims if c["partner"])
    _check_runs(pairs)
    claim, i = next((c, i) for c, i in claims if c["partner"])
    _upload_both_sides(client, agents[i], claim)
    with db.session_scope() as session:
        assert {session.get(Job, j).state for j in (claim["job_id"], claim["partner"]["job_id"])} == {"done"}


@pytest.mark.services
def test_a_partner_that_is_not_queued_leaves_the_pick_to_be_measured_alone(committed_client, sent_tasks):
    client = committed_client
    create_repository(client)
    create_config(client)
    agent = enroll(client)
    push_github(client)
    with db.session_scope() as session:
        complete_pushes(session, sent_tasks)
    [(a, b)] = _pair_rounds(1)
    with db.session_scope() as session:
        session.get(Job, b).state = "failed"  # e.g. its build failed in an earlier session
    claims = _claim_all(client, agent)
    [alone] = [c for c in claims if c["job_id"] == a]
    assert alone["partner"] is None and alone["pair_seed"] is None
    _check_runs([])


def test_pairs_are_claimed_together_on_the_embedded_sqlite(monkeypatch):
    settings = get_settings()
    assert settings.is_sqlite
    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)
    db.get_engine()
    migrate.upgrade()
    with TestClient(create_app()) as client:
        create_repository(client)
        create_config(client)
        agent = enroll(client)
        push_github(client)
        pairs = _pair_rounds(2)
        claims = _claim_all(client, agent)
        assert sorted(tuple(sorted((c["job_id"], c["partner"]["job_id"]))) for c in claims if c["partner"]) == pairs
        assert len(claims) == len(GITHUB_COMMITS) + 2 + 1
        _check_runs(pairs)
        _upload_both_sides(client, agent, next(c for c in claims if c["partner"]))
