"""Ingest benchmark: N simulated agents on loopback against a uvicorn server on PostgreSQL.

Each agent enrolls, does one unmeasured claim -> upload (the server's warm-up), then loops claim ->
upload (a result of 5 repetitions x every catalogue (metric, backend) pair: 24 values per
repetition today, 19 when the catalogue was smaller) until no job is left. Prints uploads/s, the
claim/upload latency p50/p99, and the CPU time each party spent in the measured window (this
load generator, the uvicorn processes, the PostgreSQL backends of the benchmark database), so a
client that steals the server's cores shows up in the figures.

    .venv/bin/python benchmarks/server_ingest/run.py [--agents 50] [--machines 10] [--commits 100]
        [--workers 2] [--think-ms 0] [--rate 0] [--repeat 1] [--profile server.folded]
        [--worker 0] [--detection cached|full|both] [--database-url URL] [--redis-url URL] [--smoke]

Every run prints the state it ran on: the PostgreSQL settings that move these figures (fsync,
synchronous_commit, full_page_writes, shared_buffers, as the server reports them), and the load
average, busy and stolen CPU share of the machine over the measured window. On a shared host the
figures are the host's load as much as perfci's: compare runs by their ratios (--detection both
measures the two detection modes back to back in every repetition, alternating which goes first).

With no think time the agents form a closed loop that saturates the server, so latencies there are
queueing (Little's law: 50 agents at R requests/s wait ~50/R s per request). The server lets claims
into the database before uploads (perfci_server.database_slots), so that queueing falls on uploads.
Each agent's first claim of the window is reported apart: all agents send it at the same instant, a
herd that only a (re)start produces; the claim percentiles are the steady state after it.
--think-ms gives the latency at a load below saturation. --rate R paces the agents open-loop: cycle
k may start at k / R s (an agent takes the next slot and waits for it), so a target rate is
measured at that rate, not only saturated; the share of cycles that started late says when the
server could not keep up.

The speed of these VMs drifts from run to run (the same code measured 154-231 uploads/s in one
hour), so figures worth quoting are the median of several runs: --repeat 5.

Needs the PostgreSQL and Redis of `.ci/services`; uses (and recreates) its own database
`perfci_bench_ingest` and Redis database 12 (benchmarks/owned.py: it refuses any it did not create).
The server sends its Celery tasks to the Redis broker as in production (`--redis-url`) and no worker consumes them, so the figures are
ingest alone: the regression detection each upload triggers runs on the workers, not in the API.
The push is completed by the server's own completion task, run in this process before the load:
the repository's clone URL is a loopback port nothing listens on, so the mirror fetch fails and
the payload's commits are placed on the branch in its order, with their jobs (what the server does
while a forge is down). The benchmark checks that every commit was placed and every job uploaded,
that every upload left its run awaiting detection and that one detection task waits per machine
(uploads coalesce: dispatch.send_once_after_commit), and empties the queue afterwards.
`--worker N` instead runs a real Celery worker (`perfci worker --concurrency N`) on the same
machine during the run, as Compose does, and reports side by side: its CPU per upload, the runs
waiting for detection over time (sampled every second until none waits), upload -> detected
(runs.received_at -> detected_at) and upload -> alert visible (the first bad commit's upload ->
its alert group's creation) p50/p99. From the middle commit on, ipp/sim is 5 % higher, so each
machine gets one regression to find: the run fails unless every machine has its alert group at that
commit (the upload -> alert figure times those groups). The measured window opens once the worker has detected the
warm-up's runs (a worker starts slowly on a busy host). --detection full runs the worker with
PERFCI_DETECTION_WINDOW_CACHE=false (every window re-read from the tables, the previous
behaviour; same verdicts). benchmarks/server_ingest/detection.py times the detection task alone.
`--profile` samples the server with py-spy (`pip install py-spy`) during the measured window, only
threads holding the GIL (where the Python CPU goes), and
writes folded stacks (one line per stack, sample count last).
Targets on the 2-core VMs: >= 200 uploads/s, claim p99 < 100 ms at 50 agents. A premise that does
not hold (a refused setup, a commit not placed, a run never detected, a missing alert) ends the run
with exit status 1 and the reason. ``--smoke`` runs the same checks on a load of seconds.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: the benchmarks package

from benchmarks import owned
from benchmarks.premise import require
from perfci_core.metrics import CATALOGUE
from perfci_server import migrate
from perfci_server.alerts.detection import DETECT_TASK
from perfci_server.forge.github import signature as github_signature

ROOT = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "benchmark-admin-token-not-a-secret-0123456789"
SECRET = "benchmark-webhook-secret"
DEFAULT_DB = owned.default_database_url("ingest")
DEFAULT_REDIS = owned.default_redis_url()


class Api:
    """A tiny keep-alive HTTP client: the agents must not eat the CPU the server is measured on."""

    def __init__(self, port: int, token: str | None = None) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.token = token

    def call(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        if self.token:
            all_headers["Authorization"] = f"Bearer {self.token}"
        try:
            self.conn.request(method, path, body=body, headers=all_headers)
            response = self.conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            # The server closed an idle keep-alive connection before reading this request (as
            # uvicorn does after 5 s idle, e.g. while the window waits for the worker): a new one.
            self.conn.close()
            self.conn.request(method, path, body=body, headers=all_headers)
            response = self.conn.getresponse()
        data = response.read()
        return response.status, (json.loads(data) if data else None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _recreate_database(url: str) -> str:
    owned.recreate_database(url)  # refuses a database no benchmark created
    migrate.upgrade(url)
    return url


def _machine(index: int) -> tuple[dict[str, Any], str]:
    machine = {"hostname": f"bench-{index}", "cpu_model": "Intel(R) Xeon(R) Gold 6338", "cores": 32}
    return machine, hashlib.sha256(json.dumps(machine, sort_keys=True).encode()).hexdigest()


STEP_METRIC = ("ipp", "sim")  # from the middle commit on, +5 %: a regression detection must report


def _document_template(machine: dict[str, Any], machine_id: str, step: float = 1.0) -> str:
    pairs = [(m.name, b.value) for m in CATALOGUE.values() for b in sorted(m.backends, key=lambda b: b.value)]
    samples = [
        {
            "rep": rep,
            "raw": {"pmu.cycles": 1.5e10 + rep, "pmu.instructions": 3.1e10 + rep, "tsc.packets": 2e6, "tsc.tsc_hz": 2.1e9},
            "metrics": [{"metric": name, "backend": backend,
                         "value": (1.0 + rep / 10 + i / 1000) * (step if (name, backend) == STEP_METRIC else 1.0)}
                        for i, (name, backend) in enumerate(pairs)],
        }
        for rep in range(5)
    ]
    now = datetime.now(UTC).isoformat()
    document = {
        "schema": "perfci.result/1",
        "status": "ok",
        "commit": "@COMMIT@",
        "config": {"name": "self-64B", "harness": "self", "pkt_size": 64, "flows": 1024, "routes": "default", "packets": 2000000, "warmup": 200000},
        "backend": "pmu",
        "machine": machine,
        "machine_id": machine_id,
        "samples": samples,
        "started_at": now,
        "finished_at": now,
    }
    return json.dumps(document)


def _setup(port: int, url: str, machines: int, agents: int, commits: int) -> tuple[list[dict[str, Any]], str]:
    """Repository, config, enrolled agents and one push of ``commits`` commits, completed and
    checked; returns (the agents, the first stepped commit)."""
    admin = Api(port, ADMIN_TOKEN)
    status, created = admin.call("POST", "/api/v1/repositories", json.dumps(
        {"name": "bench/dataplane", "forge": "github", "clone_url": UNREACHABLE_CLONE_URL, "webhook_secret": SECRET}).encode())
    require(status == 201, f"the server refused the benchmark's repository ({status}): {created}")
    status, created = admin.call("POST", "/api/v1/configs", json.dumps({"name": "self-64B"}).encode())
    require(status == 201, f"the server refused the benchmark's config ({status}): {created}")
    enrolled = []
    for i in range(agents):
        machine, machine_id = _machine(i % machines)
        _, issued = admin.call("POST", "/api/v1/enrollment-tokens", b"{}")
        status, agent = Api(port).call(
            "POST",
            "/api/v1/agent/enroll",
            json.dumps({"enrollment_token": issued["token"], "name": f"agent-{i}", "machine_id": machine_id, "machine": machine, "backends": ["pmu", "tsc", "sim"]}).encode(),
        )
        require(status == 201, f"enrolling agent-{i} answered {status}: {agent}")
        enrolled.append({**agent, "template": _document_template(machine, machine_id),
                         "stepped": _document_template(machine, machine_id, step=1.05)})
    shas = [hashlib.sha1(f"commit-{i}".encode()).hexdigest() for i in range(commits)]
    for agent in enrolled:
        agent["after_step"] = set(shas[commits // 2:])
    push = {
        "ref": "refs/heads/main",
        "before": "0" * 40,
        "after": shas[-1],
        "repository": {"full_name": "bench/dataplane"},
        "commits": [{"id": sha, "message": f"commit {i}", "timestamp": "2024-05-02T10:00:00Z", "author": {"name": "b", "email": "b@x"}} for i, sha in enumerate(shas)],
    }
    body = json.dumps(push).encode()
    status, answer = Api(port).call(
        "POST", "/api/v1/webhooks/github", body, {"X-GitHub-Event": "push", "X-GitHub-Delivery": "bench-1", "X-Hub-Signature-256": github_signature(SECRET, body)}
    )
    require(status == 202, f"the push webhook answered {status}: {answer}")
    _complete_push(url, commits, machines)
    return enrolled, shas[commits // 2]


# A loopback port nothing listens on (the discard service): the mirror fetch fails at once, and the
# push is completed as the server completes one while its forge is down.
UNREACHABLE_CLONE_URL = "http://127.0.0.1:9/bench/dataplane.git"


def _complete_push(url: str, commits: int, machines: int) -> None:
    """The push's completion task, run here (no worker runs yet): the mirror fetch fails, so the
    payload's commits are placed on the branch in its order, with a job per machine each
    (repos.tasks.complete_one); checks that they were."""
    import tempfile
    from contextlib import contextmanager

    from sqlalchemy.orm import Session

    from perfci_server.models import BranchCommit, Job, Push
    from perfci_server.repos.tasks import complete_one
    from perfci_server.settings import Settings

    engine = create_engine(url)

    @contextmanager
    def sessions():
        with Session(engine) as session, session.begin():
            yield session

    with tempfile.TemporaryDirectory(prefix="perfci-bench-mirror-") as data_dir:
        settings = Settings(env="development", database_url=url, data_dir=data_dir)
        with sessions() as session:
            pushes = list(session.scalars(select(Push.id)))
        require(len(pushes) == 1, f"{len(pushes)} pushes recorded for one webhook")
        complete_one(pushes[0], settings, 30.0, sessions=sessions)
    with sessions() as session:
        placed = session.scalar(select(func.count()).select_from(BranchCommit))
        jobs = session.scalar(select(func.count()).select_from(Job))
    engine.dispose()
    require(placed == commits, f"the push's completion placed {placed} of {commits} commits on the branch")
    require(jobs == commits * machines, f"{jobs} jobs for {commits} commits x {machines} machines")


def _queued_tasks(redis_url: str, purge: bool = False) -> dict[str, int]:
    """Task names waiting in the broker's queue (Celery's Redis transport: one list per queue).
    ``purge`` also drops the marks of coalesced tasks (dispatch.send_once_after_commit), as a
    worker taking those tasks would."""
    from perfci_server.celery_app import celery_app

    queue = celery_app.conf.task_default_queue
    client = owned.claim_redis(redis_url)  # refuses a Redis database in other use
    counts: dict[str, int] = {}
    for message in client.lrange(queue, 0, -1):
        name = json.loads(message)["headers"]["task"]
        counts[name] = counts.get(name, 0) + 1
    if purge:
        client.delete(queue, *client.keys("perfci.queued:*"))
    client.close()
    return counts


class DetectionWatch:
    """With a Celery worker consuming detection: the runs waiting for it, sampled every second
    from the start of the measured window until none waits (or ``drain_s`` passed)."""

    def __init__(self, url: str, worker_pid: int) -> None:
        self.engine = create_engine(url)
        self.worker_pid = worker_pid
        self.samples: list[tuple[float, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        with self.engine.connect() as conn:
            while not self.stop.is_set():
                taken = time.perf_counter() - self.t0
                waiting = conn.execute(text("SELECT count(*) FROM runs WHERE status = 'ok' AND detected_at IS NULL")).scalar_one()
                conn.commit()
                self.samples.append((taken, waiting))
                self.stop.wait(1.0)

    def start(self) -> None:
        self.cpu_before = {pid: _proc_cpu(pid) for pid in _process_tree(self.worker_pid)}
        self.t0 = time.perf_counter()
        self.thread.start()

    def drain(self, drain_s: float) -> float:
        """Wait until no run waits; returns the worker's CPU seconds since start."""
        deadline = time.monotonic() + drain_s
        since = time.perf_counter() - self.t0  # a sample taken from now on counts every upload
        while time.monotonic() < deadline and not (self.samples and self.samples[-1][0] >= since and self.samples[-1][1] == 0):
            time.sleep(0.5)
        cpu = sum(_proc_cpu(pid) - self.cpu_before.get(pid, 0.0) for pid in _process_tree(self.worker_pid))
        self.stop.set()
        self.thread.join()
        return cpu

    def latencies(self) -> tuple[list[float], list[float]]:
        """(upload -> detected of every run, upload of the first bad commit -> its alert group) in seconds."""
        with self.engine.connect() as conn:
            detected = [r[0] for r in conn.execute(text(
                "SELECT extract(epoch FROM detected_at - received_at) FROM runs "
                "WHERE status = 'ok' AND detected_at IS NOT NULL AND received_at IS NOT NULL"))]
            alerted = [r[0] for r in conn.execute(text("""
                SELECT extract(epoch FROM g.created_at - min(r.received_at))
                FROM alert_groups g
                JOIN jobs j ON j.commit_id = g.first_bad_commit_id AND j.machine_id = g.machine_id
                JOIN runs r ON r.job_id = j.id AND r.status = 'ok'
                GROUP BY g.id, g.created_at"""))]
        self.engine.dispose()
        return [float(v) for v in detected], [float(v) for v in alerted]


