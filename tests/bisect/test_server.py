"""Server-orchestrated bisection against the real server: PostgreSQL, Redis and a real Celery
worker process advance the search; the test plays the agent through the real agent endpoints,
building and measuring each claimed commit with the real `measure()` and uploading its document."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np

import pytest
from celery import Celery
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from perfci_agent import fingerprint
from perfci_agent.cpuinfo import read_cpuid
from perfci_agent.measure import default_core, measure
from perfci_core.result import BenchConfig
from perfci_server import db, dispatch
from perfci_server.app import create_app
from perfci_server.bisect import service as bisect_service
from perfci_server.jobs import repository as job_sql
from perfci_server.models import Alert, AlertGroup, Bisect, BranchCommit, Commit
from perfci_server.settings import get_settings
from tests.server.server_support import ADMIN, GITHUB_COMMITS, body_of, complete_pushes, create_config, create_repository, enroll, github_headers, push_github, push_payload
from tests.support.services import TEST_DATABASE_URL

from tests.bisect.bisect_repo import BROKEN_INDEX, IMPROVEMENT_INDEX, REGRESSION_INDEX, git

ROOT = Path(__file__).resolve().parents[2]
SIM_CONFIG = {"name": "self-64B-short", "packets": 100_000, "warmup": 2_000, "backend": "sim", "repetitions": 1}
MACHINE_NAME = "dut-bisect"


def push_range(client: TestClient, repo: Path, shas: list[str], session: Any = None, sent_tasks: Any = None,
               repository_id: int | None = None) -> None:
    """The repository's commits arrive as one GitHub push, as from the forge (``repository_id``: the
    repository's, to wait for the worker's completion on; ids are not reset between tests)."""
    commits = []
    for sha in shas:
        author, email, date, message = git(repo, "log", "-1", "--format=%an%x1f%ae%x1f%cI%x1f%B", sha).split("\x1f", 3)
        commits.append({"id": sha, "message": message.strip(), "timestamp": date, "author": {"name": author, "email": email}})
    payload = push_payload(before="0" * 40, after=shas[-1], commits=commits, head_commit=commits[-1])
    body = body_of(payload)
    response = client.post("/api/v1/webhooks/github", content=body, headers=github_headers(body, delivery="bisect-push"))
    assert response.status_code in (200, 201, 202), response.text
    # The push's completion (example.com cannot be fetched: the listed commits go on the branch):
    # run here in the test's session, or by the worker, which is waited for.
    if session is not None:
        complete_pushes(session, sent_tasks)
        return
    assert repository_id is not None, "waiting for the worker needs the repository's id"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listed = client.get(f"/api/v1/repositories/{repository_id}/commits", params={"branch": "main"}, headers=ADMIN)
        if listed.status_code == 200 and listed.json()["total"] == len(shas):
            return
        time.sleep(0.2)
    raise AssertionError("the worker did not complete the push")


def enroll_this_machine(client: TestClient) -> dict:
    fp = fingerprint.collect(default_core(), "self", read_cpuid())
    token = client.post("/api/v1/enrollment-tokens", json={"note": "bisect"}, headers=ADMIN).json()["token"]
    response = client.post("/api/v1/agent/enroll", json={
        "enrollment_token": token, "name": "agent-bisect", "machine_id": fingerprint.machine_id(fp), "machine": fp,
        "machine_name": MACHINE_NAME, "backends": ["sim"]})
    assert response.status_code == 201, response.text
    return {"headers": {"Authorization": f"Bearer {response.json()['token']}"}, "machine_id": response.json()["machine_id"]}


def play_agent_once(client: TestClient, agent: dict, repo: Path, cache: Path) -> str | None:
    """Claim one job, build + measure it with measure(), upload the document. The claimed sha, or None."""
    claim = client.post("/api/v1/agent/jobs/claim", headers=agent["headers"])
    if claim.status_code == 204:
        return None
    assert claim.status_code == 200, claim.text
    job = claim.json()
    doc = measure(repo, job["commit"], backend=job["backend"], reps=job["repetitions"],
                  config=BenchConfig.model_validate(job["config"]), cache_dir=cache)
    upload = client.put(f"/api/v1/agent/jobs/{job['job_id']}/attempts/{job['attempt']}/result",
                        content=doc.model_dump_json(by_alias=True), headers={**agent["headers"], "Content-Type": "application/json"})
    assert upload.status_code == 201, upload.text
    return job["commit"]


def worker_env(redis_url: str) -> dict[str, str]:
    return {**os.environ, "PERFCI_DATABASE_URL": TEST_DATABASE_URL, "PERFCI_BROKER_URL": redis_url, "PERFCI_ENV": "development"}


@contextmanager
def http_server(env: dict[str, str]):
    """`perfci server` on a free local port, until the block ends."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([str(Path(sys.executable).parent / "perfci"), "server", "--host", "127.0.0.1", "--port", str(port),
                                "--no-migrate"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/api/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.3)
        else:
            raise AssertionError("perfci server did not come up")
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(autouse=True)
def _no_backfill(monkeypatch: pytest.MonkeyPatch) -> None:
    """Measuring every pushed commit for the machine that enrolls is not what these tests test."""
    monkeypatch.setenv("PERFCI_BACKFILL_COMMITS", "0")
    get_settings.cache_clear()


