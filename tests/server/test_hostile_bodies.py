"""Bodies at the front door, on every operation of the OpenAPI document (a new route is covered
without touching this file): JSON that is not UTF-8 is a 415, a body over the route's limit a 413
(declared or counted while it arrives), an unauthenticated caller gets its 401 before its body is
read, and nothing is a 5xx. tests/server/test_live_bodies.py sends the same to a real server and
watches its memory."""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import APIRouter, FastAPI
from pydantic import BaseModel

from perfci_server import bodies
from perfci_server.app import create_app
from perfci_server.settings import get_settings
from tests.server.server_support import ADMIN, enroll

pytestmark = pytest.mark.services

SCHEMA = create_app().openapi()
OPERATIONS = [(method, path) for path, operations in SCHEMA["paths"].items() for method in operations]
BODY_OPERATIONS = [(method, path) for method, path in OPERATIONS if "requestBody" in SCHEMA["paths"][path][method]]
AUTHENTICATED = [(method, path) for method, path in BODY_OPERATIONS if SCHEMA["paths"][path][method].get("security")]

# A document with an unpaired surrogate as a raw UTF-16 code unit (json.dumps keeps it raw with
# ensure_ascii=False): what reached the database driver when such bodies were decoded.
DOCUMENT = json.dumps({"name": "x\ud800", "reason": "x\ud800", "repository": {"full_name": "x\ud800"}}, ensure_ascii=False)


def _bom(mark: bytes, codec: str) -> Callable[[str], bytes]:
    return lambda text: mark + text.encode(codec, "surrogatepass")


ENCODINGS: dict[str, Callable[[str], bytes]] = {
    "utf-8 with BOM": lambda text: codecs.BOM_UTF8 + text.encode("utf-8", "surrogatepass"),
    **{f"{codec} without BOM": (lambda c: lambda text: text.encode(c, "surrogatepass"))(codec)
       for codec in ("utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be")},
    "utf-16-le with BOM": _bom(codecs.BOM_UTF16_LE, "utf-16-le"),
    "utf-16-be with BOM": _bom(codecs.BOM_UTF16_BE, "utf-16-be"),
    "utf-32-le with BOM": _bom(codecs.BOM_UTF32_LE, "utf-32-le"),
    "utf-32-be with BOM": _bom(codecs.BOM_UTF32_BE, "utf-32-be"),
}


def url_of(path: str) -> str:
    return re.sub(r"\{\w+\}", "1", path)


def credentials(path: str, agent: dict[str, Any]) -> dict[str, str]:
    """What the route's legitimate caller sends (webhooks and enrollment are unauthenticated)."""
    return agent["headers"] if path.startswith("/api/v1/agent/") else ADMIN


def setting_of(method: str, path: str) -> str:
    """The limit setting the operation's 413 documents (PERFCI_..._MAX_BYTES)."""
    described = SCHEMA["paths"][path][method]["responses"]["413"]["description"]
    return re.search(r"PERFCI_\w+_MAX_BYTES", described).group(0)


def test_the_operations_in_the_report_are_among_those_checked():
    assert len(OPERATIONS) >= 38 and len(BODY_OPERATIONS) >= 18
    assert ("patch", "/api/v1/machines/{machine_id}") in BODY_OPERATIONS
    assert {("post", "/api/v1/agent/heartbeat"), ("post", "/api/v1/repositories")} <= set(AUTHENTICATED)
    assert {("post", f"/api/v1/webhooks/{forge}") for forge in ("github", "gitea", "gitlab")} <= set(BODY_OPERATIONS)
    assert ("post", "/api/v1/agent/enroll") not in AUTHENTICATED
    assert setting_of("post", "/api/v1/agent/enroll") == "PERFCI_ENROLL_MAX_BYTES"


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=lambda v: str(v))
def test_json_that_is_not_utf8_is_a_415_on_every_route(client, sent_tasks, method, path):
    agent = enroll(client)
    takes_body = (method, path) in BODY_OPERATIONS
    for encoding, encode in ENCODINGS.items():
        for caller in (credentials(path, agent), {}):
            headers = {**caller, "Content-Type": "application/json"}
            response = client.request(method.upper(), url_of(path), content=encode(DOCUMENT), headers=headers)
            assert response.status_code < 500, (encoding, response.text)
            if path.startswith("/v/"):  # a verdict page answers a browser in HTML, whatever it is sent
                assert response.headers["content-type"].startswith("text/html"), response.text
                continue
            assert response.status_code < 400 or "error" in response.json(), response.text
            if takes_body and (caller or (method, path) not in AUTHENTICATED):
                assert response.status_code == 415, (encoding, caller, response.text)
                error = response.json()["error"]
                assert error["code"] == "unsupported_media_type" and "UTF-8 (RFC 8259" in error["message"], error


