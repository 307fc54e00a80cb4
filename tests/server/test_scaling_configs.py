"""Scaling configs through the API (fields, claim, result check) and the scaling and energy
metrics of an upload, with what the agent could not measure (runs.unavailable)."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from perfci_server.models import MetricValue, Run
from tests.server.server_support import ADMIN, complete_pushes, create_config, create_repository, enroll, push_github, result_document

pytestmark = pytest.mark.services

SCALING = {"scaling": True, "packets": 500_000, "warmup": 50_000}
NO_RAPL = "not available: RAPL not readable: perf has no power/energy-pkg/ event; /sys/class/powercap does not exist"


@pytest.fixture
def scaling_job(client, session, sent_tasks):
    create_repository(client)
    config = create_config(client, "self-64B-scaling", **SCALING)
    agent = enroll(client)
    push_github(client)
    complete_pushes(session, sent_tasks)
    session.commit()
    claimed = client.post("/api/v1/agent/jobs/claim", headers=agent["headers"])
    assert claimed.status_code == 200, claimed.text
    return config, agent, claimed.json()


def _document(commit: str, **kw):
    values = {"pps": [3.1e7, 3.0e7, 3.1e7], "pps_max_lcores": [5.0e7, 4.9e7, 5.1e7], "scaling_efficiency": [0.81, 0.82, 0.80],
              "serial_fraction": [0.24, 0.22, 0.25], "serial_fraction_low": [0.21] * 3, "serial_fraction_high": [0.26] * 3,
              "roi_cpu": [1900.0, 1850.0, 1950.0]}
    doc = result_document(commit, config={"name": "self-64B-scaling", **SCALING, "lcores": None}, reps=3, values=values, **kw)
    doc["unavailable"] = {"energy": NO_RAPL}
    return doc


def test_a_scaling_config_reaches_the_agent_and_its_result_is_stored(client, session, scaling_job):
    config, agent, job = scaling_job
    assert (config["scaling"], config["lcores"]) == (True, None)
    assert job["config"]["scaling"] is True and job["config"]["lcores"] is None
    response = client.put(f"/api/v1/agent/jobs/{job['job_id']}/attempts/{job['attempt']}/result",
                          content=json.dumps(_document(job["commit"])), headers={**agent["headers"], "Content-Type": "application/json"})
    assert response.status_code == 201, response.text
    assert response.json()["metric_values"] == 21
    # reps 0, 1, 2: a row's rep_values[i] is rep i's value
    stored = {(v.metric, rep): x for v in session.scalars(select(MetricValue)) for rep, x in enumerate(v.rep_values) if x is not None}
    assert len(stored) == 21
    assert stored[("serial_fraction", 1)] == 0.22 and stored[("serial_fraction_high", 2)] == 0.26
    run = session.scalar(select(Run).where(Run.id == response.json()["run_id"]))
    assert run.unavailable == {"energy": NO_RAPL}


def test_a_result_run_without_scaling_does_not_belong_to_a_scaling_job(client, session, scaling_job):
    _, agent, job = scaling_job
    doc = _document(job["commit"])
    doc["config"]["scaling"] = False
    response = client.put(f"/api/v1/agent/jobs/{job['job_id']}/attempts/{job['attempt']}/result",
                          content=json.dumps(doc), headers={**agent["headers"], "Content-Type": "application/json"})
    assert response.status_code == 422 and "does not match the job's config" in response.text
    assert session.scalars(select(MetricValue)).first() is None


@pytest.mark.parametrize("fields, where", [({"lcores": 0}, "lcores"), ({"lcores": 65}, "lcores"), ({"scaling": "often"}, "scaling")])
def test_bad_scaling_fields_are_refused(client, fields, where):
    response = client.post("/api/v1/configs", json={"name": "bad", **fields}, headers=ADMIN)
    assert response.status_code == 422 and where in response.text