@pytest.fixture
def api(committed, redis_url, monkeypatch):
    """The app with real per-request sessions; tasks go to the worker through Redis."""
    producer = Celery("perfci-bisect-test", broker=redis_url)

    def send(name: str, args: tuple) -> None:
        producer.send_task(name, args=args, queue="perfci")

    monkeypatch.setattr(dispatch, "sender", send)
    with TestClient(create_app()) as test_client:
        yield test_client
    producer.close()


@pytest.mark.services
@pytest.mark.dataplane
def test_server_bisect_finds_the_same_culprit_through_the_agent_endpoints(api, worker, bisect_repo, redis_url):
    process, log = worker
    repo, shas, cache = bisect_repo["repo"], bisect_repo["shas"], bisect_repo["cache"]
    repository = create_repository(api)
    push_range(api, repo, shas, repository_id=repository["id"])
    config = create_config(api, **SIM_CONFIG)
    agent = enroll_this_machine(api)

    # A result already in the server (the bad commit, measured by an earlier job) is reused.
    with db.session_scope() as s:
        bad_id = s.scalar(select(Commit.id).where(Commit.sha == shas[-1]))
        job_sql.insert_missing_jobs(s, [bad_id], [agent["machine_id"]], [config["id"]], 3)
    assert play_agent_once(api, agent, repo, cache) == shas[-1]

    created = api.post("/api/v1/bisects", headers=ADMIN, json={
        "repository": "perfci-org/dataplane", "branch": "main", "good": shas[0], "bad": shas[-1],
        "machine": MACHINE_NAME, "config": SIM_CONFIG["name"], "metric": "ipp", "backend": "sim"})
    assert created.status_code == 201, created.text
    bisect_id = created.json()["id"]

    measured: list[str] = []
    deadline = time.monotonic() + 1200
    state = created.json()
    while state["status"] == "running" and time.monotonic() < deadline and process.poll() is None:
        sha = play_agent_once(api, agent, repo, cache)
        if sha:
            measured.append(sha)
        else:
            time.sleep(0.3)
        state = api.get(f"/api/v1/bisects/{bisect_id}").json()
    log.seek(0)
    assert state["status"] == "culprit", f"{state}\nworker log:\n{log.read()[-4000:]}"
    assert state["culprit"]["sha"] == shas[REGRESSION_INDEX] and state["culprit"]["author"] == "Rita Gression"
    assert state["parent"]["sha"] == shas[REGRESSION_INDEX - 1]
    assert state["kind"] == "regression" and state["change"]["change_pct"] > 0
    assert shas[-1] not in measured and state["reused"] >= 1  # the stored result was used, not re-measured
    assert shas[BROKEN_INDEX] in measured  # tried, failed to build, skipped
    [move] = state["opposing"]  # the improvement at 3, seen by the first step, isolated on its own
    assert move["kind"] == "improvement" and move["isolated"] and move["culprit"]["sha"] == shas[IMPROVEMENT_INDEX], move
    hunted = {0, len(shas) - 1} | {s["mid"] for s in state["steps"] if s["phase"] == "search" and s["stage"] == "hunt"}
    assert state["builds"] == len(measured) and len(hunted) <= state["expected_builds"], state["steps"]
    log.seek(0)
    assert "perfci.bisect.advance" in log.read()  # the worker advanced it after each upload

    # The CLI against a real server process: every result is stored now, so a new bisect of the
    # same range finishes from stored results alone, without a single new job.
    with http_server(worker_env(redis_url)) as url:
        cli = subprocess.run(
            [str(Path(sys.executable).parent / "perfci"), "bisect", "--machine", MACHINE_NAME, "--repository", "perfci-org/dataplane",
             "--repo", str(repo), "--good", shas[0], "--bad", "HEAD", "--metric", "ipp", "--config", SIM_CONFIG["name"],
             "--backend", "sim", "--server", url, "--token", ADMIN["Authorization"].split()[1], "--json"],
            capture_output=True, text=True, timeout=300)
    assert cli.returncode == 3, cli.stderr[-3000:]  # the culprit, and the improvement isolated too
    followed = json.loads(cli.stdout)
    assert followed["culprit"]["sha"] == shas[REGRESSION_INDEX] and followed["builds"] == 0 and followed["id"] != bisect_id