def _runs_awaiting_detection(url: str) -> tuple[int, int]:
    """(successful runs, those detection has not analysed yet) in the benchmark database."""
    engine = create_engine(url)
    with engine.connect() as conn:
        row = conn.execute(text("SELECT count(*), count(*) FILTER (WHERE detected_at IS NULL) FROM runs WHERE status = 'ok'")).one()
    engine.dispose()
    return row[0], row[1]


def _require_step_alerts(url: str, stepped: str, machines: int) -> None:
    """The premise of the detection figures: every machine's series steps +5 % in ipp/sim at
    ``stepped``, so detection must have raised one alert group per machine there, holding ipp/sim,
    and no other group (the other metrics are flat)."""
    engine = create_engine(url)
    with engine.connect() as conn:
        groups = conn.execute(text("""
            SELECT g.machine_id, c.sha, bool_or(a.metric = :metric AND a.backend = :backend)
            FROM alert_groups g JOIN commits c ON c.id = g.first_bad_commit_id JOIN alerts a ON a.group_id = g.id
            GROUP BY g.id, g.machine_id, c.sha"""), {"metric": STEP_METRIC[0], "backend": STEP_METRIC[1]}).all()
    engine.dispose()
    at_step = {machine for machine, sha, has_step in groups if sha == stepped and has_step}
    require(len(at_step) == machines and len(groups) == machines,
            f"{len(at_step)} of {machines} machines have an alert group with {'/'.join(STEP_METRIC)} at the stepped commit "
            f"{stepped[:12]} ({len(groups)} groups in all): detection did not see the step it is timed on")


