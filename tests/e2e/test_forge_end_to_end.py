"""What engineers see on their forge, end to end: a real Gitea (built from its Go module) receives
real `git push`es over HTTP and sends real push and pull_request deliveries to `perfci server`
(PostgreSQL, a Celery worker on Redis); a `perfci agent run` daemon builds the real dataplane at
each commit and measures it with `sim`; statuses and the pull request's comment are read back
through Gitea's API.

- the first push of a repository whose head is a regression is not green;
- a commit on a new branch carrying regression (c) fails on the branch (judged against its base);
- a pull request whose head carries regression (a) fails, with one comment naming the
  store-forward blocks and the function; a second push to it edits that comment.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.e2e_support import ROOT, agent_argv, agent_env, base_repository, free_port, git, server_env, start_api, start_worker

pytestmark = [pytest.mark.dataplane, pytest.mark.services, pytest.mark.timeout(45 * 60)]

REGRESSIONS = ROOT / "dataplane" / "regressions"
CONFIG = {"name": "self-64B-short", "packets": 500_000, "warmup": 50_000, "backend": "sim", "repetitions": 1}
MEASURED_S = 20 * 60  # a hang detector: builds and valgrind runs on a busy 2-core host


def _commit(work: Path, message: str, patch: str | None = None) -> str:
    if patch:
        git(work, "apply", str(REGRESSIONS / patch))
    else:
        with open(work / "dataplane" / "README.md", "a") as fh:
            fh.write(f"\n{message}\n")
    git(work, "commit", "-qam", message)
    return git(work, "rev-parse", "HEAD")


def test_statuses_and_the_pull_request_comment_on_a_real_gitea(gitea, database, broker, stack, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = server_env(database, broker, tmp_path / "server", port, gitea_api_url=f"{gitea.url}/api/v1",
                     gitea_token=gitea.token, public_url=url)
    _, admin = start_api(stack, env, port)
    start_worker(stack, env)
    repo = gitea.create_repo("dataplane-e2e")
    secret = secrets.token_hex(16)
    admin.post("/repositories", {"name": repo.full_name, "forge": "gitea", "clone_url": gitea.clone_url(repo), "webhook_secret": secret})
    admin.post("/configs", CONFIG)
    enrollment = admin.post("/enrollment-tokens", {"note": "e2e gitea"})["token"]
    gitea.add_webhook(repo, f"{url}/api/v1/webhooks/gitea", secret)
    stack.add("agent", agent_argv(tmp_path, url, "dut-01", enrollment), agent_env(env)).start()

    def final(sha: str, context: str) -> dict[str, Any] | None:
        """The newest status of a context once it is a verdict (not pending)."""
        for status in gitea.commit_statuses(repo, sha):  # newest first
            if status["context"] == context:
                return status if status["status"] != "pending" else None
        return None

    work = tmp_path / "work"
    work.mkdir()
    base = base_repository(work)
    stalled_tx = _commit(work, "fwd: transmit each packet on its own", "c-per-packet-tx.patch")

    # 1. The repository's first push: its head is a regression. Never green by absence.
    gitea.push(repo, work, "main")
    head = stack.wait_for("the first push's verdict", lambda: final(stalled_tx, "perfci/dut-01"), MEASURED_S, interval=2)
    assert head["status"] == "failure", head
    assert head["description"].startswith("regression: ipp +"), head
    assert final(base, "perfci/dut-01")["status"] == "warning"  # the root commit: no baseline, no verdict

    # 2. Regression (c) on a new branch started at the base: judged against main's history.
    git(work, "checkout", "-q", "-b", "feature-c", base)
    on_branch = _commit(work, "fwd: transmit each packet on its own, again", "c-per-packet-tx.patch")
    gitea.push(repo, work, "feature-c")
    branch = stack.wait_for("the branch commit's verdict", lambda: final(on_branch, "perfci/dut-01"), MEASURED_S, interval=2)
    assert branch["status"] == "failure", branch
    page = httpx.get(branch["target_url"], timeout=30)  # a page a browser opens, no token
    assert page.status_code == 200 and "ipp" in page.text

    # 3. A pull request whose head carries regression (a): measured against its merge-base.
    git(work, "checkout", "-q", "-b", "feature-a", base)
    staged = _commit(work, "fwd: stage the MAC header through a vector", "a-store-forward-block.patch")
    gitea.push(repo, work, "feature-a")
    pull = gitea.open_pull(repo, "feature-a", "main", "fwd: stage the MAC header through a vector")
    verdict = stack.wait_for("the pull request's verdict", lambda: final(staged, "perfci/pr/dut-01/main"), MEASURED_S, interval=2)
    assert verdict["status"] == "failure", verdict
    assert "sf_blocks_pp from zero" in verdict["description"], verdict
    assert any(s["status"] == "pending" for s in gitea.commit_statuses(repo, staged) if s["context"] == "perfci/pr/dut-01/main")

    def verdict_comment(head: str) -> dict[str, Any] | None:
        """The pull request's one comment once it gives the verdict on ``head``. The status and the comment are
        two deliveries (two tasks), so either may land first: a comment still "measuring" is not it yet."""
        comments = gitea.issue_comments(repo, pull["number"])
        assert len(comments) <= 1, [c["body"][:80] for c in comments]  # edited in place, never a second comment
        body = comments[0]["body"] if comments else ""
        return comments[0] if f"head `{head[:12]}`" in body and not body.startswith("### perfci: measuring") else None

    comment = stack.wait_for("the pull request's comment", lambda: verdict_comment(staged), MEASURED_S, interval=2)
    assert "store-forward" in comment["body"] and "mac\\_rewrite" in comment["body"], comment["body"]
    first_id = comment["id"]

    # 4. A second push to the pull request: the same comment is edited for the new head.
    again = _commit(work, "docs: note the staging")
    gitea.push(repo, work, "feature-a")

    assert stack.wait_for("the new head's verdict", lambda: final(again, "perfci/pr/dut-01/main"), MEASURED_S, interval=2)
    comment = stack.wait_for("the comment to be edited for the new head", lambda: verdict_comment(again), MEASURED_S,
                             interval=2)
    assert comment["id"] == first_id
    assert "store-forward" in comment["body"]
