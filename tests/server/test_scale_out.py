"""Scaling out gives the same verdicts: one workload, run on PostgreSQL + Redis by 1 Celery worker
process and 1 API process, then by 4 worker processes and 2 API processes (requests alternated
between them), leaves the same alert groups, the same final status per commit and context on the
forge, and the same one comment per pull request.

The workload is the ingest benchmark's stepped series (benchmarks/server_ingest/run.py: every
machine's ipp/sim rises 5 % from the middle commit on) on a real git repository the server's
mirror fetches, so the branch's order is git's; its commits arrive as a burst of concurrent push
deliveries to two branches, two agents measure every job, and a pull request opened on a branch
whose head regresses once more runs pull-request evaluation. Each run waits for quiescence
(no task queued or held by a worker, no job left, every push complete, every run detected, every
status and comment delivered) and compares the final state, never timings.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from sqlalchemy import create_engine, text

from perfci_server.forge.github import GitHub
from perfci_server.settings import DEVELOPMENT_ADMIN_TOKEN
from tests.alerts.alerts_support import SIM, document, sim_values
from tests.alerts.forge_server import ForgeServer
from tests.e2e.e2e_support import BIN, Stack, free_port, server_env
from tests.server.git_forge import GitForge
from tests.server.server_support import SECRET, body_of, fixture, github_headers
from tests.support.database import cloned_database

pytestmark = pytest.mark.services

ZERO = "0" * 40
TOKEN = "ghp_" + "s" * 36
REPOSITORY = "perfci-org/dataplane"
PR_NUMBER = 12
MAIN_COMMITS, PUSHED_PER_DELIVERY = 24, 4  # the benchmark's --smoke series, in 6 deliveries
STEP = 1.05  # the benchmark's step (STEP_METRIC ipp/sim), from the middle commit on
IPP = 81.72
MACHINES = tuple({"cpu_model": "Intel(R) Xeon(R) Gold 6338", "cores": 32, "kernel": "6.1.0-18-amd64", "governor": "performance",
             "turbo": False, "host": f"dut-0{i}"} for i in (1, 2))
QUIET_DEADLINE_S = 300.0  # generous: a shared 2-core host; the runs end as soon as they are quiet


class History:
    """The forge's repository: main's stepped series and a feature branch whose second commit
    steps ipp once more; ``ipp(sha)`` is what a machine measures at a commit."""

    def __init__(self, path: Path) -> None:
        self.git = GitForge(path)
        self.main = self.git.commit(MAIN_COMMITS, "fwd: change")
        self.git.git("checkout", "--quiet", "-b", "feature")
        self.feature = self.git.commit(3, "fwd: stage the MAC header")
        self.git.git("checkout", "--quiet", "main")
        self._ipp = {sha: IPP * (STEP if i >= MAIN_COMMITS // 2 else 1.0) for i, sha in enumerate(self.main)}
        self._ipp.update({sha: IPP * STEP * (STEP if i >= 1 else 1.0) for i, sha in enumerate(self.feature)})

    def ipp(self, sha: str) -> float:
        return self._ipp[sha]

    def deliveries(self) -> list[tuple[str, str, list[str]]]:
        """(branch, before, pushed commits) of every push delivery, in the order they are sent."""
        main = [self.main[i:i + PUSHED_PER_DELIVERY] for i in range(0, MAIN_COMMITS, PUSHED_PER_DELIVERY)]
        pushes = [("main", ZERO if i == 0 else main[i - 1][-1], chunk) for i, chunk in enumerate(main)]
        pushes.insert(3, ("feature", ZERO, self.feature[:1]))
        pushes.append(("feature", self.feature[0], self.feature[1:]))
        return pushes


class Deployment:
    """The API processes (requests alternated between them), the workers, the recording forge, and
    the workload's driver: setup, pushes, agents, pull request, quiescence, final state."""

    def __init__(self, stack: Stack, database: str, broker: str, forge: ForgeServer, history: History, apis: int, concurrency: int) -> None:
        self.history, self.forge, self.stack = history, forge, stack
        self.engine = create_engine(database)
        self.queue = redis.Redis.from_url(broker)
        self.queue.flushdb()  # no task of an earlier run
        data_dir = stack.tmp / "server"
        settings = dict(github_api_url=forge.url, github_token=TOKEN, public_url="https://perfci.example.com", log_level="info")
        ports = [free_port() for _ in range(apis)]
        for i, port in enumerate(ports):
            stack.add(f"api-{i}", [str(BIN / "perfci"), "server", "--port", str(port)],
                      server_env(database, broker, data_dir, port, **settings)).start()
        stack.add("worker", [str(BIN / "perfci"), "worker", "--concurrency", str(concurrency)],
                  server_env(database, broker, data_dir, ports[0], **settings)).start()
        self.clients = [httpx.Client(base_url=f"http://127.0.0.1:{port}/api/v1", timeout=60) for port in ports]
        self._next = itertools.cycle(self.clients)
        for client in self.clients:
            stack.wait_for(f"the API on {client.base_url}", lambda c=client: _answers(c), 120)
        self.agents: list[dict[str, Any]] = []

    def close(self) -> None:
        for client in self.clients:
            client.close()
        self.engine.dispose()
        self.queue.flushdb()
        self.queue.close()

    def call(self, method: str, path: str, expect: int, **kwargs: Any) -> httpx.Response:
        """One request to the next API process in turn."""
        response = next(self._next).request(method, path, **kwargs)
        assert response.status_code == expect, f"{method} {path}: {response.status_code} {response.text}"
        return response

    def setup(self) -> None:
        admin = {"Authorization": f"Bearer {DEVELOPMENT_ADMIN_TOKEN}"}
        self.call("POST", "/repositories", 201, headers=admin, json={
            "name": REPOSITORY, "forge": "github", "clone_url": f"file://{self.history.git.path}", "webhook_secret": SECRET})
        self.config = self.call("POST", "/configs", 201, headers=admin, json=SIM).json() | {"backend": "sim"}
        for machine in MACHINES:
            fingerprint = hashlib.sha256(json.dumps(machine, sort_keys=True).encode()).hexdigest()
            token = self.call("POST", "/enrollment-tokens", 201, headers=admin, json={"note": machine["host"]}).json()["token"]
            agent = self.call("POST", "/agent/enroll", 201, json={"enrollment_token": token, "name": machine["host"], "machine_id": fingerprint,
                                                                   "machine": machine, "backends": ["sim"]}).json()
            self.call("PATCH", f"/machines/{agent['machine_id']}", 200, headers=admin, json={"name": machine["host"]})
            self.agents.append({"headers": {"Authorization": f"Bearer {agent['token']}"}, "fingerprint": fingerprint, "machine": machine})

    def deliver(self, event: str, payload: dict[str, Any], delivery: str) -> None:
        body = body_of(payload)
        self.call("POST", "/webhooks/github", 202, content=body, headers=github_headers(body, event=event, delivery=delivery))

    def push_burst(self) -> None:
        """Every push delivery and the pull request's at once, from four threads: the API
        processes and the workers take them in whatever order they arrive."""
        def push(n: int, branch: str, before: str, shas: list[str]) -> None:
            payload = copy.deepcopy(fixture("github_push.json"))
            listed = [self.history.git.forge_commit(sha) for sha in shas]
            payload.update(ref=f"refs/heads/{branch}", before=before, after=shas[-1], commits=listed, head_commit=listed[-1])
            self.deliver("push", payload, f"push-{n}")

        with ThreadPoolExecutor(4) as pool:
            sent = [pool.submit(push, n, *d) for n, d in enumerate(self.history.deliveries())]
            sent.append(pool.submit(self.open_pull_request))  # evaluated while the pushes are completed and measured
            for done in sent:
                done.result()

    def open_pull_request(self) -> None:
        head = self.history.feature[-1]
        payload = {"action": "opened", "number": PR_NUMBER, "repository": {"full_name": REPOSITORY, "default_branch": "main"},
                   "pull_request": {"number": PR_NUMBER, "title": "fwd: stage the MAC header", "state": "open", "merged": False,
                                    "head": {"ref": "feature", "sha": head}, "base": {"ref": "main", "sha": self.history.main[-1]}}}
        self.deliver("pull_request", payload, "pull-1")

    def measure_until_quiet(self) -> int:
        """The agents claim and upload every job, until the deployment has been quiet for three
        polls in a row; returns the number of uploads."""
        uploads, quiet = 0, 0
        deadline = time.monotonic() + QUIET_DEADLINE_S
        while quiet < 3:
            if time.monotonic() > deadline:
                pytest.fail(f"not quiet after {QUIET_DEADLINE_S:.0f} s: {self.busy()}\n{self.stack.logs()}", pytrace=False)
            measured = sum(self.measure_one(agent) for agent in self.agents)
            uploads += measured
            quiet = 0 if measured or self.busy() else quiet + 1
            if not measured:
                time.sleep(0.5)
        return uploads

    def measure_one(self, agent: dict[str, Any]) -> int:
        """One claim of ``agent`` (with its partner, for a pull request's pair) and its uploads."""
        response = next(self._next).post("/agent/jobs/claim", headers=agent["headers"])
        if response.status_code == 204:
            return 0
        assert response.status_code == 200, response.text
        job = response.json()
        sides = [job] + ([{**job, **job["partner"]}] if job.get("partner") else [])
        for side in sides:
            doc = document(side["commit"], self.config, sim_values(self.history.ipp(side["commit"])), agent["fingerprint"], agent["machine"])
            self.call("PUT", f"/agent/jobs/{side['job_id']}/attempts/{side['attempt']}/result", 201,
                      content=json.dumps(doc), headers={**agent["headers"], "Content-Type": "application/json"})
        return len(sides)

    def busy(self) -> str:
        """What is still under way ("" when nothing is)."""
        tasks = self.queue.llen("perfci") + self.queue.hlen("unacked")  # queued, and held by a worker (acks late)
        with self.engine.connect() as conn:
            row = conn.execute(text("""SELECT
                (SELECT count(*) FROM jobs WHERE state IN ('queued', 'leased', 'running')),
                (SELECT count(*) FROM pushes WHERE NOT complete),
                (SELECT count(*) FROM runs WHERE status = 'ok' AND detected_at IS NULL),
                (SELECT count(*) FROM commit_statuses WHERE delivery = 'pending'),
                (SELECT count(*) FROM pull_requests WHERE comment_sent_version IS DISTINCT FROM comment_version)""")).one()
        names = ("tasks", "jobs", "incomplete pushes", "runs awaiting detection", "statuses to post", "comments to post")
        return ", ".join(f"{n} {name}" for n, name in zip((tasks, *row), names) if n)

    def final_state(self) -> dict[str, Any]:
        """The alert groups, the last status posted per commit and context, and the comments, with
        the ids a run draws (alert ids, verdict pages) left out."""
        with self.engine.connect() as conn:
            groups = sorted(tuple(r) for r in conn.execute(text("""
                SELECT b.name, m.name, coalesce(lg.sha, ''), fb.sha, g.direction, g.status,
                       string_agg(a.metric || '/' || a.backend || '/' || c.name || '/' || a.direction, ' ' ORDER BY a.metric)
                FROM alert_groups g JOIN branches b ON b.id = g.branch_id JOIN machines m ON m.id = g.machine_id
                LEFT JOIN commits lg ON lg.id = g.last_good_commit_id JOIN commits fb ON fb.id = g.first_bad_commit_id
                JOIN alerts a ON a.group_id = g.id JOIN bench_configs c ON c.id = a.config_id
                GROUP BY g.id, b.name, m.name, lg.sha, fb.sha""")))
            jobs = sorted(tuple(r) for r in conn.execute(text("""
                SELECT m.name, c.sha, j.purpose, j.state, count(*) FROM jobs j JOIN machines m ON m.id = j.machine_id
                JOIN commits c ON c.id = j.commit_id GROUP BY m.name, c.sha, j.purpose, j.state""")))
            kept = {(r[0], r[1]): (r[2], _anonymous(r[3])) for r in conn.execute(text(
                "SELECT c.sha, s.context, s.state, s.description FROM commit_statuses s JOIN commits c ON c.id = s.commit_id"))}
            comments_kept = {r[0]: _anonymous(r[1]) for r in conn.execute(text("SELECT number, comment_body FROM pull_requests"))}
        posted: dict[tuple[str, str], tuple[str, str]] = {}
        created: dict[str, list[str]] = {}
        bodies: dict[str, str] = {}
        for request in self.forge.accepted():
            if "/statuses/" in request.path:
                posted[(request.path.rsplit("/", 1)[-1], request.body["context"])] = (request.body["state"], _anonymous(request.body["description"]))
            elif request.method == "POST" and request.path.endswith("/comments"):
                comment = str(self.forge.requests.index(request) + 1)  # the id the forge answered with
                created.setdefault(request.path, []).append(comment)
                bodies[comment] = _anonymous(request.body["body"])
            elif "/issues/comments/" in request.path:
                bodies[request.path.rsplit("/", 1)[-1]] = _anonymous(request.body["body"])
        # What the forge shows last is what the server decided last: nothing posted out of order.
        on_github = {key: (GitHub.state_names.get(state, state), description) for key, (state, description) in kept.items()}
        assert posted == on_github, "the forge shows another verdict than the server's last: statuses posted out of order"
        comments = {path: [bodies[c] for c in ids] for path, ids in created.items()}
        assert {path: len(ids) for path, ids in created.items()} == {f"/repos/{REPOSITORY}/issues/{PR_NUMBER}/comments": 1}
        assert comments[f"/repos/{REPOSITORY}/issues/{PR_NUMBER}/comments"] == [comments_kept[PR_NUMBER]]
        return {"jobs": jobs, "groups": groups, "statuses": dict(sorted(posted.items())), "comments": comments}


