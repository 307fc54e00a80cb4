"""Pushes are recorded from the server's mirror of the repository, not from the payload's list.

The "forge" is a real git repository in a temporary directory (file:// clone URL); the deliveries
are shaped like GitHub's (at most 20 commits listed) and GitLab's (20 listed, total_commits_count).
"""

from __future__ import annotations

import copy
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from perfci_server.models import Branch, BranchCommit, Commit, Job, Push, Repository, WebhookDelivery
from perfci_server.repos import mirror
from perfci_server.repos import service as repo_service
from perfci_server.repos import tasks as repo_tasks
from perfci_server.settings import get_settings
from tests.server.git_forge import GitForge as Forge
from tests.server.git_forge import HangingForge
from tests.server.server_support import ADMIN, SECRET, body_of, create_config, enroll, fixture, github_headers

pytestmark = pytest.mark.services
ZERO = "0" * 40
FORGE_LISTS = 20  # GitHub and GitLab list at most this many commits in a push payload


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


@pytest.fixture
def completed(session, sent_tasks):
    """Completes the pushes delivered so far as the completion task does (fetch, then record), in
    the test's transaction; returns the commits each added."""
    done = 0

    def complete() -> list[int]:
        nonlocal done
        added = []
        for (push_id,) in sent_tasks.named(repo_service.COMPLETE_PUSH_TASK)[done:]:
            push = session.get(Push, push_id)
            mirror.fetch(get_settings(), session.get(Repository, push.repository_id), push.after, 60)
            added.append(len(repo_service.complete_push(session, push, get_settings())))
        done = len(sent_tasks.named(repo_service.COMPLETE_PUSH_TASK))
        return added

    return complete


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


def test_a_25_commit_github_push_records_all_25_with_their_parents_and_jobs(client, session, sent_tasks, forge, completed):
    base = forge.commit(1)[0]
    pushed = forge.commit(25)
    repo = register(client, "perfci-org/dataplane", "github", f"file://{forge.path}")
    create_config(client)
    enroll(client)
    payload = github_push(forge, base, pushed[-1], pushed)
    assert len(payload["commits"]) == 20

    response = deliver_github(client, payload, "gh-25")
    assert response.status_code == 202, response.text
    assert response.json() == {"status": "scheduled", "commits": 20, "complete": False,
                               "detail": "20 listed commit(s) on main; the whole range follows from the server's mirror of the repository"}
    assert branch_shas(session) == []  # answered without waiting on the forge: the range comes from git
    assert completed() == [25]
    assert branch_shas(session) == [base, *pushed]  # the oldest one's parent goes first: its baseline, measured too
    known = parents(session)
    assert known[pushed[0]] == [base]
    assert all(known[pushed[i]] == [pushed[i - 1]] for i in range(1, 25))
    assert jobs_per_commit(session) == {sha: 1 for sha in [base, *pushed]}
    [push] = client.get(f"/api/v1/repositories/{repo['id']}/pushes").json()["items"]
    assert (push["complete"], push["listed_commits"], push["recorded_commits"], push["last_error"]) == (True, 20, 25, None)


def test_a_30_commit_gitlab_push_records_all_30(client, session, sent_tasks, forge, completed):
    base = forge.commit(1)[0]
    pushed = forge.commit(30)
    register(client, "net/dataplane", "gitlab", f"file://{forge.path}")
    payload = gitlab_push(forge, base, pushed[-1], pushed)
    assert (len(payload["commits"]), payload["total_commits_count"]) == (20, 30)

    response = deliver_gitlab(client, payload, "gl-30")
    assert response.status_code == 202, response.text
    assert (response.json()["commits"], response.json()["complete"]) == (20, False)
    assert completed() == [30]
    assert branch_shas(session) == [base, *pushed]
    assert parents(session)[pushed[0]] == [base]


def test_merges_keep_both_parents_and_the_branch_follows_first_parents(client, session, sent_tasks, forge, completed):
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
    completed()
    assert branch_shas(session) == [base, *mainline, merge]
    assert parents(session)[merge] == [mainline[-1], topic[-1]]


def test_a_new_branch_starts_with_its_base_branchs_history_up_to_the_merge_base(client, session, sent_tasks, forge, completed):
    main = forge.commit(4)
    register(client, "perfci-org/dataplane", "github", f"file://{forge.path}")
    assert deliver_github(client, github_push(forge, ZERO, main[-1], main), "main").status_code == 202
    forge.git("checkout", "--quiet", "-b", "feature")
    feature = forge.commit(3, "feature")
    forge.git("checkout", "--quiet", "main")
    later = forge.commit(2, "main moves on")
    assert deliver_github(client, github_push(forge, main[-1], later[-1], later), "main-2").status_code == 202
    completed()

    response = deliver_github(client, github_push(forge, ZERO, feature[-1], feature, ref="refs/heads/feature"), "feature")
    assert response.json()["commits"] == 3
    assert completed() == [3]  # its own commits; main's are inherited
    assert branch_shas(session, "feature") == [*main, *feature]  # main up to the merge-base, then its own
    branch = session.scalars(select(Branch).where(Branch.name == "feature")).one()
    main_branch = session.scalars(select(Branch).where(Branch.name == "main")).one()
    assert (branch.base_branch_id, branch.fork_position, branch.first_own_position) == (main_branch.id, 3, 4)
    assert parents(session)[feature[0]] == [main[-1]]
    assert branch_shas(session, "main") == [*main, *later]  # the branch's commits never join main's series


