"""Pushes are recorded from the server's mirror of the repository, not from the payload's list.

The "forge" is a real git repository in a temporary directory (file:// clone URL); the deliveries
are shaped like GitHub's (at most 20 commits listed) and GitLab's (20 listed, total_commits_count).
"""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from perfci_server.models import Branch, BranchCommit, Commit, Job, Push
from perfci_server.repos import tasks as repo_tasks
from perfci_server.settings import get_settings
from server_support import ADMIN, SECRET, body_of, create_config, enroll, fixture, github_headers

pytestmark = pytest.mark.services
ZERO = "0" * 40
FORGE_LISTS = 20  # GitHub and GitLab list at most this many commits in a push payload


class Forge:
    """A git repository standing in for GitHub/GitLab: commits made here are what a push brings."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._n = 0
        path.mkdir(parents=True)
        self.git("init", "--quiet", "--initial-branch=main")

    def git(self, *args: str) -> str:
        env = {**os.environ, "GIT_AUTHOR_NAME": "Ada Lovelace", "GIT_AUTHOR_EMAIL": "ada@example.com",
               "GIT_COMMITTER_NAME": "Ada Lovelace", "GIT_COMMITTER_EMAIL": "ada@example.com",
               "GIT_AUTHOR_DATE": f"2026-11-01T10:{self._n // 60:02d}:{self._n % 60:02d}Z",
               "GIT_COMMITTER_DATE": f"2026-11-01T10:{self._n // 60:02d}:{self._n % 60:02d}Z"}
        return subprocess.run(["git", "-C", str(self.path), *args], check=True, capture_output=True, text=True, env=env).stdout.strip()

    def commit(self, n: int, subject: str = "fwd: change") -> list[str]:
        shas = []
        for _ in range(n):
            self._n += 1
            self.git("commit", "--quiet", "--allow-empty", "-m", f"{subject} {self._n}")
            shas.append(self.git("rev-parse", "HEAD"))
        return shas

    def head(self) -> str:
        return self.git("rev-parse", "HEAD")

    def forge_commit(self, sha: str) -> dict[str, Any]:
        message, date = self.git("log", "-1", "--format=%B%x1f%cI", sha).split("\x1f")
        return {"id": sha, "tree_id": self.git("rev-parse", f"{sha}^{{tree}}"), "distinct": True, "message": message.strip(),
                "timestamp": date, "url": f"https://github.com/perfci-org/dataplane/commit/{sha}",
                "author": {"name": "Ada Lovelace", "email": "ada@example.com", "username": "ada"},
                "committer": {"name": "Ada Lovelace", "email": "ada@example.com", "username": "ada"},
                "added": [], "removed": [], "modified": ["dataplane/src/fwd.c"]}


@pytest.fixture
def forge(tmp_path: Path) -> Forge:
    return Forge(tmp_path / "forge")


def github_push(forge: Forge, before: str, after: str, pushed: list[str], ref: str = "refs/heads/main", forced: bool = False) -> dict[str, Any]:
    """A GitHub push delivery: like GitHub, it lists only the newest 20 of the pushed commits."""
    payload = copy.deepcopy(fixture("github_push.json"))
    listed = [forge.forge_commit(sha) for sha in pushed[-FORGE_LISTS:]]
    payload.update(ref=ref, before=before, after=after, created=before == ZERO, forced=forced, commits=listed,
                   head_commit=listed[-1] if listed else None, compare=f"https://github.com/perfci-org/dataplane/compare/{before[:12]}...{after[:12]}")
    return payload


def gitlab_push(forge: Forge, before: str, after: str, pushed: list[str]) -> dict[str, Any]:
    """A GitLab push hook: the newest 20 commits listed, and total_commits_count saying how many there were."""
    payload = copy.deepcopy(fixture("gitlab_push.json"))
    listed = [forge.forge_commit(sha) for sha in pushed[-FORGE_LISTS:]]
    payload.update(before=before, after=after, checkout_sha=after, commits=listed, total_commits_count=len(pushed))
    return payload


@pytest.fixture(autouse=True)
def _local_clone_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The forge here is a directory: file:// clone URLs, which the server takes only when told to."""
    monkeypatch.setenv("PERFCI_ALLOW_LOCAL_CLONE_URLS", "true")
    get_settings.cache_clear()


def register(client: TestClient, name: str, forge: str, clone_url: str) -> dict[str, Any]:
    response = client.post("/api/v1/repositories", json={"name": name, "forge": forge, "clone_url": clone_url, "webhook_secret": SECRET},
                           headers=ADMIN)
    assert response.status_code == 201, response.text
    return response.json()


