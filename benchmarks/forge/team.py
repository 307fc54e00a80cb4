"""A small team's day on a real Gitea: is every check mark right, at every moment, in every workflow?

A real Gitea (`bash .ci/gitea` builds it; PERFCI_GITEA_BIN) receives plain `git push`es and pull
requests opened, pushed to and closed through its API; it sends its deliveries to `perfci server`
(PostgreSQL, a Celery worker on Redis); one `perfci agent run` daemon on the `sim` backend builds the
dataplane at each commit and measures it (config self-64B-short, 1 repetition). Regressions from
dataplane/regressions/ sit on known commits; documentation commits (dataplane/README.md) keep the
rest cheap. The day (``--smoke``: the short one):

- main: the dataplane, a documentation commit; later a hotfix carrying regression (c);
- feature-a: regression (a), pull request into main; later main merged into it (GitHub's "Update branch");
- feature-docs: documentation, pull request into main; main merged into it while its first head is queued;
- feature-d: regression (d) and documentation, pull request into main; rebased onto main and force-pushed;
- feature-f1: regression (f), pull request into main; feature-f2 stacked on it (documentation), proposed
  into both feature-f1 and main (two pull requests, one head), then amended and force-pushed;
- feature-closed: documentation, pull request closed while its jobs are queued.

Ground truth and scores: benchmarks/forge/team_score.py. A poller reads every status and comment once
a second. Each score must be 0: false failure (a commit or pull request carrying no regression of its
own shown `failure` at any time), false success (a regression's own commit or pull request `success`
at any time), statuses (or comments) still pending 2 minutes after the last job ended (the smoke day
allows 30 seconds: stricter, and shorter in the tests), duplicate
alert groups, alerts on commits with no regression of their own, regressions never alerted, sites an
explanation does not name. Also printed: push -> status and pull request -> verdict (p50, min, max)
and the host's load average.

    nice PERFCI_GITEA_BIN=$(bash .ci/gitea) .venv/bin/python benchmarks/forge/team.py [--smoke] [--json] [--keep DIR]

Exits 1 when a score is not 0 (after printing the figures and the evidence) or when the premise
fails (nothing measured, no regression alerted). Uses (and recreates) its own database
`perfci_bench_team` and Redis database 12 (benchmarks/owned.py; PERFCI_BENCH_DATABASE_URL /
PERFCI_BENCH_REDIS_URL).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: the benchmarks and tests packages
from benchmarks.forge.stack import forge_stack
from benchmarks.forge.team_score import Day, Poller, PullHead, Truth, git, score
from benchmarks.premise import fail, require
from tests.e2e.e2e_support import ROOT, Stack, base_repository
from tests.forge.gitea import Gitea, Repo

CONFIG = {"name": "self-64B-short", "packets": 500_000, "warmup": 50_000, "backend": "sim", "repetitions": 1}
MACHINE = "dut-01"
REGRESSIONS = ROOT / "dataplane" / "regressions"
# The functions each regression's explanation must name (where sim sees it move: docs/forges.md).
SITES = {
    "a-store-forward-block": ("mac_rewrite",),  # a store-forward block per packet
    "c-per-packet-tx": ("fwd_burst",),  # the transmit call moved into the per-packet loop
    "d-helper-out-of-line": ("ttl_decrement",),  # a new out-of-line function
    "f-ttl-word-over-checksum": ("ttl_decrement",),  # a store-forward block per packet
}
ACTIVE = ("queued", "leased", "running")
QUIET_S = {"full": 120, "smoke": 30}  # "pending 2 minutes after the last job ended"; the smoke is stricter
WAIT_S = 60 * 60  # a hang detector for the whole drain


class Team:
    """The team's shared clone: commits, pushes and pull requests, each recorded for the score."""

    def __init__(self, work: Path, gitea: Gitea, repo: Repo, day: Day, poller: Poller, admin: Any, stack: Stack) -> None:
        self.work, self.gitea, self.repo, self.day, self.poller, self.admin, self.stack = work, gitea, repo, day, poller, admin, stack
        self.open_pulls: dict[int, tuple[str, str]] = {}  # number -> (head branch, base branch)
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:7.1f} s] {text}", file=sys.stderr, flush=True)

    def _made(self, label: str) -> str:
        sha = git(self.work, "rev-parse", "HEAD")
        self.day.labels[sha] = label
        self.poller.track(sha)
        return sha

    def branch(self, name: str, start: str) -> None:
        git(self.work, "checkout", "-q", "-B", name, start)

    def docs(self, text: str) -> str:
        with open(self.work / "dataplane" / "README.md", "a") as fh:
            fh.write(f"\n{text}\n")
        git(self.work, "commit", "-qam", f"docs: {text}")
        return self._made(f"docs on {self.current()}")

    def regress(self, name: str, message: str) -> str:
        git(self.work, "apply", str(REGRESSIONS / f"{name}.patch"))
        git(self.work, "commit", "-qam", message)
        return self._made(f"{name} on {self.current()}")

    def merge(self, other: str) -> str:
        git(self.work, "merge", "-q", "--no-ff", "--no-edit", other)
        return self._made(f"merge of {other} into {self.current()}")

    def rebase(self, onto: str) -> list[str]:
        old = set(git(self.work, "rev-list", f"{onto}..HEAD").split())
        git(self.work, "rebase", "-q", onto)
        copies = [sha for sha in git(self.work, "rev-list", f"{onto}..HEAD").split() if sha not in old]
        for sha in copies:
            self.day.labels[sha] = f"rebased copy on {self.current()}"
            self.poller.track(sha)
        return copies

    def amend(self, text: str) -> str:
        with open(self.work / "dataplane" / "README.md", "a") as fh:
            fh.write(f"\n{text}\n")
        git(self.work, "commit", "-q", "-a", "--amend", "--no-edit")
        return self._made(f"amended on {self.current()}")

    def current(self) -> str:
        return git(self.work, "rev-parse", "--abbrev-ref", "HEAD")

    def push(self, *branches: str, force: bool = False) -> None:
        at = time.monotonic()
        self.gitea.push(self.repo, self.work, *[f"{'+' if force else ''}{b}" for b in branches])
        for name in branches:
            head = git(self.work, "rev-parse", name)
            self.day.pushed.setdefault(head, at)
            for number, (head_branch, base) in self.open_pulls.items():
                if head_branch == name:
                    self._head_set(number, base, head, at)
        self.say(f"pushed {', '.join(branches)}{' (forced)' if force else ''}")

    def _head_set(self, number: int, base: str, head: str, at: float) -> None:
        self.day.pull_heads.append(PullHead(number, base, head, git(self.work, "merge-base", head, base), at))

    def open_pull(self, head: str, base: str, title: str) -> int:
        at = time.monotonic()
        number = self.gitea.open_pull(self.repo, head, base, title)["number"]
        self.open_pulls[number] = (head, base)
        self._head_set(number, base, git(self.work, "rev-parse", head), at)
        self.poller.track_pull(number)
        self.say(f"opened pull request #{number}: {head} -> {base}")
        return number

    def close_pull(self, number: int) -> None:
        self.gitea.close_pull(self.repo, number)
        del self.open_pulls[number]
        self.say(f"closed pull request #{number}")

    def active_jobs(self) -> int:
        return sum(self.admin.get("/jobs", state=state, limit=1)["total"] for state in ACTIVE)

    def answered(self) -> bool:
        """Every pushed head has a status in its series context, every open pull request's head one in its
        context (the server has taken each delivery: a queue empty before that says nothing)."""
        seen = {(s.sha, s.context) for s in list(self.poller.statuses.values())}
        open_heads = {(p.head, self.day.pull_context(p.base)) for p in self.day.pull_heads if p.number in self.open_pulls}
        return {(sha, self.day.series) for sha in self.day.pushed} | open_heads <= seen

    def settle(self) -> None:
        """Wait until the server has answered every push and pull request and no job is queued or running
        (the team works at a pace its agent keeps up with)."""
        deadline = time.monotonic() + WAIT_S
        quiet = 0
        while quiet < 2:
            if time.monotonic() > deadline:
                fail(f"jobs still queued after {WAIT_S} s\n{self.stack.logs()}")
            quiet = quiet + 1 if self.active_jobs() == 0 and self.answered() else 0
            time.sleep(2)
        self.say("no job queued or running")


