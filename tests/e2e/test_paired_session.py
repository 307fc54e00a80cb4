"""An interleaved pair of confirmation jobs through the real agent, end to end: uvicorn and
PostgreSQL (tasks in-process), the agent daemon in this process, the real dataplane built at two
commits and measured with `tsc`. The pair is queued as detection queues a suspect's k - 1 and k
(partner confirm jobs); one claim leases both, the agent measures them A B A B in one session and
uploads each side to its own job; each run names the other job, so detection can pair them."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from tests.e2e.e2e_support import free_port, make_history, server_env, signed_push, start_api
from perfci_agent.daemon.agent import Agent
from perfci_agent.daemon.config import load
from perfci_agent.measure import default_core
from perfci_server.jobs import repository as job_sql
from perfci_server.models import Commit, Run
from tests.server.server_support import SECRET

pytestmark = [pytest.mark.services, pytest.mark.dataplane]
REPOSITORY = "perfci-org/dataplane"
CONFIG = {"name": "self-64B-tsc", "packets": 50_000, "warmup": 1_000, "backend": "tsc", "repetitions": 2}


def test_a_paired_claim_is_measured_interleaved_and_each_side_lands_on_its_job(tmp_path, database, stack, caplog):
    caplog.set_level("INFO", logger="perfci_agent.daemon")
    port = free_port()
    _, server = start_api(stack, server_env(database, None, tmp_path / "server", port), port)
    upstream = tmp_path / "upstream"
    shas = make_history(upstream)
    repository = server.post("/repositories", {"name": REPOSITORY, "forge": "github", "clone_url": str(upstream),
                                               "webhook_secret": SECRET})
    config = server.post("/configs", {**CONFIG, "enabled": False})  # the pushes queue nothing: only the pair is measured
    env = {"PERFCI_AGENT_SERVER_URL": server.base_url, "PERFCI_AGENT_MACHINE_NAME": "paired-dut",
           "PERFCI_AGENT_STATE_DIR": str(tmp_path / "agent"), "PERFCI_AGENT_BACKENDS": "tsc",
           "PERFCI_AGENT_CORES": str(default_core()), "PERFCI_AGENT_POLL_SECONDS": "0.1",
           "PERFCI_AGENT_ENROLLMENT_TOKEN": server.post("/enrollment-tokens", {"note": "pair"})["token"]}
    agent = Agent(load(None, environ=env), threading.Event())
    agent.start()
    signed_push(server, upstream, REPOSITORY, shas)
    server.request("PATCH", f"/configs/{config['id']}", json={"enabled": True})

    engine = create_engine(database)
    with Session(engine) as session, session.begin():
        base, head = (session.scalar(select(Commit.id).where(Commit.sha == sha)) for sha in shas[1:])
        machine_id = server.get("/machines")["items"][0]["id"]
        job_sql.insert_confirm_jobs(session, machine_id, config["id"], [(base, 1, "pair"), (head, 1, "pair")], 3)
        assert job_sql.link_partners(session, machine_id, config["id"], [((base, 1), (head, 1))]) == 1

    agent.step()  # one claim: both jobs, measured in one session
    jobs = {j["commit"]: server.get(f"/jobs/{j['id']}") for j in server.get("/jobs")["items"]}
    sides = [jobs[shas[1]], jobs[shas[2]]]
    assert [j["state"] for j in sides] == ["done", "done"], sides
    assert sides[0]["partner_job_id"] == sides[1]["id"] and sides[1]["partner_job_id"] == sides[0]["id"]
    assert [j["runs"][0]["paired_with"] for j in sides] == [sides[1]["id"], sides[0]["id"]]
    assert "claimed with" in caplog.text and "pair order seed" in caplog.text
    with Session(engine) as session:
        runs = session.scalars(select(Run).where(Run.job_id.in_([j["id"] for j in sides]))).all()
        assert [r.status for r in runs] == ["ok", "ok"] and {r.backend for r in runs} == {"tsc"}
    series = server.get("/series", repository_id=repository["id"], branch="main", machine_id=machine_id,
                        config=CONFIG["name"], metric="cpp", backend="tsc")
    assert [len(p["samples"]) for p in series["points"]] == [2, 2]  # each side's two repetitions, on its own commit
    engine.dispose()
