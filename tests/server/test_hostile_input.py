"""Input a schema fuzzer or an anonymous caller can send: every route answers 4xx with the error
envelope, never a 500 from the parser or the database driver."""

from __future__ import annotations

import re
from typing import Any

import pytest

from perfci_server.app import create_app
from server_support import ADMIN, SECRET, create_repository, enroll, github_headers

pytestmark = pytest.mark.services

HUGE = 2**63  # one past BIGINT: the driver refuses it (PostgreSQL "out of range", SQLite "too large")
NESTED = b"[" * 100_000


def _integer_params() -> list[tuple[str, str, str, str]]:
    """(method, path, where, name) of every integer path or query parameter the API declares."""
    found = []
    for path, operations in create_app().openapi()["paths"].items():
        for method, operation in operations.items():
            for param in operation.get("parameters", []):
                schema = param["schema"]
                types = {schema.get("type")} | {option.get("type") for option in schema.get("anyOf", [])}
                if "integer" in types:
                    found.append((method, path, param["in"], param["name"]))
    return found


INTEGER_PARAMS = _integer_params()


def test_the_routes_in_the_report_are_among_those_checked():
    checked = {(method, path, name) for method, path, _, name in INTEGER_PARAMS}
    assert ("get", "/api/v1/machines/{machine_id}", "machine_id") in checked
    assert ("get", "/api/v1/jobs", "offset") in checked
    assert ("post", "/api/v1/agent/jobs/{job_id}/lease", "job_id") in checked
    assert ("put", "/api/v1/agent/jobs/{job_id}/attempts/{attempt}/result", "attempt") in checked
    assert len(INTEGER_PARAMS) >= 20


@pytest.mark.parametrize(("method", "path", "where", "name"), INTEGER_PARAMS, ids=lambda v: str(v))
def test_integers_beyond_the_database_range_are_refused_with_the_envelope(client, sent_tasks, method, path, where, name):
    agent = enroll(client)
    headers = agent["headers"] if path.startswith("/api/v1/agent/") else ADMIN
    url = re.sub(r"\{(\w+)\}", lambda m: str(HUGE) if (where, m.group(1)) == ("path", name) else "1", path)
    params = {name: str(HUGE)} if where == "query" else {}
    body: dict[str, Any] | None = {"attempt": 1, "reason": "x"} if method in ("post", "put", "patch") else None
    response = client.request(method.upper(), url, params=params, json=body, headers=headers)

    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert any(detail["loc"][-1] == name for detail in error["details"]), error


@pytest.mark.parametrize("attempt", [HUGE, 2**31])  # attempts are INTEGER: 2^31 is already out of range
def test_attempt_in_a_lease_renewal_body_is_bounded(client, sent_tasks, attempt):
    agent = enroll(client)
    response = client.post("/api/v1/agent/jobs/1/lease", json={"attempt": attempt}, headers=agent["headers"])
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "validation_error"


def test_an_id_beyond_the_range_in_a_body_is_refused(client, sent_tasks):
    response = client.post("/api/v1/alerts/detect", json={"repository_id": HUGE, "branch": "main", "machine_id": 1}, headers=ADMIN)
    assert response.status_code == 422, response.text


def test_a_huge_number_given_as_a_machine_name_is_just_an_unknown_name(client, sent_tasks):
    response = client.get("/api/v1/alerts/check", params={"commit": "a" * 40, "machine": str(HUGE * 10)})
    assert response.status_code == 404, response.text
    assert response.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize("forge", ["github", "gitlab"])
def test_deeply_nested_json_on_the_webhook_routes_is_a_400(client, sent_tasks, forge):
    create_repository(client, forge=forge)
    headers = github_headers(NESTED) if forge == "github" else {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": SECRET}
    response = client.post(f"/api/v1/webhooks/{forge}", content=NESTED, headers=headers)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == {"code": "bad_request", "message": "body is not valid JSON: nested too deeply", "details": None}


def test_deeply_nested_json_in_a_result_upload_is_a_422(client, sent_tasks):
    agent = enroll(client)
    response = client.put("/api/v1/agent/jobs/1/attempts/1/result", content=NESTED, headers={**agent["headers"], "Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "unprocessable"