def test_a_new_branch_with_no_base_yet_records_its_first_parent_history(client, session, sent_tasks, forge, completed):
    root = forge.commit(2)
    register(client, "perfci-org/dataplane", "github", f"file://{forge.path}")
    create_config(client)
    enroll(client)
    forge.git("checkout", "--quiet", "-b", "feature")
    feature = forge.commit(1, "feature")
    response = deliver_github(client, github_push(forge, ZERO, feature[-1], feature, ref="refs/heads/feature"), "feature")
    assert response.json()["commits"] == 1
    assert completed() == [3]  # no tracked branch yet: the whole first-parent history is the branch's
    assert branch_shas(session, "feature") == [*root, *feature]
    assert jobs_per_commit(session) == {sha: 1 for sha in [*root, *feature]}


def test_a_force_push_takes_the_abandoned_commits_off_the_branch_and_keeps_them(client, session, sent_tasks, forge, completed):
    kept = forge.commit(3)
    register(client, "perfci-org/dataplane", "github", f"file://{forge.path}")
    create_config(client)
    enroll(client)
    old = forge.commit(2)
    assert deliver_github(client, github_push(forge, kept[-1], old[-1], old), "old").status_code == 202
    completed()
    forge.git("reset", "--quiet", "--hard", kept[-1])
    rewritten = forge.commit(3, "rewritten")

    response = deliver_github(client, github_push(forge, old[-1], rewritten[-1], rewritten, forced=True), "forced")
    assert response.json()["commits"] == 3
    completed()
    assert branch_shas(session) == [kept[-1], *rewritten]  # the branch as git has it now
    assert parents(session)[rewritten[0]] == [kept[-1]]
    repo_id = session.scalar(select(Repository.id))
    gone = client.get(f"/api/v1/repositories/{repo_id}/commits", params={"branch": "main", "abandoned": True}).json()["items"]
    assert [(c["sha"], c["position"]) for c in gone] == [(old[1], 2), (old[0], 1)]  # kept, where they stood
    assert jobs_per_commit(session) == {sha: 1 for sha in [kept[-1], *old, *rewritten]}  # their measurements stay too
    assert client.get(f"/api/v1/repositories/{repo_id}/commits", params={"abandoned": True}).status_code == 400


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
    [push] = client.get(f"/api/v1/repositories/{repo['id']}/pushes", params={"complete": False}).json()["items"]
    assert repo_tasks.complete_one(push["id"], get_settings(), 5) == (False, 0)  # the completion task's try: no mirror
    [push] = client.get(f"/api/v1/repositories/{repo['id']}/pushes", params={"complete": False}).json()["items"]
    assert push["complete"] is False and push["last_error"]
    db_session.expire_all()
    assert branch_shas(db_session) == pushed[5:]  # measured meanwhile: the listed commits
    assert parents(db_session)[pushed[5]] == [base]  # the payload's guess, for now

    assert repo_tasks.complete_pushes() == {"incomplete": 1, "completed": 0, "commits_added": 0}  # still unreachable
    forge.path.rename(later)
    assert repo_tasks.complete_pushes() == {"incomplete": 1, "completed": 1, "commits_added": 5}

    db_session.expire_all()
    assert branch_shas(db_session) == [base, *pushed]  # and the oldest one's parent before them: their baseline
    known = parents(db_session)
    assert known[pushed[0]] == [base] and known[pushed[5]] == [pushed[4]]
    assert jobs_per_commit(db_session) == {sha: 1 for sha in [base, *pushed]}
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


