"""The life of a pull request on a real Gitea, step by step, with the webhook deliveries each step
caused: two commits pushed to main, a new branch `feature` pushed, a pull request feature -> main
opened, one more commit pushed to feature (the pull request is synchronized), the pull request
closed. The forge test checks the deliveries; record_fixtures.py saves them as fixtures.

The commits have fixed authors and dates, so their shas are the same on every run.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.forge.gitea import Gitea, Repo
from tests.forge.webhook_listener import Received, WebhookListener

WEBHOOK_PATH = "/webhooks/gitea"
AUTHOR = {"GIT_AUTHOR_NAME": "Perf Tester", "GIT_AUTHOR_EMAIL": "perf@example.invalid",
          "GIT_COMMITTER_NAME": "Perf Tester", "GIT_COMMITTER_EMAIL": "perf@example.invalid"}


@dataclass(frozen=True)
class Shas:
    main_first: str
    main_head: str
    feature_first: str
    feature_head: str


@dataclass(frozen=True)
class PullRequestLife:
    repo: Repo
    hook_id: int
    pull_number: int
    shas: Shas
    push_main: Received
    push_new_branch: Received
    pull_request_opened: Received
    push_feature: Received
    pull_request_synchronized: Received
    pull_request_closed: Received


def git(checkout: Path, *args: str, day: int = 1) -> str:
    env = {**os.environ, **AUTHOR, "GIT_AUTHOR_DATE": f"2026-01-{day:02d}T12:00:00+00:00",
           "GIT_COMMITTER_DATE": f"2026-01-{day:02d}T12:00:00+00:00"}
    return subprocess.run(["git", "-C", str(checkout), *args], check=True, capture_output=True, text=True, env=env).stdout.strip()


def commit(checkout: Path, path: str, text: str, message: str, day: int) -> str:
    (checkout / path).write_text(text)
    git(checkout, "add", path)
    git(checkout, "commit", "-q", "-m", message, day=day)
    return git(checkout, "rev-parse", "HEAD")


def is_event(name: str):
    return lambda received: received.event == name


def run(gitea: Gitea, listener: WebhookListener, checkout: Path, repo_name: str, secret: str) -> PullRequestLife:
    repo = gitea.create_repo(repo_name)
    hook_id = gitea.add_webhook(repo, listener.url + WEBHOOK_PATH, secret)
    checkout.mkdir(parents=True)
    git(checkout, "init", "-q", "-b", "main")

    main_first = commit(checkout, "fwd.c", "int fwd(void) { return 1; }\n", "dataplane: forward one packet", day=1)
    main_head = commit(checkout, "fwd.c", "int fwd(void) { return 2; }\n", "dataplane: forward two packets", day=2)
    mark = len(listener.received)
    gitea.push(repo, checkout, "main:main")
    [push_main] = listener.wait_for(is_event("push"), since=mark)

    git(checkout, "checkout", "-q", "-b", "feature")
    feature_first = commit(checkout, "burst.c", "int burst = 32;\n", "dataplane: bursts of 32", day=3)
    mark = len(listener.received)
    gitea.push(repo, checkout, "feature:feature")
    [push_new_branch] = listener.wait_for(is_event("push"), since=mark)

    mark = len(listener.received)
    pull = gitea.open_pull(repo, head="feature", base="main", title="Bursts of 32", body="Faster, we hope.")
    [opened] = listener.wait_for(is_event("pull_request"), since=mark)

    feature_head = commit(checkout, "burst.c", "int burst = 64;\n", "dataplane: bursts of 64", day=4)
    mark = len(listener.received)
    gitea.push(repo, checkout, "feature:feature")
    [push_feature] = listener.wait_for(is_event("push"), since=mark)
    [synchronized] = listener.wait_for(is_event("pull_request"), since=mark)

    mark = len(listener.received)
    gitea.close_pull(repo, pull["number"])
    [closed] = listener.wait_for(is_event("pull_request"), since=mark)

    return PullRequestLife(repo, hook_id, pull["number"], Shas(main_first, main_head, feature_first, feature_head),
                           push_main, push_new_branch, opened, push_feature, synchronized, closed)