def _claim_and_upload(api: Api, agent: dict[str, Any], think: float, claims: list[float], uploads: list[float]) -> bool:
    """One cycle of an agent; False when no job was left."""
    t0 = time.perf_counter()
    status, job = api.call("POST", "/api/v1/agent/jobs/claim", b"")
    claims.append(time.perf_counter() - t0)
    if status == 204:
        return False
    assert status == 200, job
    template = agent["stepped"] if job["commit"] in agent.get("after_step", ()) else agent["template"]
    body = template.replace("@COMMIT@", job["commit"]).encode()
    if think:
        time.sleep(think)  # the build and measurement a real agent does between claim and upload
    t0 = time.perf_counter()
    status, result = api.call("PUT", f"/api/v1/agent/jobs/{job['job_id']}/attempts/{job['attempt']}/result", body)
    uploads.append(time.perf_counter() - t0)
    assert status == 201, result
    return True


class Pace:
    """Open-loop arrivals at ``rate`` cycles per second: cycle k may start at start + k / rate.
    An agent takes the next slot and waits for it; when every agent is busy past its slot the
    server is behind, and ``late`` records by how much."""

    def __init__(self, rate: float) -> None:
        self.rate, self.k, self.lock = rate, 0, threading.Lock()
        self.t0 = 0.0
        self.late: list[float] = []

    def wait(self) -> None:
        with self.lock:
            due = self.t0 + self.k / self.rate
            self.k += 1
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        else:
            with self.lock:
                self.late.append(-delay)


