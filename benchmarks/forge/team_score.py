"""The team day's ground truth and its scores (benchmarks/forge/team.py drives the day).

Ground truth comes from the commits' content, not from the script's intentions: a commit *carries* a
regression when the regression's patch reverse-applies to its tree (`git apply --cached --check -R`
on a scratch index), so merges, rebases and cherry-picks need no bookkeeping. A commit's *own*
regressions are those it carries and none of its parents does (a merge's own change is what it
differs from both parents); a pull request's own regressions are those its head carries and the
merge-base with its base branch does not.

The poller reads every tracked commit's statuses (Gitea keeps each one posted, so a state that lived
between two polls is seen too) and every pull request's comments once a second through Gitea's API.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

FINAL = {"success", "failure", "error", "warning"}  # Gitea's states; `pending` is the only open one
ENDED_UNMEASURED = "before it was measured"  # superseded / closed / merged before the verdict


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout.strip()


class Truth:
    """Which commit carries which regression, read from the trees of a local repository."""

    def __init__(self, repo: Path, patches: dict[str, Path]) -> None:
        self.repo = repo
        self.patches = patches
        self._carried: dict[str, frozenset[str]] = {}

    def carried(self, sha: str) -> frozenset[str]:
        if sha not in self._carried:
            with tempfile.TemporaryDirectory(prefix="perfci-team-index-") as scratch:
                env = {**os.environ, "GIT_INDEX_FILE": str(Path(scratch) / "index")}
                git(self.repo, "read-tree", sha, env=env)
                self._carried[sha] = frozenset(
                    name for name, patch in self.patches.items()
                    if subprocess.run(["git", "-C", str(self.repo), "apply", "--cached", "--check", "-R", str(patch)],
                                      env=env, capture_output=True).returncode == 0)
        return self._carried[sha]

    def parents(self, sha: str) -> list[str]:
        return git(self.repo, "rev-list", "--parents", "-n", "1", sha).split()[1:]

    def own(self, sha: str) -> frozenset[str]:
        inherited = frozenset().union(*(self.carried(p) for p in self.parents(sha)))
        return self.carried(sha) - inherited

    def merge_base(self, head: str, base: str) -> str:
        return git(self.repo, "merge-base", head, base)


@dataclass
class PullHead:
    """One head a pull request had: when it was set (opened or pushed) and its merge-base then."""

    number: int
    base: str
    head: str
    merge_base: str
    set_at: float


@dataclass
class Seen:
    sha: str
    index: int  # Gitea's index of the status on its commit: the order they were posted in
    context: str
    state: str
    description: str
    at: float  # monotonic time of the poll that first saw it


@dataclass
class Poller:
    """Reads statuses and comments once a second in a thread of its own (its own HTTP client)."""

    api_url: str
    token: str
    repo: str
    interval: float = 1.0
    shas: set[str] = field(default_factory=set)
    pulls: set[int] = field(default_factory=set)
    statuses: dict[tuple[str, int], Seen] = field(default_factory=dict)  # (commit, Gitea's status index there) -> first sighting
    comments: dict[int, list[tuple[float, str]]] = field(default_factory=dict)  # pull -> (time, body) on change
    loads: list[float] = field(default_factory=list)
    polls: int = 0
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="team-poller", daemon=True)
        self._http = httpx.Client(base_url=self.api_url, headers={"Authorization": f"token {self.token}"}, timeout=30)

    def track(self, *shas: str) -> None:
        with self._lock:
            self.shas.update(shas)

    def track_pull(self, number: int) -> None:
        with self._lock:
            self.pulls.add(number)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._http.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.poll()
            except httpx.HTTPError as exc:  # a slow or restarting Gitea: said in the report, the next poll retries
                self.errors.append(f"{exc.__class__.__name__}: {exc}")
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def poll(self) -> None:
        with self._lock:
            shas, pulls = sorted(self.shas), sorted(self.pulls)
        now = time.monotonic()
        for sha in shas:
            response = self._http.get(f"/repos/{self.repo}/commits/{sha}/statuses", params={"sort": "leastindex", "limit": 50})
            response.raise_for_status()
            for status in response.json():
                if (sha, status["id"]) not in self.statuses:
                    self.statuses[(sha, status["id"])] = Seen(sha, status["id"], status["context"], status["status"],
                                                              status.get("description") or "", now)
        for number in pulls:
            response = self._http.get(f"/repos/{self.repo}/issues/{number}/comments")
            response.raise_for_status()
            body = "\n\n".join(c["body"] for c in response.json())
            history = self.comments.setdefault(number, [])
            if not history or history[-1][1] != body:
                history.append((now, body))
        self.loads.append(os.getloadavg()[0])
        self.polls += 1

    def latest(self) -> dict[tuple[str, str], Seen]:
        """The newest status of each (commit, context): a commit's status indexes grow with each post."""
        newest: dict[tuple[str, str], Seen] = {}
        for seen in self.statuses.values():
            key = (seen.sha, seen.context)
            if key not in newest or newest[key].index < seen.index:
                newest[key] = seen
        return newest

    def in_order(self) -> list[Seen]:
        """Every status seen, by the poll that saw it, then by the order of posting."""
        return sorted(self.statuses.values(), key=lambda s: (s.at, s.index))


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {"p50_s": statistics.median(values), "min_s": min(values), "max_s": max(values), "n": len(values)}


