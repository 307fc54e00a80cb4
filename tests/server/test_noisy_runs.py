"""A result the agent marked noisy: the mark is stored with the run, compare says so, and
detection reads the run as one repetition (its median)."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from perfci_server.alerts import series_repository as series_sql
from perfci_server.alerts.window import Window
from perfci_server.models import BranchCommit, Job, Run
from tests.server.server_support import result_document

pytestmark = pytest.mark.services

# the mark as perfci_agent.noisy writes it for a job recorded on a loaded host
MARK = {"metric": "cpp", "spread": 0.361, "low": 0.39, "high": 1.55, "threshold": 0.1,
        "basis": "the absolute threshold 10% (this machine's usual spread is not known yet)",
        "loadavg": [5.09, 4.1, 2.0], "steal_pct": None, "runnable": 5, "cpus": 2, "remeasured": 1}


def _claim(client, agent):
    response = client.post("/api/v1/agent/jobs/claim", headers=agent["headers"])
    assert response.status_code == 200, response.text
    return response.json()


def _upload(client, agent, job, document):
    return client.put(f"/api/v1/agent/jobs/{job['job_id']}/attempts/{job['attempt']}/result", content=json.dumps(document),
                      headers={**agent["headers"], "Content-Type": "application/json"})


def test_the_mark_is_stored_and_compare_reports_it(client, session, queued_jobs):
    agent, repo = queued_jobs["agent"], queued_jobs["repo"]
    base_job, head_job = _claim(client, agent), _claim(client, agent)
    assert _upload(client, agent, base_job, result_document(base_job["commit"])).status_code == 201
    noisy = result_document(head_job["commit"], values={"cpp": [31.0, 80.0, 124.0, 78.0, 95.0], "pps": [3e7] * 5})
    noisy["noisy"] = MARK
    response = _upload(client, agent, head_job, noisy)
    assert response.status_code == 201, response.text
    stored = {run.job_id: run.noisy for run in session.scalars(select(Run))}
    assert stored[base_job["job_id"]] is None and stored[head_job["job_id"]] == MARK
    params = {"repository_id": repo["id"], "base": base_job["commit"], "head": head_job["commit"],
              "machine_id": agent["machine_id"], "config": "self-64B"}
    compared = client.get("/api/v1/compare", params=params).json()
    assert (compared["noisy_base"], compared["noisy_head"]) == (False, True)

    # detection's input carries the mark per sample; a marked run counts as its median
    branch_id = session.scalar(select(BranchCommit.branch_id).limit(1))
    positions = list(session.scalars(select(BranchCommit.position).where(BranchCommit.branch_id == branch_id)))
    config_id = session.scalar(select(Job.config_id).where(Job.id == head_job["job_id"]))
    rows = series_sql.window_runs(session, branch_id, agent["machine_id"], config_id, positions)
    flags = {(r.sha, r.noisy) for r in rows}
    assert (head_job["commit"], True) in flags and (base_job["commit"], False) in flags
    window = Window()
    window.put_runs(rows, positions)
    cpp = {window.shas[p]: point.samples.tolist() for p, point in window.points[("cpp", "tsc")].items()}
    assert cpp[head_job["commit"]] == [80.0]  # the noisy run: its median only
    assert len(cpp[base_job["commit"]]) > 1  # an ordinary run: every repetition


def test_a_mark_that_does_not_follow_the_contract_is_refused(client, session, queued_jobs):
    agent = queued_jobs["agent"]
    job = _claim(client, agent)
    bad = result_document(job["commit"])
    bad["noisy"] = {**MARK, "spread": -1}
    response = _upload(client, agent, job, bad)
    assert response.status_code == 422 and "noisy" in response.text
