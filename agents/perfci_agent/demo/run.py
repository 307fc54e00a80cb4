"""The end-to-end demo: scratch history → server → agent → detection → bisect → plots.

Everything runs on this machine on the embedded defaults: the server on loopback with SQLite, one
agent daemon enrolled with an enrollment token, one signed push webhook per commit. Background tasks
run in-process, or on a `perfci worker` + `perfci beat` with a local Redis as broker when one is
running (``--broker auto``). Each part is the real product started as its own process (`perfci server`, `perfci agent
run`, `perfci bisect`, `perfci plot`); the demo only drives them and checks the verdicts.
"""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from perfci_core.result import ResultDocument

from .. import scaling_reference
from ..measure import CONFIGS, default_core
from ..server_api import ApiClient, ApiError, ServerUnreachable
from . import history, pushes

REPOSITORY = "demo/dataplane"
MACHINE = "demo-machine"
CONFIG = "self-64B-short"
ADMIN_TOKEN = "perfci-development-admin-token"  # the server's public development default
JOB_TIMEOUT_S = 15 * 60
VERDICT_TIMEOUT_S = 180
LOCAL_REDIS = "redis://127.0.0.1:6379/7"  # a database of its own; its task queue is emptied first


class DemoFailed(Exception):
    pass


@dataclass
class Outcome:
    commits: list[history.MadeCommit] = field(default_factory=list)
    jobs: dict[str, int] = field(default_factory=dict)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    bisect: dict[str, Any] = field(default_factory=dict)
    plots: list[Path] = field(default_factory=list)
    scaling: str = ""  # the head commit at 1..N lcores (tsc): rates, calibration, B or why none; or why not measured
    problems: list[str] = field(default_factory=list)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _perfci() -> list[str]:
    # The console script of the environment running the demo (same code, its own process).
    return [str(Path(sys.executable).parent / "perfci")]