def _agent_loop(
    port: int, agent: dict[str, Any], think: float, first_claims: list[float], claims: list[float], uploads: list[float],
    lock: threading.Lock, warmed: threading.Barrier, start: threading.Event, pace: Pace | None = None,
) -> None:
    api = Api(port, agent["token"])
    # Warm-up, not measured: the first requests of a server process import and connect what it
    # then keeps (the Celery transport, database connections); the figures are the steady state.
    _claim_and_upload(api, agent, 0.0, [], [])
    warmed.wait()
    my_claims: list[float] = []
    my_uploads: list[float] = []
    start.wait()
    time.sleep(think * agent["stagger"])  # with think time, agents do not arrive in lock step
    while True:
        if pace is not None:
            pace.wait()
        if not _claim_and_upload(api, agent, think, my_claims, my_uploads):
            break
    with lock:
        first_claims.append(my_claims[0])  # all agents at once: the herd of a (re)start, apart
        claims.extend(my_claims[1:])
        uploads.extend(my_uploads)


_TICK = os.sysconf("SC_CLK_TCK")


def _proc_cpu(pid: int, only_system: bool = False) -> float:
    """utime + stime (or only stime) of one process in seconds (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[12]) + (0 if only_system else int(fields[11]))) / _TICK


def _process_tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def _postgres_backends(database: str) -> list[int]:
    """Backends serving ``database`` (title "postgres: [CLUSTER: ]USER DATABASE HOST(PORT) STATE")."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            title = cmdline.read_bytes().decode(errors="replace").split()
        except OSError:
            continue
        if title[:1] == ["postgres:"] and database in title[2:4]:
            pids.append(int(cmdline.parent.name))
    return pids


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / _TICK, sum(ticks) / _TICK


