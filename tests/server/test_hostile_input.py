"""Input a schema fuzzer or an anonymous caller can send: every route answers 4xx with the error
envelope, never a 500 from the parser or the database driver."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from perfci_server import bodies
from perfci_server.app import create_app
from tests.server.server_support import ADMIN, SECRET, create_repository, enroll, github_headers

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
    response = client.request(method.upper(), url, params=params, json=_valid_body(method, path), headers=headers)

    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert any(detail["loc"][-1] == name for detail in error["details"]), error


def _valid_body(method: str, path: str) -> dict[str, Any] | None:
    """A body the route takes, so that only the parameter under test is out of range (a route reads and
    validates its body before FastAPI reports its path and query parameters)."""
    if method not in ("post", "put", "patch"):
        return None
    for end, body in (("/lease", {"attempt": 1}), ("/failure", {"reason": "x"}), ("/release", {"reason": "x"}),
                      ("/triage", {"status": "acknowledged", "by": "me"})):
        if path.endswith(end):
            return body
    return {}


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


def _body_integers() -> list[tuple[str, str, tuple[str, ...], int, bool]]:
    """(method, path, field path, first value past its bound, refused) of every integer in every
    request body the schema declares; "*" is any key of a map, "0" the first item of a list. Fails on
    an unbounded one. Not refused: a field that also takes any number (a machine description's value)
    keeps one past the integer bound as a float."""
    schema = create_app().openapi()
    components = schema["components"]["schemas"]

    def walk(node: dict[str, Any], where: tuple[str, ...], seen: frozenset[str], number_too: bool = False):
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            if name not in seen:
                yield from walk(components[name], where, seen | {name}, number_too)
            return
        options = node.get("anyOf", []) + node.get("oneOf", []) + node.get("allOf", [])
        number_too = number_too or any(option.get("type") == "number" for option in options)
        for option in options:
            yield from walk(option, where, seen, number_too)
        if node.get("type") == "integer":
            assert isinstance(node.get("maximum"), int) and isinstance(node.get("minimum"), int), f"unbounded integer {'.'.join(where)}"
            yield where, node["maximum"] + 1, not number_too
        for name, child in node.get("properties", {}).items():
            yield from walk(child, (*where, name), seen)
        if isinstance(node.get("additionalProperties"), dict):
            yield from walk(node["additionalProperties"], (*where, "*"), seen)
        if isinstance(node.get("items"), dict):
            yield from walk(node["items"], (*where, "0"), seen)

    found = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body is not None:
                found.extend((method, path, *integer) for integer in walk(body, (), frozenset()))
    return found


BODY_INTEGERS = _body_integers()


def _nested(where: tuple[str, ...], value: Any) -> Any:
    if not where:
        return value
    head, rest = where[0], where[1:]
    if head == "0":
        return [_nested(rest, value)]
    return {"key" if head == "*" else head: _nested(rest, value)}


def test_the_body_integers_in_the_report_are_among_those_checked():
    checked = {(method, path, ".".join(where)) for method, path, where, _, _ in BODY_INTEGERS}
    assert ("post", "/api/v1/configs", "packets") in checked
    assert ("post", "/api/v1/configs", "warmup") in checked
    assert ("put", "/api/v1/agent/jobs/{job_id}/attempts/{attempt}/result", "config.packets") in checked
    assert ("put", "/api/v1/agent/jobs/{job_id}/attempts/{attempt}/result", "samples.0.rep") in checked
    assert ("post", "/api/v1/agent/enroll", "machine.*") in checked
    assert all(past <= 2**63 for _, _, _, past, _ in BODY_INTEGERS)  # within the widest column + 1


@pytest.mark.parametrize(("method", "path", "where", "past", "refused"), BODY_INTEGERS, ids=lambda v: str(v))
def test_body_integers_past_their_column_are_refused_with_the_envelope(client, sent_tasks, method, path, where, past, refused):
    agent = enroll(client)
    headers = agent["headers"] if path.startswith("/api/v1/agent/") else ADMIN
    url = re.sub(r"\{\w+\}", "1", path)
    response = client.request(method.upper(), url, json=_nested(where, past), headers=headers)

    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] in ("validation_error", "unprocessable")  # the upload is parsed by the core model
    field = "key" if where[-1] == "*" else where[-1]
    assert any(field in detail["loc"] for detail in error["details"]) == refused, error


NUL_NAME = {"repository": {"full_name": "a\u0000"}, "project": {"path_with_namespace": "a\u0000"}}


@pytest.mark.parametrize("forge", ["github", "gitlab"])
def test_a_nul_in_a_webhook_repository_name_is_refused_before_any_lookup(client, sent_tasks, forge):
    body = json.dumps(NUL_NAME).encode()
    headers = github_headers(body) if forge == "github" else {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": SECRET}
    response = client.post(f"/api/v1/webhooks/{forge}", content=body, headers=headers)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["details"][0]["loc"] in (["body", "repository", "full_name"], ["body", "project", "path_with_namespace"])


@pytest.mark.parametrize("text", ["a\u0000b", "\ud800"], ids=["nul", "lone-surrogate"])
def test_unstorable_text_in_a_body_is_a_422_naming_the_field(client, sent_tasks, text):
    body = json.dumps({"name": text}).encode()  # ASCII escapes, as any JSON encoder may send them
    response = client.post("/api/v1/configs", content=body, headers={**ADMIN, "Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"][0]["loc"] == ["body", "name"]


def test_a_nul_in_a_query_or_a_path_is_a_422(client, sent_tasks):
    # (Starlette decodes a query's or a path's invalid UTF-8 to U+FFFD: no lone surrogate gets there.)
    listed = client.get("/api/v1/alerts", params={"branch": "a\u0000"}, headers=ADMIN)
    machine = client.get("/api/v1/machines/1%00", headers=ADMIN)
    for response, loc in ((listed, ["query", "branch"]), (machine, ["path"])):
        assert response.status_code == 422, response.text
        assert response.json()["error"]["details"][0]["loc"] == loc


def test_an_escaped_backslash_before_u0000_is_ordinary_text(client, sent_tasks):
    response = client.post("/api/v1/configs", json={"name": "C:\\u0000"}, headers=ADMIN)
    assert response.status_code == 201, response.text
    assert response.json()["name"] == "C:\\u0000"


def test_a_database_error_no_model_caught_leaves_as_the_envelope(committed, sent_tasks, monkeypatch):
    """The backstop for what the checks miss (a value a query computes), here with the body's text
    check taken out: the driver's DataError is a 422 with the envelope, not a plain-text 500, and
    nothing is written."""
    monkeypatch.setattr(bodies, "_refuse_unstorable", lambda document: None)
    with TestClient(create_app()) as client:
        response = client.post("/api/v1/configs", json={"name": "x\u0000"}, headers=ADMIN)
        assert response.status_code == 422, response.text
        assert response.json()["error"]["code"] == "unprocessable"
        assert "NUL" in response.json()["error"]["message"]
        assert client.get("/api/v1/configs", headers=ADMIN).json()["items"] == []
