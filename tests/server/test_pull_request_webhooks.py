"""Pull/merge request deliveries as the forges send them: Gitea's recorded from a real Gitea 1.26,
GitHub's and GitLab's from their documented examples (tests/forge/fixtures/README.md). Each one is
verified, recorded once and becomes the pull request's row and its preparation task; the mirror
fetch is that task's, never the request's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from perfci_server.models import Push, PullRequest
from perfci_server.pulls.service import PREPARE_TASK
from tests.server.server_support import ADMIN

pytestmark = pytest.mark.services

FIXTURES = Path(__file__).resolve().parents[1] / "forge" / "fixtures"
SECRET = "perfci-fixture-secret"


def recorded(name: str) -> tuple[dict[str, str], bytes, dict[str, Any]]:
    """(headers, the signed bytes, body) of one recorded delivery."""
    fixture = json.loads((FIXTURES / name).read_text())
    raw = json.dumps(fixture["body"], indent=2, ensure_ascii=False).encode()
    return fixture["headers"], raw, fixture["body"]


def register(client: Any, body: dict[str, Any], forge: str) -> None:
    name = body["project"]["path_with_namespace"] if forge == "gitlab" else body["repository"]["full_name"]
    response = client.post("/api/v1/repositories", headers=ADMIN, json={
        "name": name, "forge": forge, "clone_url": "https://forge.invalid/dataplane.git", "webhook_secret": SECRET})
    assert response.status_code == 201, response.text


def deliver(client: Any, route: str, name: str) -> Any:
    headers, raw, _ = recorded(name)
    return client.post(f"/api/v1/webhooks/{route}", content=raw, headers=headers)


@pytest.mark.parametrize("route", ["gitea", "github"])  # Gitea signs for both: X-Gitea-Signature and X-Hub-Signature-256
def test_a_gitea_pull_request_is_recorded_and_prepared_and_a_redelivery_does_nothing(client, session, sent_tasks, route):
    _, _, opened = recorded("gitea/pull_request_opened.json")
    register(client, opened, "gitea")
    answer = deliver(client, route, "gitea/pull_request_opened.json")
    assert answer.status_code == 202, answer.text
    head = opened["pull_request"]["head"]["sha"]
    assert answer.json()["detail"] == f"pull request #1: head {head[:12]} to be measured against its merge-base"
    pr = session.scalars(select(PullRequest)).one()
    assert (pr.number, pr.base_branch, pr.head_branch, pr.head_sha, pr.state) == (1, "main", "feature", head, "open")
    assert sent_tasks.named(PREPARE_TASK) == [(pr.id,)]
    assert session.scalars(select(Push)).all() == []  # nothing fetched in the request

    again = deliver(client, route, "gitea/pull_request_opened.json")
    assert (again.status_code, again.json()["status"]) == (200, "duplicate")
    assert len(sent_tasks.named(PREPARE_TASK)) == 1


def test_gitea_synchronized_moves_the_head_and_closed_ends_it(client, session, sent_tasks):
    _, _, opened = recorded("gitea/pull_request_opened.json")
    register(client, opened, "gitea")
    assert deliver(client, "gitea", "gitea/pull_request_opened.json").status_code == 202
    _, _, synced = recorded("gitea/pull_request_synchronized.json")
    assert synced["action"] == "synchronized"
    assert deliver(client, "gitea", "gitea/pull_request_synchronized.json").status_code == 202
    pr = session.scalars(select(PullRequest)).one()
    assert pr.head_sha == synced["pull_request"]["head"]["sha"] != opened["pull_request"]["head"]["sha"]
    assert len(sent_tasks.named(PREPARE_TASK)) == 2
    closed = deliver(client, "gitea", "gitea/pull_request_closed.json")
    assert closed.json()["detail"] == "pull request #1 closed: 0 queued job(s) dropped"
    session.refresh(pr)
    assert pr.state == "closed"


def test_a_bad_signature_on_the_gitea_route_is_401_and_records_nothing(client, session, sent_tasks):
    headers, raw, opened = recorded("gitea/pull_request_opened.json")
    register(client, opened, "gitea")
    headers = {**headers, "X-Gitea-Signature": "0" * 64}
    response = client.post("/api/v1/webhooks/gitea", content=raw, headers=headers)
    assert response.status_code == 401
    assert "X-Gitea-Signature" in response.json()["error"]["message"]
    assert session.scalars(select(PullRequest)).all() == []


@pytest.mark.parametrize(("name", "action"), [("github/pull_request_opened.json", "open"),
                                              ("github/pull_request_synchronize.json", "open"),
                                              ("github/pull_request_closed.json", "close")])
def test_githubs_documented_pull_request_payloads(client, session, sent_tasks, name, action):
    _, _, body = recorded(name)
    register(client, body, "github")
    answer = deliver(client, "github", name)
    assert answer.status_code == 202, answer.text
    pr = session.scalars(select(PullRequest)).one()
    assert (pr.number, pr.base_branch, pr.head_sha) == (body["number"], body["pull_request"]["base"]["ref"],
                                                         body["pull_request"]["head"]["sha"])
    assert pr.state == ("open" if action == "open" else "closed")
    assert len(sent_tasks.named(PREPARE_TASK)) == (1 if action == "open" else 0)


@pytest.mark.parametrize(("name", "state"), [("gitlab/merge_request_open.json", "open"),
                                             ("gitlab/merge_request_update.json", "open"),
                                             ("gitlab/merge_request_close.json", "closed")])
def test_gitlabs_documented_merge_request_hook(client, session, sent_tasks, name, state):
    _, _, body = recorded(name)
    register(client, body, "gitlab")
    answer = deliver(client, "gitlab", name)
    assert answer.status_code == 202, answer.text
    attributes = body["object_attributes"]
    pr = session.scalars(select(PullRequest)).one()
    assert (pr.number, pr.base_branch, pr.head_branch, pr.head_sha, pr.state) == (
        attributes["iid"], attributes["target_branch"], attributes["source_branch"], attributes["last_commit"]["id"], state)


def test_other_pull_request_actions_are_answered_and_ignored(client, session, sent_tasks):
    headers, _, body = recorded("gitea/pull_request_opened.json")
    register(client, body, "gitea")
    from perfci_server.forge.github import signature as github_signature

    edited = json.dumps({**body, "action": "label_updated"}).encode()
    headers = {**headers, "X-Gitea-Delivery": "label-1", "X-Gitea-Signature": github_signature(SECRET, edited).removeprefix("sha256=")}
    answer = client.post("/api/v1/webhooks/gitea", content=edited, headers=headers)
    assert (answer.status_code, answer.json()["status"]) == (202, "ignored")
    assert session.scalars(select(PullRequest)).all() == []