class MachineState:
    """The machine's state over a measurement (this VM is shared; figures taken under load are
    load): load average at both ends, and the share of CPU time that was busy and that the
    hypervisor stole (/proc/stat) in between."""

    def __init__(self) -> None:
        self.load = Path("/proc/loadavg").read_text().split()[:3]
        self.ticks = self._ticks()

    @staticmethod
    def _ticks() -> list[int]:
        return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]

    def report(self) -> str:
        now = self._ticks()
        d = [b - a for a, b in zip(self.ticks, now)]
        total = sum(d) or 1
        busy = total - d[3] - d[4]
        steal = d[7] if len(d) > 7 else 0
        load = Path("/proc/loadavg").read_text().split()[:3]
        return (f"load average {'/'.join(self.load)} at start, {'/'.join(load)} at end (1/5/15 min) on {os.cpu_count()} cores; "
                f"busy {busy / total * 100:.0f}%, steal {steal / total * 100:.1f}% of CPU time in between")


class CpuMeter:
    """CPU seconds spent by the load generator, the server and PostgreSQL between start and stop.

    PostgreSQL backends that exit inside the window (pool overflow) are not counted, so that
    figure is a lower bound.
    """

    def __init__(self, server_pid: int, database: str) -> None:
        self.server_pid, self.database = server_pid, database

    def _read(self) -> dict[str, Any]:
        return {
            "client": time.process_time(),
            "server": {pid: _proc_cpu(pid) for pid in _process_tree(self.server_pid)},
            "server_system": {pid: _proc_cpu(pid, only_system=True) for pid in _process_tree(self.server_pid)},
            "postgres": {pid: _proc_cpu(pid) for pid in _postgres_backends(self.database)},
            "machine": _machine_busy(),
        }

    def start(self) -> None:
        self.before = self._read()

    def stop(self) -> dict[str, float]:
        after = self._read()
        busy = after["machine"][0] - self.before["machine"][0]
        total = after["machine"][1] - self.before["machine"][1]
        return {
            "client": after["client"] - self.before["client"],
            "server": sum(v - self.before["server"].get(pid, 0.0) for pid, v in after["server"].items()),
            "server_system": sum(v - self.before["server_system"].get(pid, 0.0) for pid, v in after["server_system"].items()),
            "postgres": sum(v - self.before["postgres"].get(pid, 0.0) for pid, v in after["postgres"].items()),
            "machine_busy_share": busy / total if total else 0.0,
        }


