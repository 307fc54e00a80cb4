"""A real Gitea sends signed push and pull_request webhooks for real `git push`es and pull-request
changes, and takes commit statuses and comments over its GitHub-like API."""

from __future__ import annotations

import hmac
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest

from tests.forge import pull_request_scenario
from tests.forge.gitea import Gitea, signature
from tests.forge.webhook_listener import Received, WebhookListener

pytestmark = pytest.mark.services
SECRET = "perfci-forge-test-secret"
ZERO_SHA = "0" * 40


def assert_signed(delivery: Received, secret: str) -> None:
    expected = signature(secret, delivery.body)
    assert hmac.compare_digest(delivery.header("X-Gitea-Signature") or "", expected)
    assert hmac.compare_digest(delivery.header("X-Hub-Signature-256") or "", f"sha256={expected}")
    assert delivery.header("X-Gitea-Signature") != signature("another secret", delivery.body)


def test_pull_request_life_sends_signed_push_and_pull_request_deliveries(
        gitea: Gitea, webhook_listener: WebhookListener, tmp_path: Path) -> None:
    life = pull_request_scenario.run(gitea, webhook_listener, tmp_path / "checkout", f"dataplane-{uuid.uuid4().hex[:8]}", SECRET)
    shas = life.shas
    deliveries = [life.push_main, life.push_new_branch, life.pull_request_opened, life.push_feature,
                  life.pull_request_synchronized, life.pull_request_closed]

    for delivery in deliveries:
        assert delivery.path == pull_request_scenario.WEBHOOK_PATH
        assert delivery.header("Content-Type") == "application/json"
        assert delivery.header("X-Gitea-Event") == delivery.event
        assert delivery.header("X-GitHub-Delivery") == delivery.header("X-Gitea-Delivery")
        assert_signed(delivery, SECRET)
        assert delivery.json()["repository"]["full_name"] == life.repo.full_name
        assert delivery.json()["repository"]["default_branch"] == "main"
        assert delivery.json()["repository"]["clone_url"] == gitea.clone_url(life.repo)
    assert len({d.header("X-Gitea-Delivery") for d in deliveries}) == len(deliveries)
    assert [d.event for d in deliveries] == ["push", "push", "pull_request", "push", "pull_request", "pull_request"]

    push_main = life.push_main.json()
    assert (push_main["ref"], push_main["before"], push_main["after"]) == ("refs/heads/main", ZERO_SHA, shas.main_head)
    assert [c["id"] for c in push_main["commits"]] == [shas.main_head, shas.main_first]  # newest first
    new_branch = life.push_new_branch.json()
    assert (new_branch["ref"], new_branch["before"], new_branch["after"]) == ("refs/heads/feature", ZERO_SHA, shas.feature_first)
    push_feature = life.push_feature.json()
    assert (push_feature["before"], push_feature["after"]) == (shas.feature_first, shas.feature_head)

    expected = [("pull_request", "opened", shas.feature_first, "open"),
                ("pull_request_sync", "synchronized", shas.feature_head, "open"),
                ("pull_request", "closed", shas.feature_head, "closed")]
    for delivery, (event_type, action, head_sha, state) in zip(
            [life.pull_request_opened, life.pull_request_synchronized, life.pull_request_closed], expected, strict=True):
        payload = delivery.json()
        assert delivery.header("X-Gitea-Event-Type") == event_type
        assert payload["action"] == action
        assert payload["number"] == payload["pull_request"]["number"] == life.pull_number
        pull = payload["pull_request"]
        assert (pull["head"]["ref"], pull["head"]["sha"]) == ("feature", head_sha)
        assert (pull["base"]["ref"], pull["base"]["sha"]) == ("main", shas.main_head)
        assert pull["merge_base"] == shas.main_head
        assert pull["state"] == state

    recorded = gitea.settled_hook_deliveries(life.hook_id, len(deliveries))
    assert [d.uuid for d in recorded] == [d.header("X-Gitea-Delivery") for d in deliveries]
    assert [(d.delivered, d.succeeded, d.response.get("status")) for d in recorded] == [(True, True, 200)] * len(deliveries)


def test_clone_then_commit_statuses_posted_like_github_and_comments_read_back(gitea: Gitea, tmp_path: Path) -> None:
    repo = gitea.create_repo(f"statuses-{uuid.uuid4().hex[:8]}")
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    pull_request_scenario.git(checkout, "init", "-q", "-b", "main")
    sha = pull_request_scenario.commit(checkout, "fwd.c", "int fwd;\n", "dataplane: forward", day=1)
    gitea.push(repo, checkout, "main:main")
    pull_request_scenario.git(checkout, "checkout", "-q", "-b", "feature")
    head = pull_request_scenario.commit(checkout, "fwd.c", "int fwd = 1;\n", "dataplane: forward one", day=2)
    gitea.push(repo, checkout, "feature:feature")

    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", gitea.clone_url(repo), str(clone)], check=True, capture_output=True)
    assert pull_request_scenario.git(clone, "rev-parse", "origin/main", "origin/feature").split() == [sha, head]

    # The request perfci's GitHub status client makes (Bearer token, GitHub's body), against /api/v1.
    for state in ("pending", "failure"):
        response = httpx.post(f"{gitea.url}/api/v1/repos/{repo.full_name}/statuses/{sha}", timeout=10,
                              headers={"Authorization": f"Bearer {gitea.token}", "Accept": "application/vnd.github+json"},
                              json={"state": state, "context": "perfci/fwd", "description": f"perf {state}",
                                    "target_url": "http://perfci.invalid/runs/1"})
        assert response.status_code == 201, response.text
    statuses = gitea.commit_statuses(repo, sha)
    assert [(s["status"], s["context"]) for s in statuses] == [("failure", "perfci/fwd"), ("pending", "perfci/fwd")]
    combined = gitea.combined_status(repo, "main")
    assert (combined["state"], combined["sha"], combined["total_count"]) == ("failure", sha, 1)

    pull = gitea.open_pull(repo, head="feature", base="main", title="Forward one")
    assert pull["head"]["sha"] == head
    comment = gitea.api("POST", f"/repos/{repo.full_name}/issues/{pull['number']}/comments", json={"body": "perfci: no regression"})
    assert [(c["id"], c["body"]) for c in gitea.issue_comments(repo, pull["number"])] == [(comment["id"], "perfci: no regression")]