@contextmanager
def _process(name: str, args: list[str], log: Path, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """A child process with its output in `log`, stopped with SIGTERM (then SIGKILL) on exit."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                preexec_fn=_die_with_parent)
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # whatever it started and left in its group


def _die_with_parent() -> None:
    """In the child: SIGTERM when the demo dies, even by SIGKILL (Linux PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def _stop_on_signals() -> None:
    """SIGTERM and SIGHUP end the demo like Ctrl-C: the `finally` of each child stops it."""
    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)


def _wait_healthy(client: ApiClient, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DemoFailed(f"the server exited ({proc.returncode}); see {log}")
        try:
            client.get("/health")
            return
        except ServerUnreachable:
            time.sleep(0.3)
    raise DemoFailed(f"the server did not answer within {timeout:.0f} s; see {log}")


def _run_cli(args: list[str], env: dict[str, str], log: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*_perfci(), *args], env=env, capture_output=True, text=True, errors="replace")
    log.write_text(f"$ perfci {' '.join(args)}\n{done.stderr}\n{done.stdout}")
    return done


def local_broker(choice: str) -> str | None:
    """`auto`: the local Redis when it answers (its demo database emptied of old tasks), else none."""
    if choice == "none":
        return None
    if choice != "auto":
        return choice
    import redis

    try:
        client = redis.Redis.from_url(LOCAL_REDIS, socket_connect_timeout=0.5)
        client.ping()
        client.flushdb()
        return LOCAL_REDIS
    except redis.RedisError:
        return None


def run(workdir: Path, source: Path, backend: str = "auto", console: Console | None = None, broker: str = "auto") -> Outcome:
    console = console or Console(stderr=True)
    out = Outcome()
    if workdir.exists():
        shutil.rmtree(workdir)
    (workdir / "logs").mkdir(parents=True)
    logs = workdir / "logs"
    repo = workdir / "repo"

    console.print(f"[bold]1/6[/] scratch history of the dataplane in {repo}")
    out.commits = history.make_history(repo, source)

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFCI_")}
    # The demo's repository is a directory on this machine: a local clone URL, allowed here only.
    server_env = {**env, "PERFCI_ENV": "development", "PERFCI_DATA_DIR": str(workdir / "server"), "PERFCI_PORT": str(port),
                  "PERFCI_ALLOW_LOCAL_CLONE_URLS": "true"}
    client_env = {**env, "PERFCI_SERVER_URL": url, "PERFCI_TOKEN": ADMIN_TOKEN}
    broker_url = local_broker(broker)
    if broker_url:
        server_env["PERFCI_BROKER_URL"] = broker_url
    tasks = f"Celery worker on {broker_url}" if broker_url else "tasks in-process"

    console.print(f"[bold]2/6[/] server on {url} (SQLite in {workdir / 'server'}, {tasks})")
    with ExitStack() as stack:
        server = stack.enter_context(_process("server", [*_perfci(), "server", "--port", str(port)], logs / "server.log", server_env))
        admin = stack.enter_context(ApiClient(url, ADMIN_TOKEN))
        if broker_url:
            # One worker process: tasks run in upload order, so the last commit's verdict comes last.
            stack.enter_context(_process("worker", [*_perfci(), "worker", "--concurrency", "1"], logs / "worker.log", server_env))
            stack.enter_context(_process("beat", [*_perfci(), "beat"], logs / "beat.log", server_env))
        _wait_healthy(admin, server, logs / "server.log")
        secret = secrets.token_hex(16)
        admin.post("/repositories", {"name": REPOSITORY, "forge": "github", "clone_url": str(repo), "webhook_secret": secret})
        cfg = CONFIGS[CONFIG].model_dump()
        admin.post("/configs", {**cfg, "backend": backend, "repetitions": 1 if backend in ("auto", "sim") else 5})
        enrollment = admin.post("/enrollment-tokens", {"note": "demo agent"})["token"]

        agent_toml = workdir / "agent.toml"
        agent_toml.write_text(
            f'server_url = "{url}"\nmachine_name = "{MACHINE}"\nstate_dir = "{workdir / "agent"}"\n'
            f'enrollment_token = "{enrollment}"\ncores = [{default_core()}]\nbackends = ["{backend}"]\n'
            'poll_seconds = 0.5\nheartbeat_seconds = 10.0\n'
        )
        console.print(f"[bold]3/6[/] agent daemon enrolling as {MACHINE!r} (config {agent_toml})")
        with _process("agent", [*_perfci(), "agent", "run", "--config", str(agent_toml)], logs / "agent.log", env) as agent:
            _wait_for_machine(admin, agent, logs / "agent.log")
            console.print(f"[bold]4/6[/] {len(out.commits)} signed push webhooks; the agent measures each commit")
            before = None
            for commit in out.commits:
                body, headers = pushes.signed(pushes.push_payload(repo, REPOSITORY, "main", before, [commit.sha]), secret)
                admin.request("POST", "/webhooks/github", content=body, headers=headers)
                before = commit.sha
            out.jobs = _wait_for_jobs(admin, agent, len(out.commits), logs / "agent.log", console)
        _wait_for_verdicts(admin, out.commits, logs)

        console.print("[bold]5/6[/] alerts raised by detection")
        out.alerts = admin.get("/alerts")["items"]
        _check_alerts(out)

        regression = next((g for g in out.alerts if g["direction"] == "regression"), None)
        if regression is not None:
            console.print(f"[bold]6/6[/] bisect alert {regression['id']} locally, then plots")
            done = _run_cli(["alerts", "bisect", str(regression["id"]), "--local", "--repo", str(repo),
                             "--cache-dir", str(workdir / "agent" / "cache"), "--json"],
                            client_env, logs / "bisect.log")
            if done.returncode == 0:
                out.bisect = json.loads(done.stdout)
            else:
                out.problems.append(f"perfci bisect exited {done.returncode}; see {logs / 'bisect.log'}")
        _check_bisect(out)
        plots = workdir / "plots"
        plots.mkdir()
        for metric in ("ipp", "sf_blocks_pp", "l1d_misses_pp"):
            target = plots / f"{metric}.png"
            done = _run_cli(["plot", "--metric", metric, "--machine", MACHINE, "--config", CONFIG, "-o", str(target)],
                            client_env, logs / f"plot-{metric}.log")
            if done.returncode == 0 and target.is_file():
                out.plots.append(target)
            else:
                out.problems.append(f"perfci plot --metric {metric} exited {done.returncode}; see {logs / f'plot-{metric}.log'}")
        _scaling(out, repo, workdir, client_env, logs, console)
    return out


def _scaling(out: Outcome, repo: Path, workdir: Path, env: dict[str, str], logs: Path, console: Console) -> None:
    """The head commit at 1, 2, 4, ... lcores up to this machine's cores with tsc (two repetitions,
    the agent's build cache), with the calibration loop on the same cores before each run. Its
    figures are the machine's on a shared VM; what is checked is that the command succeeds and its
    result carries the calibration loop's figures. What is printed is the host reference of the
    result (:mod:`perfci_agent.scaling_reference`): the median throughput at each lcore count, what
    moved from one lcore to the most (the clock, a sibling, or the code's contention), and B fitted
    to those medians where three or more lcore counts make it identifiable; on two cores, what the
    machine cannot show instead of a B."""
    cpus = len(os.sched_getaffinity(0))
    if cpus < 2:
        out.scaling = "not measured: one core allowed (a scaling run needs two)"
        return
    console.print(f"scaling: the head commit at 1..{cpus} lcores (tsc, 2 repetitions, the calibration loop before each run)")
    done = _run_cli(["measure", "--repo", str(repo), "--commit", out.commits[-1].sha, "--backend", "tsc", "--config", "self-64B-short",
                     "--scaling", "--reps", "2", "--cache-dir", str(workdir / "agent" / "cache"), "--json"], env, logs / "scaling.log")
    if done.returncode != 0:
        out.problems.append(f"perfci measure --scaling exited {done.returncode}; see {logs / 'scaling.log'}")
        return
    try:
        reference = scaling_reference.reference(ResultDocument.model_validate_json(done.stdout))
    except (ValidationError, scaling_reference.ReferenceError) as exc:
        out.problems.append(f"perfci measure --scaling: no scaling result ({exc}); see {logs / 'scaling.log'}")
        return
    if reference["calibration"] is None:
        out.problems.append(f"perfci measure --scaling: no calibration loop figures in its result; see {logs / 'scaling.log'}")
    text = scaling_reference.summary(reference)
    if reference["serial_fraction"] is None:
        text = f"{cpus} cores cannot show a serial fraction, only the throughput at {len(reference['lcores'])} lcore counts: {text}"
    out.scaling = f"{text} — this VM's figures, not the dataplane's"


def _wait_for_machine(admin: ApiClient, agent: subprocess.Popen[bytes], log: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if agent.poll() is not None:
            raise DemoFailed(f"the agent exited ({agent.returncode}) before enrolling; see {log}")
        if admin.get("/machines")["items"]:
            return
        time.sleep(0.3)
    raise DemoFailed(f"the agent did not enroll within {timeout:.0f} s; see {log}")


def _wait_for_jobs(admin: ApiClient, agent: subprocess.Popen[bytes], expected: int, log: Path, console: Console) -> dict[str, int]:
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    deadline = time.monotonic() + JOB_TIMEOUT_S
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("measuring commits", total=expected)
        while True:
            states: dict[str, int] = {}
            for state in ("queued", "leased", "running", "done", "failed"):
                states[state] = admin.get("/jobs", state=state, limit=1)["total"]
            finished = states["done"] + states["failed"]
            progress.update(task, completed=finished, description=f"measuring commits ({states['done']} done, {states['failed']} failed)")
            if finished >= expected:
                return states
            if agent.poll() is not None:
                raise DemoFailed(f"the agent exited ({agent.returncode}) with {expected - finished} jobs left; see {log}")
            if time.monotonic() > deadline:
                raise DemoFailed(f"jobs not finished after {JOB_TIMEOUT_S // 60} minutes; see {log}")
            time.sleep(1.0)


def _wait_for_verdicts(admin: ApiClient, commits: list[history.MadeCommit], logs: Path) -> None:
    """Detection has caught up when every commit has its analysed verdict (what `perfci check` reads)."""
    deadline = time.monotonic() + VERDICT_TIMEOUT_S
    for commit in commits:
        while not admin.get("/alerts/check", commit=commit.sha, repository=REPOSITORY)["machines"]:
            if time.monotonic() > deadline:
                raise DemoFailed(f"no verdict for {commit.sha[:12]} after {VERDICT_TIMEOUT_S} s; see {logs}")
            time.sleep(0.5)


def _expected(out: Outcome, effect: str) -> history.MadeCommit:
    return next(c for c in out.commits if c.effect == effect)


def _check_alerts(out: Outcome) -> None:
    if out.jobs.get("failed"):
        out.problems.append(f"{out.jobs['failed']} job(s) failed")
    regressions = [g for g in out.alerts if g["direction"] == "regression"]
    want = _expected(out, "regression").sha
    if len(regressions) != 1:
        out.problems.append(f"expected exactly one regression alert group, got {len(regressions)}")
    elif regressions[0]["first_bad"]["sha"] != want:
        out.problems.append(f"the regression alert points at {regressions[0]['first_bad']['sha'][:12]}, not {want[:12]}")
    elif _counts_hazards(regressions[0]) and "store-forward blocks" not in regressions[0]["explanation"]["sentence"]:
        # regression (a) is a store-forward block: sim and pmu see it, and the explanation must say so
        out.problems.append(f"the store-forward regression is not explained as one: {regressions[0]['explanation']['sentence']}")


def _counts_hazards(group: dict[str, Any]) -> bool:
    """Whether the group's backend counts store-forward blocks (sim always; pmu where the CPU has the event)."""
    parts = group.get("explanation", {}).get("parts") or []
    return any(p.get("backend") == "sim" or "sf_blocks_pp" in (p.get("before") or {}) for p in parts)


def _check_bisect(out: Outcome) -> None:
    culprit = out.bisect.get("culprit", {}).get("sha") if out.bisect else None
    want = _expected(out, "regression").sha
    if out.bisect and culprit != want:
        out.problems.append(f"bisect named {str(culprit)[:12]}, not {want[:12]}")


def summary(out: Outcome, workdir: Path, console: Console) -> None:
    console.rule("perfci demo")
    console.print(f"commits measured: {out.jobs.get('done', 0)} done, {out.jobs.get('failed', 0)} failed")
    for group in out.alerts:
        first = group["first_bad"]
        console.print(f"[bold]{group['direction']}[/] alert {group['id']} at {first['sha'][:12]} "
                      f"“{first.get('subject', '')}”: {group['summary']}")
    if out.bisect:
        culprit = out.bisect.get("culprit", {})
        console.print(f"bisect culprit: {str(culprit.get('sha', ''))[:12]} “{culprit.get('subject', '')}”")
    for plot in out.plots:
        console.print(f"plot: {plot}")
    if out.scaling:
        console.print(f"scaling: {out.scaling}")
    console.print(f"logs: {workdir / 'logs'}")
    for problem in out.problems:
        console.print(f"[red]problem:[/] {problem}")
    console.print("[green]demo passed[/]" if not out.problems else "[red]demo failed[/]")


def main(workdir: Path, source: Path, backend: str, broker: str = "auto") -> int:
    console = Console(stderr=True)
    started = time.monotonic()
    _stop_on_signals()
    try:
        out = run(workdir, source, backend, console, broker)
    except (DemoFailed, ApiError, ServerUnreachable) as exc:
        console.print(f"[red]demo failed:[/] {exc}")
        return 1
    summary(out, workdir, console)
    console.print(f"took {time.monotonic() - started:.0f} s")
    return 0 if not out.problems else 1
