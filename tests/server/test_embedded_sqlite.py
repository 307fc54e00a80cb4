"""The embedded default (no PERFCI_DATABASE_URL, no broker): SQLite file + in-process tasks, end to end."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from perfci_server import db, migrate
from perfci_server.app import create_app
from perfci_server.celery_app import celery_app
from perfci_server.settings import get_settings
from tests.server.server_support import GITHUB_COMMITS, create_config, create_repository, enroll, push_github, result_document


def test_webhook_to_series_on_embedded_sqlite(monkeypatch):
    settings = get_settings()
    assert settings.database_url is None and settings.is_sqlite and settings.tasks_run_eagerly
    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)
    db.get_engine()
    migrate.upgrade()
    assert (settings.data_dir / "perfci.db").exists()

    with TestClient(create_app()) as client:
        repo = create_repository(client)
        create_config(client)
        agent = enroll(client)
        assert push_github(client).status_code == 202  # the eager task has queued the jobs by now

        uploaded = {}
        for _ in GITHUB_COMMITS:
            job = client.post("/api/v1/agent/jobs/claim", headers=agent["headers"]).json()
            values = [7.5 + job["job_id"] / 100 + rep / 1000 for rep in range(5)]
            uploaded[job["commit"]] = values
            response = client.put(
                f"/api/v1/agent/jobs/{job['job_id']}/attempts/{job['attempt']}/result",
                content=json.dumps(result_document(job["commit"], values={"cpp": values})),
                headers=agent["headers"],
            )
            assert response.status_code == 201, response.text
        assert client.post("/api/v1/agent/jobs/claim", headers=agent["headers"]).status_code == 204

        params = {"repository_id": repo["id"], "branch": "main", "machine_id": agent["machine_id"], "config": "self-64B", "metric": "cpp", "backend": "tsc"}
        series = client.get("/api/v1/series", params=params).json()
        assert [p["commit"] for p in series["points"]] == GITHUB_COMMITS
        assert {p["commit"]: [s["value"] for s in p["samples"]] for p in series["points"]} == uploaded
        assert client.get("/api/v1/jobs", params={"state": "done"}).json()["total"] == 3