@pytest.mark.services
def test_api_rejects_bad_input_and_needs_a_token(client, session, sent_tasks):
    create_repository(client)
    push_github(client)
    complete_pushes(session, sent_tasks)
    create_config(client, **SIM_CONFIG)
    agent = enroll(client, machine={"cpu_model": "bisect-test"})
    first, _, last = GITHUB_COMMITS
    good = {"repository": "perfci-org/dataplane", "branch": "main", "good": first, "bad": last,
            "machine_id": agent["machine_id"], "config": SIM_CONFIG["name"], "metric": "ipp", "backend": "sim"}
    assert client.post("/api/v1/bisects", json=good).status_code == 401
    cases = [
        ({"machine_id": None, "machine": "nowhere"}, 404, "no machine named"),
        ({"repository": "nope/nope"}, 404, "no repository"),
        ({"branch": "dev"}, 404, "no branch"),
        ({"config": "jumbo"}, 404, "no benchmark config"),
        ({"good": last, "bad": first}, 422, "good must come before bad"),
        ({"metric": "cpp"}, 422, "does not measure cpp"),
        ({"metric": "nope"}, 422, "unknown metric"),
        ({"good": "z" * 40}, 422, "good"),
        ({"machine": "both"}, 422, "exactly one of machine"),
    ]
    for change, code, text in cases:
        body = {k: v for k, v in {**good, **change}.items() if v is not None}
        response = client.post("/api/v1/bisects", json=body, headers=ADMIN)
        assert response.status_code == code and text in response.text, (change, response.text)
    assert client.get("/api/v1/bisects/999", headers=ADMIN).status_code == 404
    assert not sent_tasks.named(bisect_service.ADVANCE_TASK)  # nothing was created

    created = client.post("/api/v1/bisects", json=good, headers=ADMIN)
    assert created.status_code == 201, created.text
    doc = created.json()
    assert doc["status"] == "running" and doc["range_length"] == 3 and doc["expected_builds"] == 4
    assert client.get("/api/v1/bisects", headers=ADMIN).json()["items"][0]["id"] == doc["id"]
    assert sent_tasks.named(bisect_service.ADVANCE_TASK) == [(doc["id"],)]