def smoke_day(team: Team) -> None:
    """Two branches, a pull request with a regression with main merged into it, a pull request closed at once."""
    base = git(team.work, "rev-parse", "HEAD")
    team.day.labels[base] = "the dataplane on main"
    team.poller.track(base)
    team.docs("the ports, described")
    team.push("main")
    team.settle()
    team.branch("feature-a", "main")
    team.regress("a-store-forward-block", "fwd: stage the MAC header through a vector")
    team.push("feature-a")
    team.open_pull("feature-a", "main", "fwd: stage the MAC header through a vector")
    team.branch("feature-closed", "main")
    team.docs("a note nobody needed")
    team.push("feature-closed")
    closed = team.open_pull("feature-closed", "main", "docs: a note nobody needed")
    team.close_pull(closed)  # its jobs are still queued behind feature-a's
    team.settle()
    team.branch("main", "main")
    team.docs("release notes")
    team.push("main")
    team.branch("feature-a", "feature-a")
    team.merge("main")
    team.push("feature-a")


def full_day(team: Team) -> None:
    base = git(team.work, "rev-parse", "HEAD")
    team.day.labels[base] = "the dataplane on main"
    team.poller.track(base)
    team.docs("the ports, described")
    team.push("main")
    team.settle()

    team.branch("feature-a", "main")
    team.regress("a-store-forward-block", "fwd: stage the MAC header through a vector")
    team.push("feature-a")
    team.open_pull("feature-a", "main", "fwd: stage the MAC header through a vector")
    team.settle()

    team.branch("feature-d", "main")
    team.regress("d-helper-out-of-line", "fwd: move ttl_decrement out of line")
    team.docs("ttl_decrement, explained")
    team.push("feature-d")
    team.open_pull("feature-d", "main", "fwd: ttl_decrement out of line")
    team.settle()

    team.branch("feature-f1", "main")
    team.regress("f-ttl-word-over-checksum", "fwd: decrement the TTL as one word")
    team.push("feature-f1")
    team.open_pull("feature-f1", "main", "fwd: decrement the TTL as one word")
    team.branch("feature-f2", "feature-f1")
    team.docs("the TTL word, documented")
    team.push("feature-f2")
    team.open_pull("feature-f2", "feature-f1", "docs: the TTL word (stacked on feature-f1)")
    team.open_pull("feature-f2", "main", "docs: the TTL word (into main)")  # two pull requests, one head
    team.settle()

    team.branch("feature-docs", "main")
    team.docs("how to run the harness")
    team.push("feature-docs")
    team.open_pull("feature-docs", "main", "docs: how to run the harness")
    team.branch("feature-closed", "main")
    team.docs("a note nobody needed")
    team.push("feature-closed")
    closed = team.open_pull("feature-closed", "main", "docs: a note nobody needed")
    team.close_pull(closed)  # its jobs are still queued behind feature-docs's
    team.branch("main", "main")
    team.regress("c-per-packet-tx", "hotfix: transmit each packet as soon as it is forwarded")
    team.push("main")
    team.branch("feature-docs", "feature-docs")
    team.merge("main")  # "Update branch" while the pull request's first head is still queued: superseded
    team.push("feature-docs")
    team.settle()

    team.branch("feature-d", "feature-d")
    team.rebase("main")
    team.push("feature-d", force=True)
    team.branch("feature-f2", "feature-f2")
    team.amend("the TTL word, documented, with its checksum")
    team.push("feature-f2", force=True)
    team.branch("feature-a", "feature-a")
    team.merge("main")
    team.push("feature-a")


