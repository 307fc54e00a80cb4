"""Helpers of the end-to-end tests: child processes with logs, waiting with a useful failure."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from perfci_agent.measure import default_core
from perfci_agent.server_api import ApiClient, ServerUnreachable
from perfci_server.settings import DEVELOPMENT_ADMIN_TOKEN
from tests.server.server_support import github_headers

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A child process in its own session, output to a log file; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.argv, self.env, self.log = name, argv, env, log
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(self.argv, env=self.env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        assert self.popen is not None
        self.popen.send_signal(sig)

    def wait(self, timeout: float) -> int:
        assert self.popen is not None
        return self.popen.wait(timeout=timeout)

    def stop(self, timeout: float = 60.0) -> int | None:
        if not self.running:
            return self.popen.returncode if self.popen else None
        assert self.popen is not None
        self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            return self.popen.wait()

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self, n: int = 40) -> str:
        return f"--- {self.name} ({self.log}) ---\n" + "\n".join(self.text().splitlines()[-n:])


class Stack:
    """Processes of one test; ``logs()`` for failure messages, everything stopped at the end."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[Proc] = []

    def add(self, name: str, argv: list[str], env: dict[str, str]) -> Proc:
        proc = Proc(name, argv, env, self.tmp / f"{name}.log")
        self.procs.append(proc)
        return proc

    def logs(self) -> str:
        return "\n".join(p.tail() for p in self.procs)

    def wait_for(self, what: str, check: Callable[[], T | None], timeout: float, interval: float = 0.25) -> T:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = check()
            if got:
                return got
            time.sleep(interval)
        pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}\n{self.logs()}", pytrace=False)


def server_env(database: str, broker: str | None, data_dir: Path, port: int, **extra: Any) -> dict[str, str]:
    """The server's environment (no broker: Celery tasks run inside the API process)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFCI_")}
    env.update({"PERFCI_ENV": "development", "PERFCI_DATABASE_URL": database, "PERFCI_DATA_DIR": str(data_dir), "PERFCI_PORT": str(port),
                "PERFCI_ALLOW_LOCAL_CLONE_URLS": "true"})  # the tests' repositories are directories
    if broker:
        env["PERFCI_BROKER_URL"] = broker
    env.update({f"PERFCI_{k.upper()}": str(v) for k, v in extra.items()})
    return env


def start_api(stack: Stack, env: dict[str, str], port: int) -> tuple[Proc, ApiClient]:
    """`perfci server` on ``port`` and an admin client, once the API answers."""
    api = stack.add("api", [str(BIN / "perfci"), "server", "--port", str(port)], env).start()
    admin = ApiClient(f"http://127.0.0.1:{port}", DEVELOPMENT_ADMIN_TOKEN)
    stack.wait_for("the API to answer", lambda: healthy(admin), 60)
    return api, admin


def start_worker(stack: Stack, env: dict[str, str]) -> Proc:
    """A real Celery worker on the server's queue (solo pool: one task at a time, logged at info)."""
    argv = [str(BIN / "python"), "-m", "celery", "-A", "perfci_server.celery_app", "worker", "--pool=solo", "-Q", "perfci",
            "--loglevel=info", "--without-gossip", "--without-mingle", "--without-heartbeat"]
    return stack.add("worker", argv, env).start()


def agent_argv(tmp: Path, server_url: str, machine_name: str, enrollment_token: str, poll_seconds: float = 0.3) -> list[str]:
    """`perfci agent run` with a config file under ``tmp`` (state in ``tmp/agent``; sim, short polls
    unless ``poll_seconds`` says otherwise)."""
    config, state = tmp / "agent.toml", tmp / "agent"
    config.write_text(
        f'server_url = "{server_url}"\nmachine_name = "{machine_name}"\nstate_dir = "{state}"\n'
        f'enrollment_token = "{enrollment_token}"\ncores = [{default_core()}]\nbackends = ["sim"]\npoll_seconds = {poll_seconds}\n'
        'heartbeat_seconds = 5.0\nlog_level = "info"\n'
    )
    return [str(BIN / "perfci"), "agent", "run", "--config", str(config)]


def agent_env(server: dict[str, str]) -> dict[str, str]:
    """The agent's environment: the server's without its PERFCI_* settings (the config file rules)."""
    return {k: v for k, v in server.items() if not k.startswith("PERFCI_")}


def healthy(client: ApiClient) -> bool:
    try:
        return client.get("/health")["status"] == "ok"
    except ServerUnreachable:
        return False


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def signed_push(client: ApiClient, repo: Path, full_name: str, shas: list[str], before: str | None = None) -> dict[str, Any]:
    """A signed GitHub push delivery of ``shas`` (oldest first) onto main, built from the repository;
    ``before`` is main's previous head: by default, as a forge would say, the parent of the first
    pushed commit (none for a root commit: the branch is new)."""
    if before is None:
        parent = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "-q", f"{shas[0]}^"], capture_output=True, text=True)
        before = parent.stdout.strip() if parent.returncode == 0 else "0" * 40
    commits = []
    for sha in shas:
        name, email, when, message = git(repo, "show", "-s", "--format=%an%x00%ae%x00%aI%x00%s", sha).split("\0")
        commits.append({"id": sha, "message": message, "timestamp": when, "author": {"name": name, "email": email}})
    payload = {"ref": "refs/heads/main", "before": before, "after": shas[-1], "created": before == "0" * 40, "deleted": False,
               "forced": False, "repository": {"name": full_name.split("/")[-1], "full_name": full_name},
               "commits": commits, "head_commit": commits[-1]}
    body = json.dumps(payload).encode()
    response = client.request("POST", "/webhooks/github", content=body, headers=github_headers(body, delivery=str(uuid.uuid4())))
    return response.json()


DATAPLANE = ROOT / "dataplane"
REGRESSION = DATAPLANE / "regressions" / "d-helper-out-of-line.patch"  # one call + return more per packet


def base_repository(repo: Path) -> str:
    """A git repository whose one commit on main is the project's dataplane/ (its build folders
    left out); returns the commit."""
    def build_dirs(directory: str, names: list[str]) -> list[str]:
        return [n for n in names if Path(directory) == DATAPLANE and n.startswith("build")]

    shutil.copytree(DATAPLANE, repo / "dataplane", ignore=build_dirs)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "dev@perfci.invalid")
    git(repo, "config", "user.name", "perfci dev")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "dataplane: base")
    return git(repo, "rev-parse", "HEAD")


def make_history(repo: Path) -> list[str]:
    """base (the project's dataplane/), a change that alters no code, the regression patch."""
    base_repository(repo)
    with open(repo / "dataplane" / "README.md", "a") as fh:
        fh.write("\nMeasured by the perfci agent.\n")
    git(repo, "commit", "-qam", "docs: mention the agent")
    git(repo, "apply", str(REGRESSION))
    git(repo, "commit", "-qam", "fwd: move ttl_decrement out of line")
    return git(repo, "rev-list", "--reverse", "HEAD").split()