@pytest.mark.services
def test_start_for_alert_group_is_idempotent_and_needs_a_last_good_commit(client, session, sent_tasks, bisect_repo):
    repo, shas = bisect_repo["repo"], bisect_repo["shas"]
    repository = create_repository(client)
    push_range(client, repo, shas, session, sent_tasks)
    config = create_config(client, **SIM_CONFIG)
    agent = enroll_this_machine(client)
    ids = dict(session.execute(select(Commit.sha, Commit.id)).all())
    branch_id = session.scalar(select(BranchCommit.branch_id).limit(1))
    group = AlertGroup(repository_id=repository["id"], branch_id=branch_id, machine_id=agent["machine_id"],
                       last_good_commit_id=ids[shas[4]], first_bad_commit_id=ids[shas[12]], direction="regression")
    session.add(group)
    session.flush()
    for metric, direction in (("l1d_misses_pp", "improvement"), ("ipp", "regression")):
        session.add(Alert(group_id=group.id, config_id=config["id"], metric=metric, backend="sim", direction=direction,
                          last_good_commit_id=ids[shas[4]], first_bad_commit_id=ids[shas[12]], before_median=1.0,
                          after_median=1.1, change_pct=10.0, confidence=1.0))
    session.flush()

    bisect = bisect_service.start_for_alert_group(session, group.id)
    assert bisect is not None and bisect.metric == "ipp" and bisect.backend == "sim"  # the regressed metric
    assert len(bisect.commit_ids) == 9 and bisect.alert_group_id == group.id
    assert bisect_service.start_for_alert_group(session, group.id).id == bisect.id
    session.commit()
    assert sent_tasks.named(bisect_service.ADVANCE_TASK) == [(bisect.id,)]

    group.last_good_commit_id = None
    other = AlertGroup(repository_id=repository["id"], branch_id=branch_id, machine_id=agent["machine_id"],
                       last_good_commit_id=None, first_bad_commit_id=ids[shas[2]], direction="regression")
    session.add(other)
    session.flush()
    assert bisect_service.start_for_alert_group(session, other.id) is None
    assert session.scalar(select(func.count()).select_from(Bisect)) == 1


def _empty_history(root: Path, n: int) -> list[str]:
    """A git history of ``n`` empty commits: what the server is told about them is all that matters here."""
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    shas = []
    for i in range(n):
        git(root, "commit", "-q", "--allow-empty", "-m", f"change {i}")
        shas.append(git(root, "rev-parse", "HEAD"))
    return shas


@pytest.mark.services
@pytest.mark.parametrize("direction, culprit, opposing", [("regression", 2, 4), (None, 4, 2)])
def test_server_bisect_hunts_a_direction_and_isolates_the_move_against_it(client, session, sent_tasks, tmp_path,
                                                                          direction, culprit, opposing):
    """c1..c6: +1.6 % IPP at c3, -6.4 % at c5 (sim values uploaded through the agent endpoints, as a
    sim agent reports them). The server's search hunts what it is told and reports both commits."""
    from perfci_server.settings import get_settings
    from tests.server.server_support import enroll, result_document

    ipp = [100.0, 100.0, 101.6, 101.6, 95.0976, 95.0976]
    shas = _empty_history(tmp_path / "repo", 6)
    create_repository(client)
    push_range(client, tmp_path / "repo", shas, session, sent_tasks)
    create_config(client, **SIM_CONFIG)
    agent = enroll(client, backends=["sim"])
    body = {"repository": "perfci-org/dataplane", "branch": "main", "good": shas[0], "bad": shas[-1],
            "machine_id": agent["machine_id"], "config": SIM_CONFIG["name"], "metric": "ipp", "backend": "sim"}
    if direction:
        body["direction"] = direction
    created = client.post("/api/v1/bisects", json=body, headers=ADMIN)
    assert created.status_code == 201, created.text
    bisect_id = created.json()["id"]
    assert created.json()["direction"] == (direction or "any")

    config = {"name": SIM_CONFIG["name"], "packets": SIM_CONFIG["packets"], "warmup": SIM_CONFIG["warmup"]}
    measured = []
    for _ in range(30):  # each round: the worker's advance, then the agent measures what it scheduled
        for args in sent_tasks.named(bisect_service.ADVANCE_TASK):
            bisect_service.advance(session, *args, get_settings())
        sent_tasks.clear()
        session.commit()
        claim = client.post("/api/v1/agent/jobs/claim", headers=agent["headers"])
        if claim.status_code == 204:
            break
        job = claim.json()
        index = shas.index(job["commit"])
        measured.append(index)
        doc = result_document(job["commit"], config=config, machine_id=agent["fingerprint"], reps=1, backend="sim",
                              values={"ipp": [ipp[index]]})
        upload = client.put(f"/api/v1/agent/jobs/{job['job_id']}/attempts/{job['attempt']}/result", json=doc,
                            headers=agent["headers"])
        assert upload.status_code == 201, upload.text
    state = client.get(f"/api/v1/bisects/{bisect_id}", headers=ADMIN).json()
    assert state["status"] == "culprit", state
    assert state["culprit"]["sha"] == shas[culprit] and state["parent"]["index"] == culprit - 1
    [move] = state["opposing"]
    assert move["isolated"] and not move["dismissed"] and move["status"] == "culprit"
    assert move["culprit"]["sha"] == shas[opposing] and move["parent"]["index"] == opposing - 1
    assert move["kind"] == ("improvement" if direction else "regression")
    assert move["good"]["index"] < opposing <= move["bad"]["index"]
    assert sorted(measured) == list(range(6))  # every commit once: 6 commits, two culprits and their parents
    assert any(f"isolated at commit {opposing}" in n for n in state["notes"])


