"""End to end, real everything: a signed push of three dataplane commits goes through uvicorn,
PostgreSQL, Redis and a Celery worker to three jobs, which `perfci agent run` processes measure
with the sim backend; the series API then shows the third commit's extra instructions per packet.

On the way the agent is stopped three ways: SIGTERM in the middle of a job (the repetition
finishes, the job is released at once, exit 0), SIGKILL in the middle of a job (the lease expires,
beat requeues the job, a restarted agent completes it: exactly one result set), and the server
stack (API and beat) goes down while the agent measures (the result waits in the spool and is
uploaded once the server is back).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess

import pytest
from sqlalchemy import create_engine, text

from tests.e2e.e2e_support import (BIN, Stack, agent_argv, agent_env, free_port, healthy, make_history, server_env, signed_push,
                         start_api, start_worker)
from perfci_agent.daemon import host, identity
from perfci_agent.measure import default_core
from tests.server.server_support import SECRET

pytestmark = [pytest.mark.services, pytest.mark.dataplane]

REPOSITORY = "perfci-org/dataplane"
LEASE_SECONDS = 15
# Within the sim backend's packet caps, so the result's config is the job's config as stored.
CONFIG = {"name": "self-64B-sim", "packets": 50_000, "warmup": 1_000, "backend": "sim", "repetitions": 2}


def agent_log_has(proc, pattern: str) -> bool:
    return re.search(pattern, proc.text()) is not None


def test_push_to_series_through_sigterm_sigkill_and_a_server_outage(tmp_path, database, broker, stack: Stack):
    repo = tmp_path / "repo"
    repo.mkdir()
    shas = make_history(repo)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    (tmp_path / "server").mkdir()  # beat keeps its schedule there
    env = server_env(database, broker, tmp_path / "server", port, lease_seconds=LEASE_SECONDS, requeue_interval_seconds=1)
    start_worker(stack, env)
    beat = stack.add("beat", [str(BIN / "perfci"), "beat"], env).start()
    api, admin = start_api(stack, env, port)
    repo_id = admin.post("/repositories", {"name": REPOSITORY, "forge": "github", "clone_url": str(repo), "webhook_secret": SECRET})["id"]
    admin.post("/configs", CONFIG)
    enrollment = admin.post("/enrollment-tokens", {"note": "e2e"})["token"]

    state = tmp_path / "agent"
    agent_toml = tmp_path / "agent.toml"
    argv, environment = agent_argv(tmp_path, url, "e2e-dut", enrollment), agent_env(env)

    def job(job_id: int) -> dict:
        return admin.get(f"/jobs/{job_id}")

    # --- enroll, push, three jobs --------------------------------------------------------------
    first = stack.add("agent-1", argv, environment).start()
    stack.wait_for("the agent to enroll", lambda: (state / "agent.token").exists() and admin.get("/machines")["items"], 120)
    assert (state / "agent.token").stat().st_mode & 0o777 == 0o600
    check = subprocess.run([str(BIN / "perfci"), "agent", "check", "--config", str(agent_toml), "--json"],
                           env=environment, capture_output=True, text=True, timeout=120)
    lines = {(c["name"], c["status"]) for c in json.loads(check.stdout)["checks"]}
    assert check.returncode == 0 and {("server", "ok"), ("auth", "ok"), ("token", "ok")} <= lines, check.stdout + check.stderr
    assert signed_push(admin, repo, REPOSITORY, shas)["status"] == "scheduled"
    jobs = stack.wait_for("the worker to schedule 3 jobs", lambda: admin.get("/jobs")["items"] if admin.get("/jobs")["total"] == 3 else None, 60)
    job_of = {j["commit"]: j["id"] for j in jobs}
    first_job = job_of[shas[0]]

    # --- SIGTERM during a repetition: it finishes, the job is released, exit 0 -----------------
    stack.wait_for("agent 1 to start measuring", lambda: agent_log_has(first, rf"job {first_job} attempt 1 .*repetition 1/2"), 180)
    first.signal(signal.SIGTERM)
    assert first.wait(timeout=120) == 0, stack.logs()
    assert agent_log_has(first, rf"job {first_job} attempt 1 .*released"), first.tail()
    released = job(first_job)
    assert released["state"] == "queued" and released["max_attempts"] == 4  # a release costs no attempt
    assert "released by the agent" in released["runs"][0]["reason"]

    # --- SIGKILL during a repetition: the lease expires, beat requeues ------------------------
    second = stack.add("agent-2", argv, environment).start()
    stack.wait_for("agent 2 to start measuring", lambda: agent_log_has(second, rf"job {first_job} attempt 2 .*repetition 1/2"), 180)
    assert "enrolled as" not in second.text()  # the stored token is reused: enrolled once
    second.signal(signal.SIGKILL)
    second.wait(timeout=30)
    stack.wait_for("the expired lease to be requeued", lambda: job(first_job)["state"] == "queued", LEASE_SECONDS + 60)
    assert job(first_job)["runs"][1]["status"] == "expired"

    # --- a restarted agent completes everything; the server stack goes down on the last job ----
    third = stack.add("agent-3", argv, environment).start()
    last_job = job_of[shas[2]]
    stack.wait_for("agent 3 to claim the last job", lambda: agent_log_has(third, rf"job {last_job} attempt 1 .*claimed"), 300)
    api.stop()
    beat.stop()  # beat would requeue the job while renewals cannot reach the API
    spooled = state / "spool" / f"job-{last_job}-attempt-1.json"
    stack.wait_for("the result to wait in the spool", lambda: spooled.exists() and agent_log_has(third, rf"job {last_job} attempt 1: upload failed"), 300)
    engine = create_engine(database)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT state FROM jobs WHERE id = :id"), {"id": last_job}).scalar() in ("leased", "running")
    engine.dispose()
    assert json.loads(spooled.read_bytes())["commit"] == shas[2]
    api.start()  # beat comes back after the upload: its first sweep would requeue the lease that ran out meanwhile
    stack.wait_for("the spooled result to be uploaded", lambda: healthy(admin) and job(last_job)["state"] == "done", 120)
    # the server commits before it answers, and the agent removes the spooled file when the answer
    # arrives, then logs it: wait for the line before looking at the spool
    stack.wait_for("the agent to log the upload", lambda: agent_log_has(third, rf"job {last_job} attempt 1: uploaded \((already )?stored\)"), 30)
    assert not spooled.exists() and not list((state / "spool" / "rejected").iterdir())
    beat.start()

    # --- every job done, exactly one result set each ------------------------------------------
    for sha in shas:
        runs = job(job_of[sha])["runs"]
        assert job(job_of[sha])["state"] == "done" and [r["status"] for r in runs].count("ok") == 1, runs
    assert [r["status"] for r in job(first_job)["runs"]] == ["expired", "expired", "ok"]
    machine_id = admin.get("/machines")["items"][0]["id"]
    series = admin.get("/series", repository_id=repo_id, branch="main", machine_id=machine_id, config=CONFIG["name"],
                       metric="ipp", backend="sim")
    assert [p["commit"] for p in series["points"]] == shas
    ipp = [[s["value"] for s in p["samples"]] for p in series["points"]]
    assert all(len(values) == 2 for values in ipp), ipp  # one result set of two repetitions per commit
    base, docs, regressed = (values[0] for values in ipp)
    assert all(len(set(values)) == 1 for values in ipp), ipp  # sim is exact: repetitions agree
    assert docs == base, ipp  # a docs change costs no instruction
    assert regressed > base * 1.01, ipp
    # the host's deviations from its tuned state are recorded with every result
    core = default_core()
    expected = host.tuned_state(core, identity.this_machine(core), ["sim"]).model_dump()
    engine = create_engine(database)
    with engine.connect() as conn:
        recorded = conn.execute(text("SELECT tuning FROM runs WHERE status = 'ok'")).scalars().all()
    engine.dispose()
    assert recorded == [expected] * 3
    assert third.running
    third.signal(signal.SIGTERM)
    assert third.wait(timeout=60) == 0, third.tail()