def drain(team: Team, quiet_s: float) -> float:
    """Wait for the last job to end and ``quiet_s`` more; returns the seconds waited after the last job."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        team.settle()
        ended = max(datetime.fromisoformat(job["updated_at"]) for job in jobs(team.admin))
        if ended.tzinfo is None:
            ended = ended.replace(tzinfo=UTC)
        left = quiet_s - (datetime.now(UTC) - ended).total_seconds()
        if left > 0:
            team.say(f"last job ended; waiting {left:.0f} s more")
            time.sleep(left + 2)
        if team.active_jobs() == 0:
            team.poller.poll()  # one more read of every status after the quiet period
            return (datetime.now(UTC) - ended).total_seconds()
    fail(f"jobs still coming after {WAIT_S} s\n{team.stack.logs()}")


def jobs(admin: Any) -> list[dict[str, Any]]:
    out, offset = [], 0
    while True:
        page = admin.get("/jobs", limit=100, offset=offset)
        out += page["items"]
        offset += len(page["items"])
        if not page["items"] or offset >= page["total"]:
            return out


def run(smoke: bool, tmp: Path) -> dict[str, Any]:
    with forge_stack(tmp, "team", CONFIG, MACHINE) as forge:
        gitea, repo, admin, stack = forge.gitea, forge.repo, forge.admin, forge.stack
        poller = Poller(f"{gitea.url}/api/v1", gitea.token, repo.full_name)
        poller.start()
        try:
            work = tmp / "work"
            work.mkdir()
            base_repository(work)
            day = Day(MACHINE, sites=SITES)
            team = Team(work, gitea, repo, day, poller, admin, stack)
            load_before = os.getloadavg()
            (smoke_day if smoke else full_day)(team)
            quiet_s = drain(team, QUIET_S["smoke" if smoke else "full"])
            poller.stop()
            all_jobs = jobs(admin)
            alerts = admin.get("/alerts", limit=100)["items"]
            truth = Truth(work, {name: REGRESSIONS / f"{name}.patch" for name in SITES})
            require(any(j["state"] == "done" for j in all_jobs), "no job was measured")
            require(poller.polls > 0, "the poller never read Gitea")
            require(any(a["direction"] == "regression" for a in alerts), "no regression was alerted")
            figures = score(day, truth, poller, alerts)
            (tmp / "timeline.json").write_text(json.dumps(timeline(day, truth, poller, team.started), indent=1))
            figures.update({
                "day": "smoke" if smoke else "full", "branches": len(git(work, "branch", "--format=%(refname:short)").split()),
                "pull_requests": len({p.number for p in day.pull_heads}), "commits": len(day.labels),
                "jobs": {state: sum(j["state"] == state for j in all_jobs) for state in ("done", "failed", *ACTIVE)},
                "alerts": [f"{a['id']} {a['direction']} {a['branch']} {a['first_bad']['sha'][:12]}: {a['summary']}" for a in alerts],
                "polls": poller.polls, "poll_errors": poller.errors[:5], "quiet_after_last_job_s": quiet_s,
                "load_before": load_before, "load_after": os.getloadavg(),
                "load_max_1min": max(poller.loads, default=0.0), "cores": os.cpu_count(), "backend": "sim", "config": CONFIG["name"],
                "duration_s": time.monotonic() - team.started,
            })
            return figures
        finally:
            if poller._thread.is_alive():
                poller.stop()


def timeline(day: Day, truth: Truth, poller: Poller, started: float) -> dict[str, Any]:
    """Every status and comment body the poller saw, in order, with the ground truth of each commit."""
    return {
        "commits": {sha: {"label": label, "carries": sorted(truth.carried(sha)), "own": sorted(truth.own(sha))}
                    for sha, label in day.labels.items()},
        "pull_heads": [{"number": p.number, "base": p.base, "head": p.head, "merge_base": p.merge_base, "at_s": p.set_at - started}
                       for p in day.pull_heads],
        "statuses": [{"at_s": round(s.at - started, 1), "sha": s.sha[:12], "context": s.context, "state": s.state,
                      "description": s.description} for s in poller.in_order()],
        "comments": {number: [{"at_s": round(at - started, 1), "body": body} for at, body in history]
                     for number, history in poller.comments.items()},
    }


def report(figures: dict[str, Any]) -> None:
    print(f"team day ({figures['day']}) on a real Gitea, sim backend ({figures['config']}), {figures['cores']} cores: "
          f"{figures['branches']} branches, {figures['pull_requests']} pull requests, {figures['commits']} commits, "
          f"jobs {figures['jobs']}, {figures['duration_s'] / 60:.1f} min")
    print(f"  load average (1 min): {figures['load_before'][0]:.2f} before, max {figures['load_max_1min']:.2f} during, "
          f"{figures['load_after'][0]:.2f} after; {figures['polls']} polls")
    for key, label in (("push_to_status", "push -> status"), ("pull_to_verdict", "pull request -> verdict")):
        f = figures["latency"][key]
        if f["n"]:
            print(f"  {label:26s} p50 {f['p50_s']:6.1f} s  (min {f['min_s']:.1f}, max {f['max_s']:.1f}, n={f['n']})")
    print("  scores (each should be 0):")
    for key, value in figures["scores"].items():
        print(f"    {key:22s} {value}")
        for point in figures["evidence"][key]:
            print(f"      - {point}")
    print("  alerts:")
    for line in figures["alerts"]:
        print(f"    {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="the short day: two branches, one pull request measured, one closed")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--keep", type=Path, help="a new folder to run in and keep (the logs of Gitea, the server, the worker, the agent, "
                                                  "the team's clone and timeline.json: every status and comment as the poller saw it)")
    args = parser.parse_args()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=False)
        figures = run(args.smoke, args.keep.resolve())
    else:
        with tempfile.TemporaryDirectory(prefix="perfci-team-day-") as tmp:
            figures = run(args.smoke, Path(tmp))
    if args.json:
        print(json.dumps(figures, indent=2, default=str))
    else:
        report(figures)
    wrong = {k: v for k, v in figures["scores"].items() if v}
    if wrong:
        raise SystemExit(f"scores not 0: {wrong}")


if __name__ == "__main__":
    main()