@pytest.mark.parametrize(("codec", "name"), [("utf-16-le", "UTF-16LE"), ("utf-16-be", "UTF-16BE"), ("utf-32-le", "UTF-32LE")])
def test_the_415_says_what_the_body_looks_like(client, sent_tasks, codec, name):
    response = client.post("/api/v1/configs", content=DOCUMENT.encode(codec, "surrogatepass"),
                           headers={**ADMIN, "Content-Type": "application/json"})
    assert response.status_code == 415, response.text
    assert response.json()["error"]["message"] == f"the body looks like {name}: JSON bodies are UTF-8 (RFC 8259 §8.1)"


def test_invalid_utf8_and_a_byte_order_mark_are_named(client, sent_tasks):
    for body, message in ((b'{"name": "caf\xe9"}', "the body is not UTF-8 (byte 13)"),
                          (codecs.BOM_UTF8 + b'{"name": "x"}', "the body starts with a UTF-8 byte order mark")):
        response = client.post("/api/v1/configs", content=body, headers={**ADMIN, "Content-Type": "application/json"})
        assert response.status_code == 415, response.text
        assert response.json()["error"]["message"].startswith(message)


def _padded(size: int) -> bytes:
    """A JSON object of exactly ``size`` bytes (whitespace pads it: still valid JSON)."""
    body = b'{"name": "padded"}'
    return body[:-1] + b" " * (size - len(body)) + b"}"


def _chunks(body: bytes, size: int = 16 * 1024) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start:start + size]


@pytest.mark.parametrize(("method", "path"), BODY_OPERATIONS, ids=lambda v: str(v))
def test_a_body_over_the_routes_limit_is_a_413_declared_or_chunked(client, sent_tasks, method, path):
    agent = enroll(client)
    setting = setting_of(method, path)
    limit = getattr(get_settings(), setting.removeprefix("PERFCI_").lower())
    headers = {**credentials(path, agent), "Content-Type": "application/json"}
    for content in (_padded(limit + 1), _chunks(_padded(limit + 1))):  # Content-Length, then chunked
        response = client.request(method.upper(), url_of(path), content=content, headers=headers)
        assert response.status_code == 413, response.text
        assert response.json()["error"]["code"] == "payload_too_large"
        assert response.json()["error"]["details"] == {"limit": limit, "setting": setting}
    at_limit = client.request(method.upper(), url_of(path), content=_padded(limit), headers=headers)
    assert at_limit.status_code not in (413, 415) and at_limit.status_code < 500, at_limit.text


@pytest.mark.parametrize(("method", "path"), AUTHENTICATED, ids=lambda v: str(v))
def test_an_unauthenticated_caller_is_refused_before_its_body_is_judged(client, sent_tasks, method, path):
    limit = getattr(get_settings(), setting_of(method, path).removeprefix("PERFCI_").lower())
    wrong_token = {"Authorization": "Bearer pca_" + "x" * 43} if path.startswith("/api/v1/agent/") else {"Authorization": "Bearer wrong"}
    for caller in ({}, wrong_token):
        for content in (b"{", "{}".encode("utf-16"), _padded(limit + 1), _chunks(_padded(limit + 1))):
            oversized = not isinstance(content, bytes) or len(content) > limit
            response = client.request(method.upper(), url_of(path), content=content, headers={**caller, "Content-Type": "application/json"})
            # The upload reads its body before it looks a well-formed token up (one trip to the database for both).
            expected = 413 if oversized and caller and path.endswith("/result") else 401
            assert response.status_code == expected, response.text