def _start_profiler(server_pid: int, out: str) -> subprocess.Popen[bytes]:
    py_spy = Path(sys.executable).with_name("py-spy")
    if not py_spy.exists():
        sys.exit("--profile needs py-spy in this virtualenv: .venv/bin/pip install py-spy")
    command = [str(py_spy), "record", "--pid", str(server_pid), "--subprocesses", "--rate", "200", "--gil", "--format", "raw", "--output", out, "--nonblocking"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL)


def _wait_until_up(port: int, server: subprocess.Popen[bytes], seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"the server exited with status {server.returncode} before it answered")
        try:
            if Api(port).call("GET", "/api/v1/health")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"the server did not answer /api/v1/health within {seconds:.0f} s")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--machines", type=int, default=10)
    parser.add_argument("--commits", type=int, default=200, help="jobs = commits x machines")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn worker processes")
    parser.add_argument("--database-url", default=DEFAULT_DB, help="the benchmark's own database (dropped and recreated; refused unless a benchmark created it)")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS, help="the broker the server sends its tasks to (its queue is emptied; refused if in other use)")
    parser.add_argument(
        "--think-ms", type=float, default=0.0,
        help="pause between claim and upload (a real agent measures for minutes); 0 = saturate the server",
    )
    parser.add_argument("--profile", metavar="FILE", help="sample the server with py-spy in the measured window (folded stacks)")
    parser.add_argument("--repeat", type=int, default=1, help="independent runs (fresh database and server each); prints their median")
    parser.add_argument("--worker", type=int, default=0, metavar="CONCURRENCY",
                        help="run a real Celery worker (perfci worker) on detection during the run; 0 = none (ingest alone)")
    parser.add_argument("--drain-s", type=float, default=600.0, help="with --worker: how long to wait for the last runs' detection")
    parser.add_argument("--rate", type=float, default=0.0, metavar="UPLOADS_PER_S",
                        help="open-loop arrivals at this many claim -> upload cycles per second (0 = closed loop, saturating)")
    parser.add_argument("--detection", choices=("cached", "full", "both"), default="cached",
                        help="with --worker: the window cache (cached), a full read of every window (full, the previous "
                             "behaviour; same verdicts), or both back to back in every repetition")
    parser.add_argument("--smoke", action="store_true",
                        help="a run of seconds that checks the same premises: 4 agents, 2 machines, 24 commits, a worker")
    args = parser.parse_args()
    if args.smoke:
        args.agents, args.machines, args.commits, args.workers, args.worker, args.repeat = 4, 2, 24, 1, 1, 1
        args.drain_s = min(args.drain_s, 180.0)

    modes = ["cached", "full"] if args.detection == "both" else [args.detection]
    print(_postgres_settings(args.database_url))
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    for i in range(args.repeat):
        for mode in modes if i % 2 == 0 else modes[::-1]:  # alternate which goes first
            print(f"--- run {i + 1} of {args.repeat}" + (f", detection {mode}" if args.worker else ""))
            runs[mode].append(_run_once(argparse.Namespace(**{**vars(args), "detection": mode})))
    keys = (("uploads_per_s", "uploads/s", ""), ("claim_p50_ms", "claim p50", " ms"), ("claim_p99_ms", "claim p99", " ms"),
            ("server_ms", "server cpu/upload", " ms"), ("postgres_ms", "postgres cpu/upload", " ms"),
            ("worker_ms", "worker cpu/upload", " ms"), ("detected_p50_s", "upload->detected p50", " s"),
            ("detected_p99_s", "upload->detected p99", " s"), ("alert_p50_s", "upload->alert p50", " s"),
            ("alert_p99_s", "upload->alert p99", " s"), ("runs_waiting_peak", "runs waiting peak", ""),
            ("load1", "load average (1 min)", ""))
    if args.repeat > 1 or len(modes) > 1:
        print(f"--- median (min-max) of {args.repeat} run(s)" + (" per detection mode" if len(modes) > 1 else ""))
        print(f"{'':22s}" + "".join(f"{mode:>26s}" for mode in modes) + ("   full/cached" if len(modes) > 1 else ""))
        for key, label, unit in keys:
            cells, medians = [], []
            for mode in modes:
                values = [r[key] for r in runs[mode] if key in r]
                if not values:
                    cells.append(f"{'-':>26s}")
                    continue
                medians.append(statistics.median(values))
                cells.append(f"{statistics.median(values):12.1f}{unit:3s} ({min(values):.1f}-{max(values):.1f})".rjust(26))
            ratio = f"   {medians[1] / medians[0]:.2f}x" if len(medians) == 2 and medians[0] else ""
            print(f"{label:22s}" + "".join(cells) + ratio)


