"""How long an engineer waits on the forge: push -> status, pull request opened -> verdict comment.

A real Gitea (`bash .ci/gitea` builds it; PERFCI_GITEA_BIN) sends its deliveries to `perfci server`
(PostgreSQL, a Celery worker on Redis); one `perfci agent run` daemon on the `sim` backend builds the
real dataplane at each commit and measures it (config self-64B-short, 1 repetition). The agent polls as
deployed (poll_seconds at its default: an idle claim waits on the server until a job is queued). Timed from the
`git push` (or the pull request's creation through Gitea's API) to the moment Gitea's API shows:

- push -> status: the pushed commit's `perfci/<machine>` status in a final state (not pending),
  for a one-commit push (a documentation change on main: the agent reuses its source tree's build
  and sim counts; the agent's own claim -> upload time of each is reported too, and with
  --code-pushes the same for pushes that change a source file, built and simulated: the peer);
- pull request -> comment: the pull request's comment naming its head with the verdict, for a
  branch of one commit whose own push was measured first (so the head's build is cached; the pair,
  head and merge-base interleaved, is measured after the pull request opens). Also reported: the
  first comment ("measuring ..."), which comes as soon as the jobs exist.

Prints each figure's median, minimum and maximum over the rounds, and the host's load average
before and after (the runs share the machine's cores with whatever else runs).

    PERFCI_GITEA_BIN=$(bash .ci/gitea) .venv/bin/python benchmarks/forge/run.py [--pushes 5] [--pulls 3] [--code-pushes 0] [--json] [--smoke]

The run fails (exit 1) unless every status it times ends in success (a failed job's status would
time a failure), or when a documentation push changed more than dataplane/README.md, was built or
simulated rather than served from the cache, or its job left no timing in the agent's log. ``--smoke``:
one push, no pull request. Uses (and recreates) its own database `perfci_bench_forge` and Redis
database 12 (benchmarks/owned.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar


sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: the benchmarks and tests packages
from benchmarks.forge.stack import forge_stack
from benchmarks.premise import require
from tests.e2e.e2e_support import Stack, base_repository, git

CONFIG = {"name": "self-64B-short", "packets": 500_000, "warmup": 50_000, "backend": "sim", "repetitions": 1}
WAIT_S = 20 * 60
T = TypeVar("T")


def wait(what: str, check: Callable[[], T | None], stack: Stack) -> T:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}\n{stack.logs()}")


def docs_commit(work: Path, text: str) -> str:
    with open(work / "dataplane" / "README.md", "a") as fh:
        fh.write(f"\n{text}\n")
    git(work, "commit", "-qam", f"docs: {text}")
    return git(work, "rev-parse", "HEAD")


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {"p50_s": statistics.median(values), "min_s": min(values), "max_s": max(values), "n": len(values)}


def run(pushes: int, pulls: int, tmp: Path, code_pushes: int = 0) -> dict[str, Any]:
    with forge_stack(tmp, "forge", CONFIG, "dut-01") as forge:
        stack, gitea, repo = forge.stack, forge.gitea, forge.repo

        def final(sha: str, context: str) -> str | None:
            """The newest ``context`` status of ``sha`` once it is final (not pending)."""
            for status in gitea.commit_statuses(repo, sha):
                if status["context"] == context:
                    return None if status["status"] == "pending" else status["status"]
            return None

        work = tmp / "work"
        work.mkdir()
        base_repository(work)
        gitea.push(repo, work, "main")  # warm-up: the root commit, built and measured once
        wait("the first push", lambda: final(git(work, "rev-parse", "HEAD"), "perfci/dut-01"), stack)
        load_before = os.getloadavg()

        push_s, docs_shas = [], []
        for i in range(pushes):
            sha = docs_commit(work, f"push {i}")
            docs_shas.append(sha)
            start = time.monotonic()
            gitea.push(repo, work, "main")
            state = wait(f"push {i}'s status", lambda: final(sha, "perfci/dut-01"), stack)
            push_s.append(time.monotonic() - start)
            require(state == "success", f"push {i}'s status is {state}, not success")
        build_dirs = builds_in(tmp / "agent" / "cache")

        code_s, code_shas = [], []
        for i in range(code_pushes):
            sha = code_commit(work, f"push {i}")
            code_shas.append(sha)
            start = time.monotonic()
            gitea.push(repo, work, "main")
            state = wait(f"code push {i}'s status", lambda: final(sha, "perfci/dut-01"), stack)
            code_s.append(time.monotonic() - start)
            require(state == "success", f"code push {i}'s status is {state}, not success")
        agent_log = (tmp / "agent.log").read_text(errors="replace")
        docs_push = docs_push_figures(work, docs_shas, code_shas, code_s, agent_log, build_dirs)

        first_s, verdict_s = [], []
        for i in range(pulls):
            git(work, "checkout", "-q", "-b", f"pr-{i}", "main")
            head = docs_commit(work, f"pull request {i}")
            gitea.push(repo, work, f"pr-{i}")
            wait(f"branch pr-{i}'s status", lambda: final(head, "perfci/dut-01"), stack)
            start = time.monotonic()
            number = gitea.open_pull(repo, f"pr-{i}", "main", f"pull request {i}")["number"]

            def comment(measured: bool) -> bool:
                for c in gitea.issue_comments(repo, number):
                    if f"`{head[:12]}`" in c["body"] and (not measured or "measuring" not in c["body"].split("\n", 1)[0]):
                        return True
                return False

            wait(f"pull request {i}'s first comment", lambda: comment(False), stack)
            first_s.append(time.monotonic() - start)
            state = wait(f"pull request {i}'s verdict", lambda: comment(True) and final(head, "perfci/pr/dut-01/main"), stack)
            verdict_s.append(time.monotonic() - start)
            require(state == "success", f"pull request {i}'s status is {state}, not success")
            git(work, "checkout", "-q", "main")
        return {"push_to_status": summary(push_s), "pull_to_first_comment": summary(first_s),
                "pull_to_verdict_comment": summary(verdict_s), "docs_push": docs_push,
                "load_before": load_before, "load_after": os.getloadavg(),
                "cores": os.cpu_count(), "backend": "sim", "config": CONFIG["name"]}


# --- a documentation-only push, as the agent did it -----------------------------------------------
# The timed pushes above change dataplane/README.md only. The agent's own log says, per job, the
# time from its claim to the acknowledged upload, whether the build came from its cache and whether
# the sim counts were measured or reused; the figures below come from there, with the build
# directories the agent's cache holds after those pushes. Peer, in the same run: pushes that change
# a source file (--code-pushes), which the agent must build and simulate.

JOB_LINE = re.compile(r"job \d+ attempt \d+ commit (?P<sha>[0-9a-f]{12}) config \S+: (?P<event>.*)$")


def code_commit(work: Path, text: str) -> str:
    """A commit that changes a source file (a comment): a new build and a new sim measurement."""
    with open(work / "dataplane" / "src" / "fwd.c", "a") as fh:
        fh.write(f"\n/* {text} */\n")
    git(work, "commit", "-qam", f"fwd: {text}")
    return git(work, "rev-parse", "HEAD")


def builds_in(cache: Path) -> int:
    """Finished build directories under the agent's cache (names starting with '.' are in progress)."""
    return sum(1 for d in (cache / "builds").iterdir() if d.is_dir() and not d.name.startswith(".")) if (cache / "builds").is_dir() else 0


