"""Webhook deliveries shaped like real GitHub/GitLab pushes: signatures, dedupe, commit order."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from perfci_server.jobs import service as job_service
from perfci_server.models import Branch, BranchCommit, Commit, Job, WebhookDelivery
from perfci_server.repos.service import COMPLETE_PUSH_TASK
from perfci_server.settings import get_settings
from tests.server.server_support import (
    GITHUB_BEFORE,
    GITHUB_COMMITS,
    SECRET,
    body_of,
    complete_pushes,
    create_config,
    create_repository,
    enroll,
    fixture,
    github_headers,
    push_github,
    push_payload,
)

pytestmark = pytest.mark.services


def _count(session: Session, model: type) -> int:
    return session.scalar(select(func.count()).select_from(model)) or 0


def _branch_shas(session: Session, branch: str = "main") -> list[str]:
    rows = session.execute(
        select(Commit.sha)
        .join(BranchCommit, BranchCommit.commit_id == Commit.id)
        .join(Branch, Branch.id == BranchCommit.branch_id)
        .where(Branch.name == branch)
        .order_by(BranchCommit.position)
    )
    return list(rows.scalars())


def test_github_push_without_a_reachable_mirror_records_the_listed_commits_in_order(client, session, sent_tasks):
    """example.com cannot be fetched from here: once the completion task has tried, the payload's
    commits stand in and the push stays incomplete."""
    repo = create_repository(client)
    response = push_github(client)
    assert response.status_code == 202, response.text
    assert response.json() == {
        "status": "scheduled",
        "detail": "3 listed commit(s) on main; the whole range follows from the server's mirror of the repository",
        "commits": 3,
        "complete": False,
    }
    assert _branch_shas(session) == []  # the request never waits on the forge
    [push] = client.get(f"/api/v1/repositories/{repo['id']}/pushes", params={"complete": False}).json()["items"]
    assert sent_tasks == [(COMPLETE_PUSH_TASK, (push["id"],))]
    complete_pushes(session, sent_tasks)

    assert _branch_shas(session) == GITHUB_COMMITS
    commits = {c.sha: c for c in session.scalars(select(Commit))}
    assert commits[GITHUB_COMMITS[0]].parents == [GITHUB_BEFORE]
    assert commits[GITHUB_COMMITS[1]].parents == [GITHUB_COMMITS[0]]
    assert commits[GITHUB_COMMITS[2]].author_name == "Ada Lovelace"
    assert commits[GITHUB_COMMITS[0]].message.startswith("l3fwd: prefetch the next mbuf\n")
    assert session.scalar(select(Branch.head_sha)) == GITHUB_COMMITS[-1]

    [push] = client.get(f"/api/v1/repositories/{repo['id']}/pushes", params={"complete": False}).json()["items"]
    assert (push["complete"], push["listed_commits"], push["recorded_commits"], push["fetch_attempts"]) == (False, 3, 3, 1)
    assert "example.com" in push["last_error"]


def test_multi_commit_push_becomes_jobs_for_every_commit_machine_and_config_in_its_transaction(client, session, sent_tasks):
    create_repository(client)
    create_config(client, "self-64B")
    create_config(client, "self-1518B", pkt_size=1518)
    create_config(client, "disabled", enabled=False)
    enroll(client, "a", machine={"cpu": "one"})
    enroll(client, "b", machine={"cpu": "two"})
    assert push_github(client).status_code == 202
    complete_pushes(session, sent_tasks)

    assert _count(session, Job) == 3 * 2 * 2
    commit_ids = list(session.scalars(select(Commit.id)))
    assert job_service.schedule_commits(session, commit_ids, get_settings()) == 0  # idempotent
    per_commit = session.execute(select(Job.commit_id, func.count()).group_by(Job.commit_id)).all()
    assert sorted(n for _, n in per_commit) == [4, 4, 4]
    assert {j.state for j in session.scalars(select(Job))} == {"queued"}


def test_push_extends_branch_without_duplicating_known_commits(client, session, sent_tasks):
    create_repository(client)
    push_github(client, delivery="d-1")
    newer = "f" * 40
    payload = push_payload(
        before=GITHUB_COMMITS[-1],
        after=newer,
        commits=[{"id": newer, "message": "next", "timestamp": "2024-05-03T09:00:00Z", "author": {"name": "A", "email": "a@x"}}],
    )
    assert push_github(client, payload, delivery="d-2").status_code == 202
    complete_pushes(session, sent_tasks)
    assert _branch_shas(session) == [*GITHUB_COMMITS, newer]
    assert session.scalar(select(Commit.parents).where(Commit.sha == newer)) == [GITHUB_COMMITS[-1]]


@pytest.mark.parametrize(
    "signature",
    [
        "sha256=" + "0" * 64,  # wrong digest
        None,  # missing header
        "sha1=abcdef",  # wrong scheme
    ],
)
def test_bad_or_missing_signature_is_401_and_stores_nothing(client, session, sent_tasks, signature):
    create_repository(client)
    body = body_of(push_payload())
    headers = github_headers(body)
    if signature is None:
        del headers["X-Hub-Signature-256"]
    else:
        headers["X-Hub-Signature-256"] = signature
    response = client.post("/api/v1/webhooks/github", content=body, headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    assert (_count(session, Commit), _count(session, WebhookDelivery), _count(session, Branch)) == (0, 0, 0)
    assert sent_tasks == []


def test_signature_over_a_different_body_is_rejected(client, session, sent_tasks):
    create_repository(client)
    signed = body_of(push_payload())
    tampered = body_of(push_payload(ref="refs/heads/evil"))
    response = client.post("/api/v1/webhooks/github", content=tampered, headers=github_headers(signed))
    assert response.status_code == 401
    assert _count(session, Commit) == 0


def test_replayed_delivery_is_acknowledged_once(client, session, sent_tasks):
    create_repository(client)
    assert push_github(client, delivery="same-id").status_code == 202
    replay = push_github(client, delivery="same-id")
    assert replay.status_code == 200
    assert replay.json()["status"] == "duplicate"
    assert _count(session, WebhookDelivery) == 1
    assert _count(session, Commit) == 3


def test_ping_is_answered_and_recorded(client, session, sent_tasks):
    create_repository(client)
    body = body_of(fixture("github_ping.json"))
    response = client.post("/api/v1/webhooks/github", content=body, headers=github_headers(body, event="ping"))
    assert response.status_code == 200
    assert response.json()["status"] == "pong"
    assert sent_tasks == []


def test_unknown_repository_answers_exactly_like_a_bad_signature(client, session, sent_tasks):
    """Nobody can tell from the answer whether a repository name is registered."""
    unknown = push_github(client)
    create_repository(client)
    body = body_of(push_payload())
    bad_signature = client.post("/api/v1/webhooks/github", content=body, headers=github_headers(body, secret="not-the-secret"))
    assert (unknown.status_code, unknown.json(), unknown.headers.get("WWW-Authenticate")) == (
        bad_signature.status_code, bad_signature.json(), bad_signature.headers.get("WWW-Authenticate"))
    assert unknown.status_code == 401
    assert "perfci-org/dataplane" not in unknown.text
    assert _count(session, WebhookDelivery) == 0


def test_unknown_gitlab_project_answers_exactly_like_a_bad_token(client, sent_tasks):
    unknown = _gitlab(client, fixture("gitlab_push.json"))
    create_repository(client, name="net/dataplane", forge="gitlab")
    bad_token = _gitlab(client, fixture("gitlab_push.json"), token="wrong")
    assert (unknown.status_code, unknown.json()) == (bad_token.status_code, bad_token.json())
    assert unknown.status_code == 401


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"{not json", 400),
        (b"[1, 2]", 400),
        (b'{"ref": "refs/heads/main"}', 422),  # no repository.full_name
    ],
)
def test_malformed_bodies(client, sent_tasks, body, status):
    create_repository(client)
    response = client.post("/api/v1/webhooks/github", content=body, headers=github_headers(body))
    assert response.status_code == status, response.text


def test_push_missing_fields_is_422_after_a_valid_signature(client, session, sent_tasks):
    create_repository(client)
    payload = push_payload()
    del payload["after"]
    response = push_github(client, payload)
    assert response.status_code == 422
    assert "after" in response.json()["error"]["message"]
    assert _count(session, Commit) == 0


def test_missing_event_headers_is_400(client, sent_tasks):
    create_repository(client)
    body = body_of(push_payload())
    headers = github_headers(body)
    del headers["X-GitHub-Event"]
    assert client.post("/api/v1/webhooks/github", content=body, headers=headers).status_code == 400


def test_body_over_the_limit_is_413(client, session, sent_tasks):
    create_repository(client)
    limit = get_settings().webhook_max_bytes
    body = b" " * (limit + 1)
    response = client.post("/api/v1/webhooks/github", content=body, headers=github_headers(body))
    assert response.status_code == 413
    assert _count(session, WebhookDelivery) == 0


def test_branch_deletion_and_tags_are_ignored(client, session, sent_tasks):
    create_repository(client)
    deletion = push_payload(after="0" * 40, deleted=True, commits=[], head_commit=None)
    response = push_github(client, deletion, delivery="del")
    assert (response.status_code, response.json()["status"]) == (202, "ignored")
    tag = push_payload(ref="refs/tags/v1.0", commits=[])
    response = push_github(client, tag, delivery="tag")
    assert (response.status_code, response.json()["status"]) == (202, "ignored")
    assert _count(session, Commit) == 0
    assert sent_tasks == []


def test_tags_are_benchmarked_when_the_repository_tracks_them(client, session, sent_tasks):
    response = client.post(
        "/api/v1/repositories",
        json={"name": "perfci-org/dataplane", "forge": "github", "clone_url": "https://example.com/perfci-org/dataplane.git",
              "webhook_secret": SECRET, "track_tags": True},
        headers={"Authorization": "Bearer perfci-development-admin-token"},
    )
    assert response.status_code == 201
    tag = push_payload(ref="refs/tags/v1.0", commits=[])
    response = push_github(client, tag, delivery="tag")
    assert response.json()["status"] == "scheduled"
    complete_pushes(session, sent_tasks)
    assert _branch_shas(session, "v1.0") == [GITHUB_COMMITS[-1]]  # the head commit


def _gitlab(client, payload, token=SECRET, event="Push Hook", uuid="2ab7e1a6-6d1e-4e57-b3b8-8b1b2c3d4e5f"):
    headers = {"X-Gitlab-Event": event, "X-Gitlab-Token": token, "X-Gitlab-Event-UUID": uuid, "Content-Type": "application/json"}
    return client.post("/api/v1/webhooks/gitlab", content=body_of(payload), headers=headers)


def test_gitlab_push_hook(client, session, sent_tasks):
    create_repository(client, name="net/dataplane", forge="gitlab")
    response = _gitlab(client, fixture("gitlab_push.json"))
    assert response.status_code == 202, response.text
    complete_pushes(session, sent_tasks)
    assert _branch_shas(session) == ["b6568db1bc1dcd7f8b4d5a946b0b91f9dacd7327", "da1560886d4f094c3e6c9ef40349f7d38b5d27d7"]
    assert _gitlab(client, fixture("gitlab_push.json")).json()["status"] == "duplicate"


def test_gitlab_newest_first_commit_lists_are_put_in_order(client, session, sent_tasks):
    create_repository(client, name="net/dataplane", forge="gitlab")
    payload = fixture("gitlab_push.json")
    payload["commits"].reverse()
    assert _gitlab(client, payload).status_code == 202
    complete_pushes(session, sent_tasks)
    assert _branch_shas(session)[-1] == payload["after"]


def test_gitlab_bad_token_is_401(client, session, sent_tasks):
    create_repository(client, name="net/dataplane", forge="gitlab")
    assert _gitlab(client, fixture("gitlab_push.json"), token="wrong").status_code == 401
    assert _count(session, Commit) == 0


def test_a_github_delivery_does_not_match_a_gitlab_repository(client, sent_tasks):
    create_repository(client, name="perfci-org/dataplane", forge="gitlab")
    assert push_github(client).status_code == 401