def _answers(client: httpx.Client) -> bool:
    try:
        return client.get("/health").status_code == 200
    except httpx.HTTPError:
        return False


def _anonymous(text_: str) -> str:
    """A status description or comment with what differs between equal runs replaced: alert and
    group ids, verdict page links."""
    text_ = re.sub(r"https://perfci\.example\.com/\S*?(?=[)\s\"]|$)", "<page>", text_)
    return re.sub(r"\b(alert|group)s? #?\d+", r"\1 <id>", text_)


def run_workload(tmp: Path, name: str, history: History, broker: str, apis: int, concurrency: int) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    (tmp / name).mkdir()
    stack = Stack(tmp / name)
    with cloned_database(f"scaleout_{name}") as database, ForgeServer() as forge:
        deployment = Deployment(stack, database, broker, forge, history, apis, concurrency)
        try:
            deployment.setup()
            deployment.push_burst()
            assert deployment.measure_until_quiet() > 0
            state = deployment.final_state()
        finally:
            deployment.close()
            for proc in stack.procs:
                proc.stop()
    return state, time.monotonic() - started


def test_four_workers_and_two_apis_reach_the_verdicts_of_one(redis_url, tmp_path):
    history = History(tmp_path / "forge")
    one, one_s = run_workload(tmp_path, "one", history, redis_url, apis=1, concurrency=1)
    four, four_s = run_workload(tmp_path, "four", history, redis_url, apis=2, concurrency=4)
    print(f"1 worker + 1 API: {one_s:.0f} s; 4 workers + 2 APIs: {four_s:.0f} s")

    # The premise: the workload raised what it is built to raise, so equal states compare something.
    main, feature = history.main, history.feature
    stepped = {(g[0], g[1], g[3]) for g in one["groups"]}
    assert {("main", m, main[MAIN_COMMITS // 2]) for m in ("dut-01", "dut-02")} <= stepped, one["groups"]
    assert {("feature", m, feature[1]) for m in ("dut-01", "dut-02")} <= stepped, one["groups"]
    assert one["statuses"][(main[MAIN_COMMITS // 2], "perfci/dut-01")][0] == "failure"
    assert one["statuses"][(feature[-1], "perfci/pr/dut-01/main")][0] == "failure"

    assert four["jobs"] == one["jobs"]
    assert four["groups"] == one["groups"]
    assert four["statuses"] == one["statuses"]
    assert four["comments"] == one["comments"]