def agent_jobs(log: str, shas: list[str]) -> dict[str, dict[str, Any]]:
    """Per commit, from the agent's log: claim -> upload seconds, build cached or done, sim measured or reused."""
    jobs: dict[str, dict[str, Any]] = {sha[:12]: {"claim_to_upload_s": None, "build": None, "sim": "measured"} for sha in shas}
    for line in log.splitlines():
        m = JOB_LINE.search(line)
        if not m or m["sha"] not in jobs:
            continue
        job, event = jobs[m["sha"]], m["event"]
        if (done := re.match(r"finished in ([\d.]+) s", event)) is not None:
            job["claim_to_upload_s"] = float(done[1])
        elif (built := re.match(r"build (cached|done) in", event)) is not None:
            job["build"] = built[1]
        elif event.startswith("sim counts reused"):
            job["sim"] = "reused"
    return jobs


def docs_push_figures(work: Path, docs: list[str], code: list[str], code_s: list[float], log: str, build_dirs: int) -> dict[str, Any]:
    """The agent's claim -> upload time of the documentation-only pushes (and of the code pushes, the
    peer); fails when a timed push changed more than the documentation or its job left no timing."""
    for sha in docs:
        changed = git(work, "diff", "--name-only", f"{sha}^", sha).split()
        require(changed == ["dataplane/README.md"], f"the docs push {sha[:12]} changed {changed}, not dataplane/README.md alone")
    jobs = agent_jobs(log, docs + code)
    missing = [sha for sha, job in jobs.items() if job["claim_to_upload_s"] is None]
    require(not missing, f"the agent's log has no claim -> upload time for {', '.join(missing)}")
    docs_jobs = [jobs[sha[:12]] for sha in docs]
    out: dict[str, Any] = {
        "claim_to_upload": summary([j["claim_to_upload_s"] for j in docs_jobs]),
        "builds_cached": sum(j["build"] == "cached" for j in docs_jobs), "sim_reused": sum(j["sim"] == "reused" for j in docs_jobs),
        "build_dirs_after": build_dirs, "n": len(docs),
    }
    # the premise: a documentation push is neither built nor simulated (its source tree's build and counts are the warm-up's)
    require(out["builds_cached"] == len(docs) and build_dirs == 1,
            f"{out['builds_cached']} of {len(docs)} documentation pushes took the build from the cache, {build_dirs} build directories")
    require(out["sim_reused"] == len(docs), f"{out['sim_reused']} of {len(docs)} documentation pushes reused the sim counts")
    if code:
        out["code_push_to_status"] = summary(code_s)
        out["code_claim_to_upload"] = summary([jobs[sha[:12]]["claim_to_upload_s"] for sha in code])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pushes", type=int, default=5, help="one-commit pushes timed (after a warm-up push)")
    parser.add_argument("--pulls", type=int, default=3, help="pull requests timed")
    parser.add_argument("--code-pushes", type=int, default=0, help="one-commit pushes that change a source file, timed after "
                        "the documentation pushes (the peer of their agent figures)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--smoke", action="store_true", help="one push, no pull request")
    args = parser.parse_args()
    if args.smoke:
        args.pushes, args.pulls = 1, 0
    with tempfile.TemporaryDirectory(prefix="perfci-forge-bench-") as tmp:
        figures = run(args.pushes, args.pulls, Path(tmp), args.code_pushes)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"forge latency on a real Gitea, sim backend ({figures['config']}), {figures['cores']} cores, "
          f"load {figures['load_before'][0]:.2f} before, {figures['load_after'][0]:.2f} after")
    for key, label in (("push_to_status", "push -> status"), ("pull_to_first_comment", "pull request -> first comment"),
                       ("pull_to_verdict_comment", "pull request -> verdict comment")):
        f = figures[key]
        if not f["n"]:
            continue
        print(f"  {label:34s} p50 {f['p50_s']:6.1f} s  (min {f['min_s']:.1f}, max {f['max_s']:.1f}, n={f['n']})")
    d = figures["docs_push"]
    rows = [("docs push: agent claim -> upload", d["claim_to_upload"])]
    if "code_push_to_status" in d:
        rows += [("code push -> status", d["code_push_to_status"]), ("code push: agent claim -> upload", d["code_claim_to_upload"])]
    for label, f in rows:
        print(f"  {label:34s} p50 {f['p50_s']:6.1f} s  (min {f['min_s']:.1f}, max {f['max_s']:.1f}, n={f['n']})")
    print(f"  docs pushes: {d['builds_cached']} of {d['n']} builds from the cache, {d['sim_reused']} of {d['n']} sim counts reused, "
          f"{d['build_dirs_after']} build directories after them")


if __name__ == "__main__":
    main()