@dataclass
class Day:
    """What the script did: pushed heads with their push time, pull-request heads, labels for the report."""

    machine: str
    pushed: dict[str, float] = field(default_factory=dict)  # a pushed branch head -> monotonic time of its push
    pull_heads: list[PullHead] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)  # sha -> what the script made it as
    sites: dict[str, tuple[str, ...]] = field(default_factory=dict)  # regression -> the functions its explanation names

    @property
    def series(self) -> str:
        return f"perfci/{self.machine}"

    def pull_context(self, base: str) -> str:
        return f"perfci/pr/{self.machine}/{base}"

    def label(self, sha: str) -> str:
        return f"{sha[:12]} ({self.labels.get(sha, 'untracked')})"


def score(day: Day, truth: Truth, poller: Poller, alerts: list[dict[str, Any]]) -> dict[str, Any]:
    """Every score of the day (each should be 0) with the evidence of each point, and the latencies."""
    found: dict[str, list[str]] = {"false_failure": [], "false_success": [], "pending_at_end": [], "duplicate_alerts": [],
                                   "spurious_alerts": [], "missed_regressions": [], "missing_sites": [], "unknown_contexts": []}
    pull_of = {(p.head, day.pull_context(p.base)): p for p in day.pull_heads}
    for seen in poller.in_order():
        if seen.context == day.series:
            own = truth.own(seen.sha)
        elif (seen.sha, seen.context) in pull_of:
            pull = pull_of[(seen.sha, seen.context)]
            own = truth.carried(seen.sha) - truth.carried(pull.merge_base)
        else:
            found["unknown_contexts"].append(f"{day.label(seen.sha)} {seen.context}: {seen.state} | {seen.description}")
            continue
        point = f"{day.label(seen.sha)} {seen.context}: {seen.state} | {seen.description}"
        if seen.state == "failure" and not own and point not in found["false_failure"]:
            found["false_failure"].append(point)
        if seen.state == "success" and own and point not in found["false_success"]:
            found["false_success"].append(f"{point} (carries {', '.join(sorted(own))})")
    for (sha, context), seen in poller.latest().items():
        if seen.state == "pending":
            found["pending_at_end"].append(f"{day.label(sha)} {context}: pending | {seen.description}")
    for number, history in poller.comments.items():
        if history and "measuring" in history[-1][1].split("\n", 1)[0]:
            found["pending_at_end"].append(f"pull request #{number}'s comment: {history[-1][1].splitlines()[0]}")

    regressions = [a for a in alerts if a["direction"] == "regression"]
    introduced = {r for sha in day.labels for r in truth.own(sha)}
    by_regression: dict[str, list[dict[str, Any]]] = {}
    for group in regressions:
        own = truth.own(group["first_bad"]["sha"])
        if not own:
            found["spurious_alerts"].append(f"alert {group['id']} on {day.label(group['first_bad']['sha'])}: {group['summary']}")
        for name in own:
            by_regression.setdefault(name, []).append(group)
    for name in sorted(introduced):
        groups = by_regression.get(name, [])
        if not groups:
            found["missed_regressions"].append(name)
        for extra in groups[1:]:
            found["duplicate_alerts"].append(f"{name}: alert {extra['id']} on {day.label(extra['first_bad']['sha'])} "
                                             f"besides alert {groups[0]['id']}")
        if groups:
            text = json.dumps(groups[0]["explanation"]) + groups[0]["summary"]
            found["missing_sites"] += [f"alert {groups[0]['id']} ({name}) does not name {site}" for site in day.sites[name] if site not in text]
    last_head: dict[int, PullHead] = {}
    for pull in day.pull_heads:
        last_head[pull.number] = pull
    for number, pull in sorted(last_head.items()):
        own = truth.carried(pull.head) - truth.carried(pull.merge_base)
        body = poller.comments.get(number, [(0.0, "")])[-1][1]
        if own and "closed" not in body.split("\n", 1)[0]:
            found["missing_sites"] += [f"pull request #{number}'s comment ({name}) does not name {site}"
                                       for name in sorted(own) for site in day.sites[name] if site not in body and site.replace("_", "\\_") not in body]
    return {"scores": {k: len(v) for k, v in found.items()}, "evidence": found, "latency": latencies(day, poller)}


def latencies(day: Day, poller: Poller) -> dict[str, dict[str, float]]:
    """push -> the pushed head's first final series status; a pull request's head set -> its first verdict
    (a final status of its context that is not 'superseded/closed before it was measured')."""
    first: dict[tuple[str, str], float] = {}
    for seen in poller.statuses.values():
        if seen.state in FINAL and ENDED_UNMEASURED not in seen.description:
            key = (seen.sha, seen.context)
            first[key] = min(first.get(key, seen.at), seen.at)
    push = [first[(sha, day.series)] - at for sha, at in day.pushed.items() if (sha, day.series) in first]
    verdict = [first[(p.head, day.pull_context(p.base))] - p.set_at for p in day.pull_heads
               if (p.head, day.pull_context(p.base)) in first]
    return {"push_to_status": summary(push), "pull_to_verdict": summary(verdict)}
