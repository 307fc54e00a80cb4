"""One log line per forge post (a commit status or a pull request's comment): forge, repository, sha,
what was posted, the outcome and the forge's HTTP status, against the recording HTTP forge."""

from __future__ import annotations

import logging
import secrets
from typing import Any

import pytest
from sqlalchemy import select

from perfci_server import db, dispatch
from perfci_server.forge import statuses as forge_statuses
from perfci_server.forge import tasks as forge_tasks
from perfci_server.logs import JsonFormatter
from perfci_server.models import CommitStatus, PullRequest, Repository
from tests.alerts.conftest import FORGE_TOKEN as TOKEN

pytestmark = pytest.mark.services


def _lines(caplog: pytest.LogCaptureFixture, message: str) -> list[dict[str, Any]]:
    return [{**r.perfci_fields, "level": r.levelname} for r in caplog.records if r.getMessage() == message]


def test_each_status_post_is_one_line(lab, forge, sent_tasks, caplog, monkeypatch):
    monkeypatch.setattr(dispatch, "retry_delay", lambda settings, n: 0)
    caplog.set_level(logging.INFO)
    [first, second, *_] = sent_tasks.named(forge_statuses.POST_TASK)
    forge.script.append(503)
    forge_tasks.post_status.apply(args=first)  # unavailable, then sent on the retry
    forge.script.append(401)
    forge_tasks.post_status.apply(args=second)  # refused
    posts = _lines(caplog, "forge post")
    assert [(p["post"], p["outcome"], p["http_status"], p["level"]) for p in posts] == [
        ("status", "unavailable", 503, "WARNING"), ("status", "sent", 201, "INFO"), ("status", "refused", 401, "ERROR")]
    rows = {s.id: s for s in lab.session.scalars(select(CommitStatus).where(CommitStatus.id.in_([first[0], second[0]])))}
    for post, request in zip(posts, forge.requests):
        row = rows[post["status_id"]]
        assert request.path == f"/repos/{post['repository']}/statuses/{post['sha']}"  # what was posted, where
        assert (post["forge"], post["repository"], post["context"], post["state"], post["version"]) == (
            "github", "perfci-org/dataplane", row.context, row.state, row.version)
        assert len(post["sha"]) == 40
    assert "HTTP 503" in posts[0]["error"] and "HTTP 401" in posts[2]["error"] and "error" not in posts[1]
    tasks = _lines(caplog, "task")
    assert [(t["name"], t["args"], t["outcome"]) for t in tasks] == [
        (forge_statuses.POST_TASK, list(first), "retry"), (forge_statuses.POST_TASK, list(first), "success"),
        (forge_statuses.POST_TASK, list(second), "success")]
    assert [t["result"] for t in tasks[1:]] == ["sent", "refused"]
    written = "\n".join(JsonFormatter().format(r) for r in caplog.records)
    assert TOKEN not in written  # the forge token is a header of the call, never a field of a line


def test_each_comment_post_is_one_line(lab, forge, caplog):
    caplog.set_level(logging.INFO)
    head = lab.shas["main"][-1]
    with db.session_scope() as session:
        repository = session.scalars(select(Repository).where(Repository.name == "perfci-org/dataplane")).one()
        pr = PullRequest(repository_id=repository.id, number=7, base_branch="main", head_branch="feature", head_sha=head,
                         comment_body="perfci: measuring", comment_version=1, public_id=secrets.token_urlsafe(16))
        session.add(pr)
        session.flush()
        pr_id = pr.id
    forge_tasks.post_comment.apply(args=(pr_id,))  # created
    with db.session_scope() as session:
        edited = session.get(PullRequest, pr_id)
        edited.comment_body, edited.comment_version = "perfci: no regression", 2
    forge_tasks.post_comment.apply(args=(pr_id,))  # edited in place
    posts = _lines(caplog, "forge post")
    assert [(r.method, r.path) for r in forge.requests] == [
        ("POST", "/repos/perfci-org/dataplane/issues/7/comments"), ("PATCH", "/repos/perfci-org/dataplane/issues/comments/1")]
    assert [(p["post"], p["forge"], p["repository"], p["sha"], p["pull_request"], p["comment_id"], p["version"], p["outcome"],
             p["http_status"]) for p in posts] == [
        ("comment", "github", "perfci-org/dataplane", head, 7, "1", 1, "sent", 201),
        ("comment", "github", "perfci-org/dataplane", head, 7, "1", 2, "sent", 200)]