def deliver_github(client: TestClient, payload: dict[str, Any], delivery: str) -> Any:
    body = body_of(payload)
    return client.post("/api/v1/webhooks/github", content=body, headers=github_headers(body, delivery=delivery))


def deliver_gitlab(client: TestClient, payload: dict[str, Any], delivery: str) -> Any:
    headers = {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": SECRET, "X-Gitlab-Event-UUID": delivery}
    return client.post("/api/v1/webhooks/gitlab", content=body_of(payload), headers=headers)


def branch_shas(session: Session, branch: str = "main") -> list[str]:
    rows = session.execute(
        select(Commit.sha).join(BranchCommit, BranchCommit.commit_id == Commit.id).join(Branch, Branch.id == BranchCommit.branch_id)
        .where(Branch.name == branch).order_by(BranchCommit.position)
    )
    return list(rows.scalars())


def parents(session: Session) -> dict[str, list[str]]:
    return {sha: list(p) for sha, p in session.execute(select(Commit.sha, Commit.parents))}


def jobs_per_commit(session: Session) -> dict[str, int]:
    rows = session.execute(select(Commit.sha, func.count(Job.id)).join(Job, Job.commit_id == Commit.id).group_by(Commit.sha))
    return {sha: n for sha, n in rows}


def test_a_25_commit_github_push_records_all_25_with_their_parents_and_jobs(client, session, sent_tasks, forge):
    base = forge.commit(1)[0]
    pushed = forge.commit(25)
    repo = register(client, "perfci-org/dataplane", "github", f"file://{forge.path}")
    create_config(client)
    enroll(client)
    payload = github_push(forge, base, pushed[-1], pushed)
    assert len(payload["commits"]) == 20

    response = deliver_github(client, payload, "gh-25")
    assert response.status_code == 202, response.text
    assert response.json() == {"status": "scheduled", "detail": "25 commit(s) on main", "commits": 25, "complete": True}
    assert branch_shas(session) == pushed
    known = parents(session)
    assert known[pushed[0]] == [base]
    assert all(known[pushed[i]] == [pushed[i - 1]] for i in range(1, 25))
    assert jobs_per_commit(session) == {sha: 1 for sha in pushed}
    [push] = client.get(f"/api/v1/repositories/{repo['id']}/pushes").json()["items"]
    assert (push["complete"], push["listed_commits"], push["recorded_commits"], push["last_error"]) == (True, 20, 25, None)


def test_a_30_commit_gitlab_push_records_all_30(client, session, sent_tasks, forge):
    base = forge.commit(1)[0]
    pushed = forge.commit(30)
    register(client, "net/dataplane", "gitlab", f"file://{forge.path}")
    payload = gitlab_push(forge, base, pushed[-1], pushed)
    assert (len(payload["commits"]), payload["total_commits_count"]) == (20, 30)

    response = deliver_gitlab(client, payload, "gl-30")
    assert response.status_code == 202, response.text
    assert response.json()["commits"] == 30 and response.json()["complete"] is True
    assert branch_shas(session) == pushed
    assert parents(session)[pushed[0]] == [base]


def test_merges_keep_both_parents_and_the_branch_follows_first_parents(client, session, sent_tasks, forge):
    base = forge.commit(1)[0]
    forge.git("checkout", "--quiet", "-b", "topic")
    topic = forge.commit(3, "topic")
    forge.git("checkout", "--quiet", "main")
    mainline = forge.commit(2)
    forge.git("merge", "--quiet", "--no-ff", "-m", "merge topic", "topic")
    merge = forge.head()
    register(client, "perfci-org/dataplane", "github", f"file://{forge.path}")

    pushed = [*topic, *mainline, merge]  # GitHub lists every new commit, the merged ones too
    assert deliver_github(client, github_push(forge, base, merge, pushed), "merge").status_code == 202
    assert branch_shas(session) == [*mainline, merge]
    assert parents(session)[merge] == [mainline[-1], topic[-1]]


def test_a_new_branch_records_only_commits_no_tracked_branch_has(client, session, sent_tasks, forge):
    main = forge.commit(4)
    register(client, "perfci-org/dataplane", "github", f"file://{forge.path}")
    assert deliver_github(client, github_push(forge, ZERO, main[-1], main), "main").status_code == 202
    forge.git("checkout", "--quiet", "-b", "feature")
    feature = forge.commit(3, "feature")

    response = deliver_github(client, github_push(forge, ZERO, feature[-1], feature, ref="refs/heads/feature"), "feature")
    assert response.json()["commits"] == 3
    assert branch_shas(session, "feature") == feature
    assert parents(session)[feature[0]] == [main[-1]]
    assert branch_shas(session, "main") == main


def test_a_force_push_records_the_rewritten_commits_after_the_old_head(client, session, sent_tasks, forge):
    kept = forge.commit(3)
    register(client, "perfci-org/dataplane", "github", f"file://{forge.path}")
    old = forge.commit(2)
    assert deliver_github(client, github_push(forge, kept[-1], old[-1], old), "old").status_code == 202
    forge.git("reset", "--quiet", "--hard", kept[-1])
    rewritten = forge.commit(3, "rewritten")

    response = deliver_github(client, github_push(forge, old[-1], rewritten[-1], rewritten, forced=True), "forced")
    assert response.json()["commits"] == 3
    assert branch_shas(session) == [*old, *rewritten]
    assert parents(session)[rewritten[0]] == [kept[-1]]


@pytest.fixture
def db_session(committed: Engine) -> Session:
    with Session(committed) as s:
        yield s


def test_an_unreachable_mirror_leaves_the_push_incomplete_until_beat_completes_it(committed_client, db_session, forge, tmp_path):
    """A 25-commit push while the repository cannot be fetched records the 20 listed commits and
    says so; once it can be fetched, the beat task puts the 5 oldest before them, with their jobs."""
    client = committed_client
    base = forge.commit(1)[0]
    pushed = forge.commit(25)
    later = tmp_path / "published"
    repo = register(client, "perfci-org/dataplane", "github", f"file://{later}")
    create_config(client)
    enroll(client)

    response = deliver_github(client, github_push(forge, base, pushed[-1], pushed), "while-down")
    assert response.status_code == 202, response.text
    assert (response.json()["commits"], response.json()["complete"]) == (20, False)
    assert "incomplete" in response.json()["detail"]
    assert branch_shas(db_session) == pushed[5:]
    assert parents(db_session)[pushed[5]] == [base]  # the payload's guess, for now
    [push] = client.get(f"/api/v1/repositories/{repo['id']}/pushes", params={"complete": False}).json()["items"]
    assert push["complete"] is False and push["last_error"]

    assert repo_tasks.complete_pushes() == {"incomplete": 1, "completed": 0, "commits_added": 0}  # still unreachable
    forge.path.rename(later)
    assert repo_tasks.complete_pushes() == {"incomplete": 1, "completed": 1, "commits_added": 5}

    db_session.expire_all()
    assert branch_shas(db_session) == pushed
    known = parents(db_session)
    assert known[pushed[0]] == [base] and known[pushed[5]] == [pushed[4]]
    assert jobs_per_commit(db_session) == {sha: 1 for sha in pushed}
    completed = db_session.scalars(select(Push)).one()
    assert (completed.complete, completed.recorded_commits, completed.fetch_attempts, completed.last_error) == (True, 25, 3, None)
    assert client.get(f"/api/v1/repositories/{repo['id']}/pushes", params={"complete": False}).json()["items"] == []
    assert repo_tasks.complete_pushes() == {"incomplete": 0, "completed": 0, "commits_added": 0}


def test_forge_tokens_go_only_to_the_forges_own_host_and_never_on_the_command_line():
    import base64

    from perfci_server.models import Repository
    from perfci_server.repos.mirror import _credentials
    from perfci_server.settings import Settings

    settings = Settings(github_token="ghp_secret", gitlab_token="glpat_secret", gitlab_api_url="https://gitlab.example.com/api/v4",
                        mirror_ssh_key_file="/etc/perfci/deploy_key")
    github = _credentials(settings, Repository(forge="github", clone_url="https://github.com/perfci-org/dataplane.git"))
    assert github["GIT_CONFIG_KEY_0"] == "http.https://github.com:443/.extraHeader"
    assert github["GIT_CONFIG_VALUE_0"] == "Authorization: Basic " + base64.b64encode(b"x-access-token:ghp_secret").decode()
    gitlab = _credentials(settings, Repository(forge="gitlab", clone_url="https://gitlab.example.com/net/dataplane.git"))
    assert base64.b64decode(gitlab["GIT_CONFIG_VALUE_0"].split()[-1]) == b"oauth2:glpat_secret"
    elsewhere = _credentials(settings, Repository(forge="github", clone_url="https://mirror.example.org/dataplane.git"))
    assert not any("secret" in value for value in elsewhere.values())
    ssh = _credentials(settings, Repository(forge="github", clone_url="git@github.com:perfci-org/dataplane.git"))
    assert ssh == {"GIT_SSH_COMMAND": "ssh -i /etc/perfci/deploy_key -o IdentitiesOnly=yes -o BatchMode=yes"}
