"""Server-orchestrated bisection through a real agent, end to end: uvicorn, PostgreSQL, Redis, a
Celery worker and a `perfci agent run` daemon that builds and measures every job with sim.

The bisect tests' 16-commit repository reaches the server in signed pushes: the good end, then the
middle commits while the benchmark config is paused (the server knows them, nothing measures
them), then the bad end. The agent measures both ends as ordinary push jobs, and the bad end's
baseline (the commit before it, which nothing had measured). `perfci bisect
--machine` (its own process) then starts the bisect and follows it while the worker schedules a
job per commit the search asks for and the agent measures them: it must name exactly the
regression commit, skip the commit that does not build, and stay within ceil(log2 16) + 2 builds
counting the ends.
"""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess

import pytest

from tests.bisect.bisect_repo import BROKEN_INDEX, IMPROVEMENT_INDEX, REGRESSION_INDEX, make_repository
from tests.e2e.e2e_support import (BIN, ROOT, Stack, agent_argv, agent_env, free_port, server_env, signed_push, start_api,
                         start_worker)
from perfci_server.settings import DEVELOPMENT_ADMIN_TOKEN
from tests.server.server_support import SECRET

pytestmark = [pytest.mark.services, pytest.mark.dataplane]

REPOSITORY = "perfci-org/dataplane"
MACHINE = "e2e-bisect-dut"
# One repetition: sim is deterministic. Within sim's packet and warmup caps, so the uploaded
# result's config is the job's config as stored.
CONFIG = {"name": "self-64B-short", "packets": 30_000, "warmup": 1_000, "backend": "sim", "repetitions": 1}


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> tuple:
    repo = tmp_path_factory.mktemp("bisect-through-agent") / "repo"
    return repo, make_repository(repo)


def test_server_bisect_through_a_real_agent_names_the_regression_commit(tmp_path, database, broker, stack: Stack, history):
    repo, shas = history
    good, bad = shas[0], shas[-1]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = server_env(database, broker, tmp_path / "server", port)
    worker = start_worker(stack, env)
    _, admin = start_api(stack, env, port)
    admin.post("/repositories", {"name": REPOSITORY, "forge": "github", "clone_url": str(repo), "webhook_secret": SECRET})
    config = admin.post("/configs", CONFIG)
    enrollment = admin.post("/enrollment-tokens", {"note": "bisect"})["token"]
    agent = stack.add("agent", agent_argv(tmp_path, url, MACHINE, enrollment), agent_env(env)).start()
    stack.wait_for("the agent to enroll", lambda: admin.get("/machines")["items"], 120)

    def jobs() -> list[dict]:
        return admin.get("/jobs", limit=100)["items"]

    # --- the history arrives; the agent measures the two ends as push jobs ------------------
    assert signed_push(admin, repo, REPOSITORY, [good])["status"] == "scheduled"
    stack.wait_for("the good end's job", lambda: len(jobs()) == 1, 60)
    admin.request("PATCH", f"/configs/{config['id']}", json={"enabled": False})
    assert signed_push(admin, repo, REPOSITORY, shas[1:-1], before=good)["commits"] == len(shas) - 2
    repository_id = admin.get("/repositories")["items"][0]["id"]
    stack.wait_for("the middle push to be recorded", lambda: admin.get(f"/repositories/{repository_id}/pushes",
                                                                       complete=False)["items"] == [], 120)
    assert len(jobs()) == 1  # the middle commits are known to the server, not measured: their config is paused
    admin.request("PATCH", f"/configs/{config['id']}", json={"enabled": True})
    signed_push(admin, repo, REPOSITORY, [bad], before=shas[-2])
    stack.wait_for("the agent to measure both ends and the bad end's baseline",
                   lambda: [j["state"] for j in jobs()] == ["done"] * 3, 900)
    end_jobs = {j["id"] for j in jobs()}
    assert {j["commit"] for j in jobs()} == {good, shas[-2], bad}

    # --- `perfci bisect --machine`, run from this project's checkout, which lacks those commits --
    cli = subprocess.run(
        [str(BIN / "perfci"), "bisect", "--machine", MACHINE, "--repository", REPOSITORY, "--good", good, "--bad", bad,
         "--metric", "ipp", "--config", CONFIG["name"], "--backend", "sim", "--server", url,
         "--token", DEVELOPMENT_ADMIN_TOKEN, "--timeout", "1200", "--json"],
        cwd=ROOT, env=agent_env(env), capture_output=True, text=True, timeout=1300)
    # exit 3: the regression, and the improvement the search walked past isolated too
    assert cli.returncode == 3, f"{cli.stdout[-2000:]}\n{cli.stderr[-2000:]}\n{stack.logs()}"
    result = json.loads(cli.stdout)
    assert result["status"] == "culprit", result
    assert result["culprit"]["sha"] == shas[REGRESSION_INDEX] and result["culprit"]["author"] == "Rita Gression"
    assert result["parent"]["sha"] == shas[REGRESSION_INDEX - 1]
    assert result["kind"] == "regression" and result["change"]["change_pct"] > 0
    [move] = result["opposing"]
    assert move["kind"] == "improvement" and move["isolated"] and move["culprit"]["sha"] == shas[IMPROVEMENT_INDEX], move
    middles = [step["mid"] for step in result["steps"] if step["phase"] == "search" and step["stage"] == "hunt"]
    assert BROKEN_INDEX not in middles and BROKEN_INDEX + 1 in middles, result["steps"]  # skipped for its neighbour
    assert result["skipped"] == []  # no unbuildable commit between parent and culprit: unambiguous

    # --- what the agent did for it: one build per commit the search asked for -----------------
    bisect_jobs = [admin.get(f"/jobs/{j['id']}") for j in jobs() if j["id"] not in end_jobs]
    runs = {job["commit"]: [r["status"] for r in job["runs"]] for job in bisect_jobs}
    assert all(len(statuses) == 1 for statuses in runs.values()), runs  # each built and measured once
    assert runs[shas[BROKEN_INDEX]] == ["build_failed"] and runs[shas[REGRESSION_INDEX]] == ["ok"], runs
    assert good not in runs and bad not in runs and result["reused"] >= 2  # the push jobs' results were used
    assert len(runs) == result["builds"]
    bound = math.ceil(math.log2(len(shas))) + 2
    hunted = {shas[i] for i in middles}
    assert result["expected_builds"] == bound and len(hunted) + 2 <= bound, runs  # the two ends count too
    claims = re.findall(r"job (\d+) attempt \d+ commit \w+ config \S+: claimed", agent.text())
    assert sorted(map(int, claims)) == sorted([*end_jobs, *(j["id"] for j in bisect_jobs)])  # all of it by the agent
    assert "perfci.bisect.advance" in worker.text()

    agent.signal(signal.SIGTERM)
    assert agent.wait(timeout=60) == 0, agent.tail()