@pytest.mark.services
def test_a_bisect_started_for_an_alert_hunts_the_alerts_direction(client, session, sent_tasks, bisect_repo):
    repo, shas = bisect_repo["repo"], bisect_repo["shas"]
    repository = create_repository(client)
    push_range(client, repo, shas, session, sent_tasks)
    config = create_config(client, **SIM_CONFIG)
    agent = enroll_this_machine(client)
    ids = dict(session.execute(select(Commit.sha, Commit.id)).all())
    branch_id = session.scalar(select(BranchCommit.branch_id).limit(1))
    group = AlertGroup(repository_id=repository["id"], branch_id=branch_id, machine_id=agent["machine_id"],
                       last_good_commit_id=ids[shas[1]], first_bad_commit_id=ids[shas[5]], direction="improvement")
    session.add(group)
    session.flush()
    session.add(Alert(group_id=group.id, config_id=config["id"], metric="ipp", backend="sim", direction="improvement",
                      last_good_commit_id=ids[shas[1]], first_bad_commit_id=ids[shas[5]], before_median=1.0,
                      after_median=0.9, change_pct=-10.0, confidence=1.0))
    session.flush()
    auto = bisect_service.start_for_alert_group(session, group.id)
    assert auto.state["direction"] == "improvement"
    created = client.post("/api/v1/bisects", headers=ADMIN, json={
        "repository": "perfci-org/dataplane", "good": shas[1], "bad": shas[5], "machine_id": agent["machine_id"],
        "config": SIM_CONFIG["name"], "metric": "ipp", "backend": "sim", "alert_group_id": group.id})
    assert created.status_code == 201 and created.json()["direction"] == "improvement", created.text
    bad = client.post("/api/v1/bisects", headers=ADMIN, json={
        "repository": "perfci-org/dataplane", "good": shas[1], "bad": shas[5], "machine_id": agent["machine_id"],
        "config": SIM_CONFIG["name"], "metric": "ipp", "backend": "sim", "direction": "worse"})
    assert bad.status_code == 422 and "direction" in bad.text


TSC_CONFIG = {"name": "self-64B-tsc", "packets": 100_000, "warmup": 2_000, "backend": "tsc", "repetitions": 5}


def _start_tsc_bisect(client, session, sent_tasks, tmp_path, n: int) -> tuple[list[str], dict, int]:
    """A bisect of ``n`` pushed commits on a ``tsc`` config of 5 repetitions: (shas, the agent, the bisect's id)."""
    from tests.server.server_support import enroll

    shas = _empty_history(tmp_path / "repo", n)
    create_repository(client)
    push_range(client, tmp_path / "repo", shas, session, sent_tasks)  # no config yet: nothing is measured
    create_config(client, **TSC_CONFIG)
    agent = enroll(client, backends=["tsc"])
    body = {"repository": "perfci-org/dataplane", "branch": "main", "good": shas[0], "bad": shas[-1],
            "machine_id": agent["machine_id"], "config": TSC_CONFIG["name"], "metric": "cpp", "backend": "tsc"}
    response = client.post("/api/v1/bisects", json=body, headers=ADMIN)
    assert response.status_code == 201, response.text
    _advance_all(session, sent_tasks)
    return shas, agent, response.json()["id"]