def _postgres_settings(url: str) -> str:
    """The PostgreSQL settings that move ingest figures (durability and memory), as the server sees them."""
    engine = create_engine(owned.server_url(url))
    with engine.connect() as conn:
        values = {name: conn.execute(text(f"SHOW {name}")).scalar_one()
                  for name in ("server_version", "fsync", "synchronous_commit", "full_page_writes", "shared_buffers", "max_connections")}
    engine.dispose()
    return "postgresql: " + ", ".join(f"{k}={v}" for k, v in values.items())


def _run_once(args: argparse.Namespace) -> dict[str, float]:
    url = _recreate_database(args.database_url)
    port = _free_port()
    # PERFCI_LOG_LEVEL=warning: no line per request or task on the terminal (uvicorn's --log-level is its own loggers')
    env = {**os.environ, "PERFCI_DATABASE_URL": url, "PERFCI_ADMIN_TOKEN": ADMIN_TOKEN, "PERFCI_ENV": "production",
           "PERFCI_LOG_LEVEL": "warning"}
    env["PERFCI_BROKER_URL"] = args.redis_url  # tasks leave the API process, as in production
    env["PERFCI_DETECTION_WINDOW_CACHE"] = "true" if args.detection == "cached" else "false"
    _queued_tasks(args.redis_url, purge=True)
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "perfci_server.asgi:app", "--host", "127.0.0.1", "--port", str(port), "--workers", str(args.workers), "--no-access-log", "--log-level", "warning"],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    profiler = None
    worker: subprocess.Popen[bytes] | None = None
    watch: DetectionWatch | None = None
    try:
        _wait_until_up(port, server)
        agents, stepped = _setup(port, url, args.machines, args.agents, args.commits)
        _queued_tasks(args.redis_url, purge=True)  # the push's schedule task, done by _setup
        if args.worker:  # started before the agents connect: it takes the warm-up's detection too
            worker = subprocess.Popen([str(Path(sys.executable).with_name("perfci")), "worker", "--concurrency", str(args.worker),
                                       "--loglevel", "warning"], cwd=ROOT, env=env, start_new_session=True,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            watch = DetectionWatch(url, worker.pid)
        first_claims: list[float] = []
        claims: list[float] = []
        uploads: list[float] = []
        lock, warmed, start = threading.Lock(), threading.Barrier(len(agents) + 1), threading.Event()
        for i, agent in enumerate(agents):
            agent["stagger"] = i / len(agents)
        pace = Pace(args.rate) if args.rate else None
        threads = [
            threading.Thread(target=_agent_loop, args=(port, a, args.think_ms / 1000, first_claims, claims, uploads, lock, warmed, start, pace))
            for a in agents
        ]
        for t in threads:
            t.start()
        warmed.wait(timeout=300)
        if worker is not None:  # the worker is up once it detected the warm-up's runs (slow to start on a busy host)
            deadline = time.monotonic() + 300
            while _runs_awaiting_detection(url)[1] and time.monotonic() < deadline:
                time.sleep(0.5)
        if worker is None:
            _queued_tasks(args.redis_url, purge=True)  # the warm-up uploads' detection tasks
        if watch is not None:
            watch.start()
        meter = CpuMeter(server.pid, make_url(url).database or "")
        if args.profile:
            profiler = _start_profiler(server.pid, args.profile)
            time.sleep(1.0)  # py-spy attaches to every worker before the load starts
        meter.start()
        state = MachineState()
        t0 = time.perf_counter()
        if pace is not None:
            pace.t0 = t0
        start.set()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        cpu = meter.stop()
        machine = state.report()
        load1 = float(Path("/proc/loadavg").read_text().split()[0])
        if watch is not None:
            worker_cpu = watch.drain(args.drain_s)
            drained = time.perf_counter() - t0
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(timeout=60)
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(timeout=60)
        server.terminate()
        server.wait(timeout=20)
        tasks = _queued_tasks(args.redis_url, purge=True)

    ms = 1000.0
    values = sum(1 for _ in json.loads(agents[0]["template"])["samples"][0]["metrics"])
    print(f"agents={args.agents} machines={args.machines} server_workers={args.workers} think={args.think_ms:g} ms jobs={len(uploads)} "
          f"values/upload=5x{values} document={len(agents[0]['template'])} bytes")
    paced = ""
    if pace is not None:
        behind = len(pace.late) / max(1, pace.k)
        paced = (f"; paced at {args.rate:g}/s: {behind * 100:.0f}% of cycles started late"
                 + (f", by up to {max(pace.late):.2f} s" if pace.late else ""))
    print(f"uploads/s            {len(uploads) / elapsed:8.1f}   ({len(uploads)} uploads in {elapsed:.2f} s{paced})")
    print(f"claim  latency p50   {_percentile(claims, 50) * ms:8.1f} ms   p99 {_percentile(claims, 99) * ms:8.1f} ms   (n={len(claims)}, steady state)")
    print(f"first claims         {len(first_claims)} agents at once: p50 {_percentile(first_claims, 50) * ms:.1f} ms, max {max(first_claims) * ms:.1f} ms")
    print(f"upload latency p50   {_percentile(uploads, 50) * ms:8.1f} ms   p99 {_percentile(uploads, 99) * ms:8.1f} ms   mean {statistics.fmean(uploads) * ms:.1f} ms")
    detections = tasks.get(DETECT_TASK, 0)
    ok_runs, awaiting = _runs_awaiting_detection(url)
    per_upload = ms / max(1, len(uploads))
    result: dict[str, float] = {}
    require(len(uploads) + len(agents) == args.commits * args.machines,
            f"{len(uploads)} uploads measured + {len(agents)} warm-up for {args.commits} commits x {args.machines} machines")
    if watch is None:
        print(f"detection            {detections} task(s) queued for {len(uploads)} uploads on {args.machines} machines (one waits per machine); "
              f"{awaiting} of {ok_runs} runs await it")
        require(detections == args.machines and awaiting == ok_runs,
                f"{detections} detection tasks queued for {args.machines} machines, {awaiting} of {ok_runs} runs awaiting detection: "
                "uploads must leave every run to detection, one coalesced task per machine")
    else:
        detected, alerted = watch.latencies()
        peak = max(w for _, w in watch.samples)
        trace = ", ".join(f"{t:.0f}s:{w}" for t, w in watch.samples[:: max(1, len(watch.samples) // 12)])
        print(f"detection worker     concurrency {args.worker}: {worker_cpu:.2f} s CPU = {worker_cpu * per_upload:.1f} ms/upload; "
              f"all runs detected {drained:.1f} s after the window opened (uploads ended at {elapsed:.1f} s); "
              f"{awaiting} of {ok_runs} runs still waiting")
        require(awaiting == 0, f"{awaiting} of {ok_runs} runs were not detected within --drain-s {args.drain_s:g} s")
        _require_step_alerts(url, stepped, args.machines)
        print(f"runs waiting         peak {peak}; over time {trace}")
        print(f"upload -> detected   p50 {_percentile(detected, 50):.2f} s   p99 {_percentile(detected, 99):.2f} s   (n={len(detected)})")
        print(f"upload -> alert      p50 {_percentile(alerted, 50):.2f} s   p99 {_percentile(alerted, 99):.2f} s   "
              f"(n={len(alerted)} groups, one per machine at the stepped commit; from its upload)")
        result = {"worker_ms": worker_cpu * per_upload, "detected_p50_s": _percentile(detected, 50),
                  "detected_p99_s": _percentile(detected, 99), "runs_waiting_peak": float(peak),
                  "alert_p50_s": _percentile(alerted, 50), "alert_p99_s": _percentile(alerted, 99)}
    print(
        f"cpu in window        client {cpu['client']:.2f} s ({cpu['client'] * per_upload:.1f} ms/upload)   "
        f"server {cpu['server']:.2f} s ({cpu['server'] * per_upload:.1f} ms/upload, {cpu['server_system'] / max(cpu['server'], 1e-9) * 100:.0f}% in the kernel)   "
        f"postgres >= {cpu['postgres']:.2f} s ({cpu['postgres'] * per_upload:.1f} ms/upload)   "
        f"machine busy {cpu['machine_busy_share'] * 100:.0f}% of {os.cpu_count()} cores"
    )
    print(f"machine              {machine}")
    return result | {
        "load1": load1, "uploads_per_s": len(uploads) / elapsed, "claim_p50_ms": _percentile(claims, 50) * ms, "claim_p99_ms": _percentile(claims, 99) * ms,
        "server_ms": cpu["server"] * per_upload, "postgres_ms": cpu["postgres"] * per_upload,
    }


if __name__ == "__main__":
    main()
