"""The embedded default (SQLite file, tasks in-process): an upload's detection runs eagerly and
the alert is there when the upload returns."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from tests.alerts.alerts_support import SIM, document, push_commits, sha_of, sim_values
from perfci_server import db, migrate
from perfci_server.app import create_app
from perfci_server.celery_app import celery_app
from perfci_server.settings import get_settings
from tests.server.server_support import GITHUB_BEFORE, create_config, create_repository, enroll

STEP = 4


def _measure_a_step(client: TestClient, name: str, commits: int) -> list[str]:
    """Push `commits` commits, upload sim IPP for each (+2.9 % from commit STEP on); their shas."""
    create_repository(client)
    create_config(client, **SIM)
    machine = {"cpu_model": "AMD EPYC 7313", "cores": 16, "kernel": "6.1.0-18-amd64"}
    agent = enroll(client, machine=machine, backends=["sim"])
    shas = [sha_of(i, name) for i in range(commits)]
    push_commits(client, shas, GITHUB_BEFORE)
    for _ in shas:
        job = client.post("/api/v1/agent/jobs/claim", headers=agent["headers"]).json()
        i = shas.index(job["commit"])
        doc = document(job["commit"], SIM, sim_values(81.72 * (1.029 if i >= STEP else 1.0)), agent["fingerprint"], machine)
        response = client.put(f"/api/v1/agent/jobs/{job['job_id']}/attempts/{job['attempt']}/result", content=json.dumps(doc),
                              headers=agent["headers"])
        assert response.status_code == 201, response.text
    return shas


def test_detection_runs_in_process_on_embedded_sqlite(monkeypatch):
    settings = get_settings()
    assert settings.is_sqlite and settings.tasks_run_eagerly
    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)
    db.get_engine()
    migrate.upgrade()
    with TestClient(create_app()) as client:
        shas = _measure_a_step(client, "embedded", 8)
        [group] = client.get("/api/v1/alerts").json()["items"]
        assert (group["first_bad"]["sha"], group["alerts"][0]["metric"]) == (shas[STEP], "ipp")
        check = client.get("/api/v1/alerts/check", params={"commit": shas[STEP]}).json()
        assert check["exit_code"] == 1


def test_a_new_regression_alert_starts_a_bisect_when_configured(monkeypatch):
    monkeypatch.setenv("PERFCI_AUTO_BISECT_REGRESSIONS", "true")
    get_settings.cache_clear()
    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)
    db.reset_engine()
    db.get_engine()
    migrate.upgrade()
    with TestClient(create_app()) as client:
        _measure_a_step(client, "auto-bisect", 6)
        [group] = client.get("/api/v1/alerts").json()["items"]
        bisects = client.get("/api/v1/bisects").json()["items"]
        assert [b["alert_group_id"] for b in bisects] == [group["id"]]