def test_thirty_pushes_while_the_forge_hangs_are_answered_recorded_and_completed_once_it_answers(
        committed_client, sent_tasks, db_session, forge, tmp_path):
    """No request waits on the forge: 30 concurrent pushes to one branch are all answered 202 and
    recorded while the forge hangs (it sees no request from them); the completion task gives up
    after its fetch timeout and the listed commits are measured meanwhile; once the forge answers,
    every push's range is recorded from git."""
    client = committed_client
    base, *pushed = forge.commit(31)
    bare = tmp_path / "dataplane.git"
    subprocess.run(["git", "clone", "--quiet", "--bare", str(forge.path), str(bare)], check=True)
    subprocess.run(["git", "-C", str(bare), "update-server-info"], check=True)  # what dumb HTTP serves
    hanging = HangingForge(bare)
    try:
        repo = register(client, "perfci-org/dataplane", "github", hanging.url)
        create_config(client)
        enroll(client)
        hanging.hanging.set()
        payloads = [github_push(forge, before, after, [after]) for before, after in zip([base, *pushed], pushed)]
        with ThreadPoolExecutor(max_workers=30) as pool:
            answers = list(pool.map(lambda i: deliver_github(client, payloads[i], f"hang-{i}"), range(30)))
        assert [a.status_code for a in answers] == [202] * 30
        assert hanging.requests == 0  # the requests never touched the forge
        assert db_session.scalar(select(func.count()).select_from(WebhookDelivery)) == 30
        pushes = client.get(f"/api/v1/repositories/{repo['id']}/pushes", params={"complete": False, "limit": 100}).json()
        assert pushes["total"] == 30

        first = min(p["id"] for p in pushes["items"])
        assert repo_tasks.complete_one(first, get_settings(), 2) == (False, 0)  # the task gives up, not the request
        assert hanging.requests >= 1
        [stuck] = [p for p in client.get(f"/api/v1/repositories/{repo['id']}/pushes").json()["items"] if p["id"] == first]
        assert "took longer than 2 s" in stuck["last_error"]

        hanging.hanging.clear()  # the forge answers again
        for push in sorted(p["id"] for p in pushes["items"]):
            assert repo_tasks.complete_one(push, get_settings(), 30)[0] is True
        db_session.expire_all()
        assert branch_shas(db_session) == [base, *pushed]
        assert jobs_per_commit(db_session) == {sha: 1 for sha in [base, *pushed]}
        assert client.get(f"/api/v1/repositories/{repo['id']}/pushes", params={"complete": False}).json()["total"] == 0
    finally:
        hanging.close()


def _hung_then_answered(client, db_session, forge, tmp_path, pushes: list[tuple[str, str, list[str], bool]]):
    """Deliver the pushes while the forge hangs, let each one's first fetch time out (in a shuffled
    order, as busy workers would), then let the forge answer and complete them, shuffled again.
    Returns the repository's id."""
    import random

    bare = tmp_path / "dataplane.git"
    subprocess.run(["git", "clone", "--quiet", "--bare", "--mirror", str(forge.path), str(bare)], check=True)
    subprocess.run(["git", "-C", str(bare), "update-server-info"], check=True)
    hanging = HangingForge(bare)
    try:
        repo = register(client, "perfci-org/dataplane", "github", hanging.url)
        create_config(client)
        enroll(client)
        hanging.hanging.set()
        for i, (before, after, listed, forced) in enumerate(pushes):
            assert deliver_github(client, github_push(forge, before, after, listed, forced=forced), f"g-{i}").status_code == 202
        ids = sorted(p["id"] for p in client.get(f"/api/v1/repositories/{repo['id']}/pushes", params={"limit": 100}).json()["items"])
        order = random.Random(7).sample(ids, len(ids))
        for push_id in order:  # every first fetch fails: each push's listed commits are placed, as guesses
            assert repo_tasks.complete_one(push_id, get_settings(), 1) == (False, 0)
        hanging.hanging.clear()
        for push_id in random.Random(8).sample(ids, len(ids)):
            assert repo_tasks.complete_one(push_id, get_settings(), 30)[0] is True
        db_session.expire_all()
        return repo["id"]
    finally:
        hanging.close()


def test_pushes_whose_first_fetches_failed_end_in_gits_order(committed_client, sent_tasks, db_session, forge, tmp_path):
    base, *pushed = forge.commit(11)
    _hung_then_answered(committed_client, db_session, forge, tmp_path,
                        [(before, after, [after], False) for before, after in zip([base, *pushed], pushed)])
    assert branch_shas(db_session) == [base, *pushed]
    assert jobs_per_commit(db_session) == {sha: 1 for sha in [base, *pushed]}
    assert "perfci.alerts.redetect_branch" in {name for name, _ in sent_tasks}  # detection follows git's order


def test_a_forced_push_whose_first_fetch_failed_is_completed_as_a_forced_push(committed_client, sent_tasks, db_session, forge,
                                                                              tmp_path):
    base, old = forge.commit(2)
    forge.git("reset", "--quiet", "--hard", base)
    [new] = forge.commit(1, "fwd: the rewrite")
    forge.git("tag", "old", old)  # the forced-away commit stays fetchable, as it would on a forge for a while
    repo_id = _hung_then_answered(committed_client, db_session, forge, tmp_path,
                                  [("0" * 40, old, [base, old], False), (old, new, [new], True)])
    assert branch_shas(db_session) == [base, new]
    abandoned = committed_client.get(f"/api/v1/repositories/{repo_id}/commits", params={"branch": "main", "abandoned": True}).json()
    assert [c["sha"] for c in abandoned["items"]] == [old]
    forgotten = [args for name, args in sent_tasks if name == "perfci.alerts.forget_abandoned"]
    assert forgotten and forgotten[-1][1] == [db_session.scalar(select(Commit.id).where(Commit.sha == old))]
