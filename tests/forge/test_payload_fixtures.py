"""The forge payload fixtures keep the promises of fixtures/README.md: signed as it says, with the
fields a pull-request handler reads where it says."""

from __future__ import annotations

import hmac
import json
from pathlib import Path

import pytest

from tests.forge.gitea import signature

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SECRET = "perfci-fixture-secret"
SHA = 40


def load(path: Path) -> tuple[dict[str, str], dict, bytes]:
    fixture = json.loads(path.read_text())
    body = fixture["body"]
    return fixture["headers"], body, json.dumps(body, indent=2, ensure_ascii=False).encode()


@pytest.mark.parametrize("path", sorted((FIXTURES / "gitea").glob("*.json")), ids=lambda p: p.stem)
def test_gitea_fixture_is_signed_over_its_body(path: Path) -> None:
    headers, body, raw = load(path)
    assert hmac.compare_digest(headers["X-Gitea-Signature"], signature(SECRET, raw))
    assert headers["X-Hub-Signature-256"] == f"sha256={headers['X-Gitea-Signature']}"
    assert headers["X-GitHub-Event"] == headers["X-Gitea-Event"] == ("push" if path.stem.startswith("push") else "pull_request")
    assert body["repository"]["default_branch"] == "main"


def test_gitea_fixtures_are_the_whole_recorded_set() -> None:
    assert sorted(p.stem for p in (FIXTURES / "gitea").glob("*.json")) == sorted(
        ["push_main", "push_new_branch", "push_feature", "pull_request_opened", "pull_request_synchronized", "pull_request_closed"])


@pytest.mark.parametrize(("name", "action"), [("opened", "opened"), ("synchronized", "synchronized"), ("closed", "closed")])
def test_gitea_pull_request_fields(name: str, action: str) -> None:
    headers, body, _ = load(FIXTURES / "gitea" / f"pull_request_{name}.json")
    pull = body["pull_request"]
    assert body["action"] == action and body["number"] == pull["number"]
    assert headers["X-Gitea-Event-Type"] == ("pull_request_sync" if name == "synchronized" else "pull_request")
    assert (pull["head"]["ref"], pull["base"]["ref"]) == ("feature", "main")
    assert len(pull["head"]["sha"]) == len(pull["base"]["sha"]) == len(pull["merge_base"]) == SHA


@pytest.mark.parametrize(("name", "action"), [("opened", "opened"), ("synchronize", "synchronize"), ("closed", "closed")])
def test_github_pull_request_fixture(name: str, action: str) -> None:
    headers, body, raw = load(FIXTURES / "github" / f"pull_request_{name}.json")
    assert headers["X-Hub-Signature-256"] == f"sha256={signature(SECRET, raw)}"
    assert (headers["X-GitHub-Event"], body["action"]) == ("pull_request", action)
    pull = body["pull_request"]
    assert len(pull["head"]["sha"]) == len(pull["base"]["sha"]) == SHA
    assert body["repository"]["default_branch"] == pull["base"]["ref"]


@pytest.mark.parametrize(("name", "action", "state"), [("open", "open", "opened"), ("update", "update", "opened"), ("close", "close", "closed")])
def test_gitlab_merge_request_fixture(name: str, action: str, state: str) -> None:
    headers, body, _ = load(FIXTURES / "gitlab" / f"merge_request_{name}.json")
    assert (headers["X-Gitlab-Event"], headers["X-Gitlab-Token"]) == ("Merge Request Hook", SECRET)
    attributes = body["object_attributes"]
    assert (body["object_kind"], attributes["action"], attributes["state"]) == ("merge_request", action, state)
    assert len(attributes["last_commit"]["id"]) == SHA
    assert ("oldrev" in attributes) == (name == "update")