def test_enrollment_is_unauthenticated_and_held_to_its_own_tight_limit(client, sent_tasks):
    limit = get_settings().enroll_max_bytes
    assert limit <= 64 * 1024 < get_settings().body_max_bytes
    response = client.post("/api/v1/agent/enroll", content=_padded(limit + 1), headers={"Content-Type": "application/json"})
    assert response.status_code == 413, response.text


def test_a_limit_is_a_setting_an_operator_can_raise(client, sent_tasks, monkeypatch):
    body = json.dumps({"name": "big-note"}).encode()[:-1] + b" " * (get_settings().body_max_bytes + 10) + b"}"
    headers = {**ADMIN, "Content-Type": "application/json"}
    assert client.post("/api/v1/configs", content=body, headers=headers).status_code == 413
    monkeypatch.setenv("PERFCI_BODY_MAX_BYTES", str(len(body)))
    get_settings.cache_clear()
    response = client.post("/api/v1/configs", content=body, headers=headers)
    assert response.status_code == 201, response.text


@pytest.mark.parametrize(("content_type", "status"), [
    (None, 415), ("text/plain", 415), ("application/x-www-form-urlencoded", 415), ("application/json; charset=utf-16", 415),
    ("application/json; charset=UTF-8", 201), ("application/merge-patch+json", 201),
])
def test_json_routes_take_a_json_media_type(client, sent_tasks, content_type, status):
    headers = {**ADMIN, **({"Content-Type": content_type} if content_type else {})}
    response = client.post("/api/v1/configs", content=b'{"name": "self-64B"}', headers=headers)
    assert response.status_code == status, response.text


@pytest.mark.parametrize(("body", "where"), [
    (b"", ["body"]), (b'{"name": ', ["body", "9"]), (b"[" * 100_000, ["body"]), (b'{"name": 5}', ["body", "name"]),
])
def test_a_body_that_is_no_valid_request_is_a_422_located_under_body(client, sent_tasks, body, where):
    response = client.post("/api/v1/configs", content=body, headers={**ADMIN, "Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "validation_error"
    assert response.json()["error"]["details"][0]["loc"] == where


def test_escaped_unstorable_text_in_a_webhook_or_an_upload_is_a_422(client, sent_tasks):
    agent = enroll(client)
    body = b'{"repository": {"full_name": "a\\ud800"}}'
    webhook = client.post("/api/v1/webhooks/gitlab", content=body, headers={"X-Gitlab-Event": "Push Hook"})
    upload = client.put("/api/v1/agent/jobs/1/attempts/1/result", content=b'{"reason": "\\u0000"}',
                        headers={**agent["headers"], "Content-Type": "application/json"})
    assert (webhook.status_code, webhook.json()["error"]["details"][0]["loc"]) == (422, ["body", "repository", "full_name"])
    assert (upload.status_code, upload.json()["error"]["details"][0]["loc"]) == (422, ["body", "reason"])


class Thing(BaseModel):
    name: str


def test_an_app_whose_route_fastapi_would_parse_first_is_refused():
    router = APIRouter(prefix="/things")

    @router.post("")
    def create(thing: Thing) -> None: ...

    app, api = FastAPI(), APIRouter(prefix="/api")
    api.include_router(router)
    app.include_router(api)
    with pytest.raises(RuntimeError, match=r"/api/things .*bodies\.json_body"):
        bodies.refuse_bodies_parsed_first(app.routes)