def _advance_all(session, sent_tasks) -> None:
    for args in sent_tasks.named(bisect_service.ADVANCE_TASK):
        bisect_service.advance(session, *args, get_settings())
    session.commit()


def _upload(client, agent: dict, job: dict, values: list[float]) -> None:
    from tests.server.server_support import result_document

    config = {k: TSC_CONFIG[k] for k in ("name", "packets", "warmup")}
    doc = result_document(job["commit"], config=config, machine_id=agent["fingerprint"], reps=len(values),
                          values={"cpp": values})
    upload = client.put(f"/api/v1/agent/jobs/{job['job_id']}/attempts/{job['attempt']}/result", json=doc,
                        headers=agent["headers"])
    assert upload.status_code == 201, upload.text


@pytest.mark.services
def test_a_step_that_wants_two_new_commits_on_a_noisy_backend_measures_them_as_one_interleaved_session(
        client, session, sent_tasks, tmp_path):
    shas, agent, bisect_id = _start_tsc_bisect(client, session, sent_tasks, tmp_path, 6)
    claim = client.post("/api/v1/agent/jobs/claim", headers=agent["headers"]).json()
    assert {claim["commit"], claim["partner"]["commit"]} == {shas[0], shas[-1]}  # the endpoints, together
    assert client.post("/api/v1/agent/jobs/claim", headers=agent["headers"]).status_code == 204
    # The config measures 5 repetitions; the session takes the 8 pairs whose paired test can reach alpha = 0.01
    # and room for a burst (Policy.pairs_needed): 10. 5 pairs cannot (2 / 2^5 = 0.06).
    assert claim["repetitions"] == 10

    # The session's 10 pairs: the host's speed swings +-20 % between pairs, the bad commit is 3 %
    # slower in every pair. On all 20 runs the two commits overlap (no verdict); on the pairs they differ.
    host = [0.8, 1.2, 0.9, 1.1, 1.0, 0.85, 1.15, 0.95, 1.05, 0.9]
    cpp = {shas[0]: [12.0 * h for h in host], shas[-1]: [12.36 * h for h in host]}
    for side in (claim, claim["partner"]):
        _upload(client, agent, side, cpp[side["commit"]])
    bisect_service.advance(session, bisect_id, get_settings())
    session.commit()
    state = client.get(f"/api/v1/bisects/{bisect_id}", headers=ADMIN).json()
    [endpoints] = [s for s in state["steps"] if s["phase"] == "endpoints"]
    assert endpoints["lo_mid"]["paired"] and endpoints["lo_mid"]["verdict"] == "different", endpoints
    assert endpoints["lo_mid"]["n"] == [10, 10] and state["status"] == "running"


@pytest.mark.services
def test_a_noisy_server_bisect_at_the_configs_5_repetitions_names_the_culprit(client, session, sent_tasks, tmp_path):
    """One job per commit, 5 repetitions: each comparison is one look at the whole alpha. Spent over the 8 looks
    of a runner that adds repetitions, no 5 against 5 comparison could reach its share, and every such bisect
    ended inconclusive."""
    shas, agent, bisect_id = _start_tsc_bisect(client, session, sent_tasks, tmp_path, 8)
    rng = np.random.default_rng(3)
    level = [12.0 if i < 5 else 13.2 for i in range(len(shas))]  # +10 % from the sixth commit on
    for _ in range(12):
        claim = client.post("/api/v1/agent/jobs/claim", headers=agent["headers"])
        if claim.status_code == 204:
            break
        for job in (claim.json(), claim.json()["partner"]):
            if job is None:
                continue
            i = shas.index(job["commit"])
            reps = claim.json()["repetitions"]
            _upload(client, agent, job, list(level[i] * (1 + 0.005 * rng.standard_normal(reps))))
        _advance_all(session, sent_tasks)
    state = client.get(f"/api/v1/bisects/{bisect_id}", headers=ADMIN).json()
    assert state["status"] == "culprit", state["message"]
    assert state["culprit"]["sha"] == shas[5] and state["kind"] == "regression"
