"""The agent's failure paths against the real server (uvicorn + PostgreSQL; tasks in-process):
what is not the commit's fault goes to the failure endpoint, what the server refuses for good is
kept aside with the reason, and a restart uploads what the spool holds. Nothing here measures, so
the agent runs in this process, one loop turn at a time.
"""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.e2e.e2e_support import Stack, free_port, git, server_env, signed_push, start_api
from perfci_agent.daemon import host
from perfci_agent.daemon.agent import Agent
from perfci_agent.daemon.config import load
from perfci_agent.server_api import AgentClient
from perfci_agent.measure import default_core
from perfci_core.result import BenchConfig, ResultDocument
from tests.server.server_support import SECRET

pytestmark = pytest.mark.services
CONFIG = {"name": "self-64B-sim", "packets": 50_000, "warmup": 1_000, "backend": "sim", "repetitions": 2}


@pytest.fixture
def server(tmp_path, database, stack: Stack):
    port = free_port()
    # one attempt per job: a failed attempt settles the job, so each scenario sees only its own job
    env = server_env(database, None, tmp_path / "server", port, max_attempts=1)
    _, admin = start_api(stack, env, port)
    return admin


@pytest.fixture
def upstream(tmp_path) -> Path:
    repo = tmp_path / "upstream"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    return repo


def new_commit(repo: Path, subject: str) -> str:
    git(repo, "-c", "user.email=dev@perfci.invalid", "-c", "user.name=dev", "commit", "-q", "--allow-empty", "-m", subject)
    return git(repo, "rev-parse", "HEAD")


def agent_for(server, tmp_path: Path, **settings: str) -> Agent:
    env = {"PERFCI_AGENT_SERVER_URL": server.base_url, "PERFCI_AGENT_MACHINE_NAME": "failures-dut",
           "PERFCI_AGENT_STATE_DIR": str(tmp_path / "agent"), "PERFCI_AGENT_BACKENDS": "sim",
           "PERFCI_AGENT_CORES": str(default_core()), "PERFCI_AGENT_POLL_SECONDS": "0.1",
           **{f"PERFCI_AGENT_{k.upper()}": v for k, v in settings.items()}}
    agent = Agent(load(None, environ=env), threading.Event())
    agent.start()
    return agent


def only_job(server, sha: str) -> dict:
    [job] = [j for j in server.get("/jobs")["items"] if j["commit"] == sha]
    return server.get(f"/jobs/{job['id']}")


def register(server, name: str, clone_url: str) -> None:
    server.post("/repositories", {"name": name, "forge": "github", "clone_url": clone_url, "webhook_secret": SECRET})


def test_what_is_not_the_commits_fault_is_reported_as_a_failure(server, tmp_path, upstream):
    server.post("/configs", CONFIG)
    agent = agent_for(server, tmp_path, enrollment_token=server.post("/enrollment-tokens", {"note": "t"})["token"])

    # the repository cannot be cloned
    register(server, "perfci-org/gone", str(tmp_path / "no-such-repository"))
    gone = new_commit(upstream, "a")
    signed_push(server, upstream, "perfci-org/gone", [gone])
    agent.step()
    job = only_job(server, gone)
    assert job["state"] == "failed" and job["runs"][0]["status"] == "error"
    assert "cloning" in job["runs"][0]["reason"] and "failed" in job["runs"][0]["reason"]

    # a host that drifted from its tuned state, with refuse_untuned
    tuned = host.tuned_state(agent.config.core, agent.machine, ["sim"])
    if tuned.ok:
        pytest.skip("this host is in its tuned state: refuse_untuned has nothing to refuse")
    register(server, "perfci-org/dataplane", str(upstream))
    sha = new_commit(upstream, "b")
    signed_push(server, upstream, "perfci-org/dataplane", [sha])
    refusing = agent_for(server, tmp_path, refuse_untuned="true")
    refusing.step()  # the push's baseline (its parent, a new branch's first commit has none measured)
    refusing.step()
    job = only_job(server, sha)
    assert job["state"] == "failed" and job["runs"][0]["status"] == "error"
    assert job["runs"][0]["reason"] == "host is not in its tuned state (refuse_untuned): " + "; ".join(tuned.deviations)


def document(agent: Agent, sha: str, reason: str = "meson: compile error in fwd.c") -> bytes:
    now = datetime.now(timezone.utc)
    doc = ResultDocument(status="build_failed", reason=reason, commit=sha,
                         config=BenchConfig(**{k: v for k, v in CONFIG.items() if k not in ("backend", "repetitions")}),
                         backend="sim", machine=agent.machine.details, machine_id=agent.machine.machine_id,
                         started_at=now, finished_at=now)
    return doc.model_dump_json(by_alias=True).encode()


def test_a_restart_uploads_the_spool_and_sets_aside_what_the_server_refuses(server, tmp_path, upstream):
    server.post("/configs", CONFIG)
    register(server, "perfci-org/dataplane", str(upstream))
    first = agent_for(server, tmp_path, enrollment_token=server.post("/enrollment-tokens", {"note": "t"})["token"])
    shas = [new_commit(upstream, name) for name in ("a", "b")]
    signed_push(server, upstream, "perfci-org/dataplane", shas)
    with AgentClient(server.base_url, first.token) as client:
        claims = {c["commit"]: c for c in (client.claim(), client.claim())}
    good, bad = claims[shas[0]], claims[shas[1]]
    # What a crashed agent left behind: a result for the first job, and one naming the wrong commit.
    good_doc, wrong_doc = document(first, shas[0]), document(first, shas[0], "another build log")
    first.spool.put(good["job_id"], good["attempt"], good_doc)
    first.spool.put(bad["job_id"], bad["attempt"], wrong_doc)

    restarted = agent_for(server, tmp_path)
    restarted.drain_spool()
    assert restarted.spool.pending() == []
    stored = only_job(server, shas[0])
    assert stored["state"] == "failed" and stored["runs"][0]["status"] == "build_failed"  # a result, uploaded
    refused = only_job(server, shas[1])
    assert refused["runs"][0]["status"] == "error"
    assert refused["runs"][0]["reason"].startswith("result refused by the server: result does not belong to this job")
    kept = restarted.spool.rejected_dir / f"job-{bad['job_id']}-attempt-{bad['attempt']}.json"
    assert kept.read_bytes() == wrong_doc
    assert (kept.parent / (kept.name + ".reason")).read_text().startswith("422 ")

    # The same document again is acknowledged as already stored; a different one for that attempt is refused.
    assert restarted.deliver(restarted.spool.put(good["job_id"], good["attempt"], good_doc)) is True
    assert restarted.spool.pending() == []
    again = restarted.spool.put(good["job_id"], good["attempt"], wrong_doc)
    assert restarted.deliver(again) is False
    assert (restarted.spool.rejected_dir / (again.path.name + ".reason")).read_text().startswith("409 ")
    assert only_job(server, shas[0])["runs"][0]["status"] == "build_failed"  # unchanged
