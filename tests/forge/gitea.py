"""A throwaway Gitea for tests: the real server `.ci/gitea` builds, started in a temporary folder on
a free loopback port, driven over its REST API (/api/v1) and by real `git push`es over HTTP.

The binary comes from PERFCI_GITEA_BIN; Gitea's templates and locales (its STATIC_ROOT_PATH) from
PERFCI_GITEA_STATIC, by default the `src` folder next to the binary (the layout `.ci/gitea` makes).
Gitea keeps everything (sqlite database, repositories, log) in its work folder.
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import json
import os
import socket
import sqlite3
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

BIN_ENV = "PERFCI_GITEA_BIN"
STATIC_ENV = "PERFCI_GITEA_STATIC"
ADMIN = "perfci-admin"
ADMIN_PASSWORD = "perfci-admin-password"  # a throwaway server on loopback


class GiteaError(RuntimeError):
    """Gitea could not be started, or refused an API call (the message carries its answer)."""


@dataclass(frozen=True)
class GiteaBuild:
    binary: Path
    static_root: Path

    @classmethod
    def from_env(cls) -> GiteaBuild:
        """The build .ci/gitea made, as CI exports it; a clear error when it is missing."""
        value = os.environ.get(BIN_ENV)
        if not value:
            raise GiteaError(f"{BIN_ENV} is not set: build Gitea with `bash .ci/gitea` and export {BIN_ENV}=<the path it prints>"
                             " (`make test` and .ci/run do both)")
        binary = Path(value)
        static_root = Path(os.environ.get(STATIC_ENV) or binary.parent / "src")
        if not os.access(binary, os.X_OK):
            raise GiteaError(f"{BIN_ENV}={binary} is not an executable file (rebuild with `bash .ci/gitea`)")
        if not (static_root / "options" / "locale").is_dir():
            raise GiteaError(f"{static_root} has no options/locale: it is not Gitea's source folder (set {STATIC_ENV})")
        return cls(binary, static_root)


@dataclass(frozen=True)
class Repo:
    owner: str
    name: str

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


@dataclass(frozen=True)
class HookDelivery:
    """One delivery as Gitea recorded it (the API has no endpoint for a hook's deliveries)."""

    uuid: str
    event_type: str  # Gitea's own: push, pull_request, pull_request_sync, ...
    delivered: bool
    succeeded: bool
    request: dict[str, Any]  # url, http_method, headers
    response: dict[str, Any]  # status, headers, body


def signature(secret: str, body: bytes) -> str:
    """Hex HMAC-SHA256 of a delivery's body: X-Gitea-Signature, and X-Hub-Signature-256 after `sha256=`."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def app_ini(work: Path, static_root: Path, port: int) -> str:
    """Gitea's configuration: sqlite, no SSH, no mail, no outbound calls; webhooks may reach loopback;
    queues in memory (a throwaway server loses nothing it needs when it stops)."""
    return f"""\
APP_NAME = perfci test forge
RUN_USER = {getpass.getuser()}
RUN_MODE = prod
WORK_PATH = {work}
I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true

[server]
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = {port}
DOMAIN = 127.0.0.1
ROOT_URL = http://127.0.0.1:{port}/
STATIC_ROOT_PATH = {static_root}
APP_DATA_PATH = {work}/data
START_SSH_SERVER = false
DISABLE_SSH = true
LFS_START_SERVER = false
OFFLINE_MODE = true

[database]
DB_TYPE = sqlite3
PATH = {work}/data/gitea.db

[repository]
ROOT = {work}/repositories
DEFAULT_BRANCH = main

[security]
INSTALL_LOCK = true

[service]
DISABLE_REGISTRATION = true

[mailer]
ENABLED = false

[webhook]
ALLOWED_HOST_LIST = loopback
; generous: on a loaded 2-core CI host a receiver inside a busy test process can take seconds to answer
DELIVER_TIMEOUT = 30

[indexer]
ISSUE_INDEXER_TYPE = db

[actions]
ENABLED = false

[cron.update_checker]
ENABLED = false

[queue]
; in memory: webhooks leave within a fraction of a second, not after the disk queue's seconds of polling
TYPE = channel

[session]
PROVIDER = memory

[cache]
ADAPTER = memory

[log]
MODE = file
LEVEL = Info
ROOT_PATH = {work}/log
"""


class Gitea:
    """A running Gitea with an admin and the admin's API token. Use :meth:`start`, then :meth:`stop`."""

    def __init__(self, build: GiteaBuild, work: Path, port: int, process: subprocess.Popen[bytes]) -> None:
        self.build = build
        self.work = work
        self.port = port
        self.process = process
        self.url = f"http://127.0.0.1:{port}"
        self.admin = ADMIN
        self.token = ""
        self._http = httpx.Client(base_url=f"{self.url}/api/v1", timeout=30)

    # -- life cycle ----------------------------------------------------------------------------

    @classmethod
    def start(cls, build: GiteaBuild, work: Path, timeout: float = 60.0) -> Gitea:
        work.mkdir(parents=True, exist_ok=True)
        port = free_port()
        config = work / "app.ini"
        config.write_text(app_ini(work, build.static_root, port))
        env = {**os.environ, "GITEA_WORK_DIR": str(work), "HOME": str(work)}
        env = {k: v for k, v in env.items() if not k.startswith("GITEA__")}  # no outside overrides
        _run(build, ["migrate", "-c", str(config)], env)
        _run(build, ["admin", "user", "create", "--admin", "--username", ADMIN, "--password", ADMIN_PASSWORD,
                     "--email", f"{ADMIN}@example.invalid", "--must-change-password=false", "-c", str(config)], env)
        with (work / "gitea-web.out").open("wb") as out:
            process = subprocess.Popen([str(build.binary), "web", "-c", str(config)], cwd=work, env=env,
                                       stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        gitea = cls(build, work, port, process)
        try:
            gitea._wait_until_up(timeout)
            gitea.token = gitea._create_token()
        except BaseException:
            gitea.stop()
            raise
        gitea._http.headers["Authorization"] = f"token {gitea.token}"
        return gitea

    def _wait_until_up(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise GiteaError(f"gitea web exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if self._http.get("/version", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise GiteaError(f"gitea web did not answer /api/v1/version within {timeout:.0f} s:\n{self.log_tail()}")

    def _create_token(self) -> str:
        response = self._http.post(f"/users/{ADMIN}/tokens", auth=(ADMIN, ADMIN_PASSWORD),
                                   json={"name": "perfci-tests", "scopes": ["all"]})
        return _json(response)["sha1"]

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (Gitea shuts down gracefully), SIGKILL if it hangs."""
        self._http.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log_tail(self, lines: int = 40) -> str:
        texts = []
        for path in [self.work / "gitea-web.out", *sorted((self.work / "log").glob("*.log"))]:
            if path.is_file():
                texts.append(f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(texts)

    # -- REST API -------------------------------------------------------------------------------

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        """One authenticated API call (path under /api/v1); its JSON, or GiteaError on a non-2xx answer."""
        return _json(self._http.request(method, path, **kwargs))

    def create_repo(self, name: str, default_branch: str = "main") -> Repo:
        """An empty repository of the admin (the first push creates the default branch)."""
        data = self.api("POST", "/user/repos", json={"name": name, "default_branch": default_branch, "private": False})
        return Repo(data["owner"]["login"], data["name"])

    def add_webhook(self, repo: Repo, url: str, secret: str, events: tuple[str, ...] = ("push", "pull_request")) -> int:
        """A `gitea` webhook posting JSON, signed with `secret`; returns its id.

        Gitea's `pull_request` event covers every pull-request change (opened, synchronized, closed, ...).
        """
        hook = self.api("POST", f"/repos/{repo.full_name}/hooks", json={
            "type": "gitea", "active": True, "events": list(events), "branch_filter": "*",
            "config": {"url": url, "content_type": "json", "secret": secret},
        })
        return hook["id"]

    def clone_url(self, repo: Repo) -> str:
        """The HTTP clone URL (public repositories clone without credentials)."""
        return f"{self.url}/{repo.full_name}.git"

    def push_url(self, repo: Repo) -> str:
        """The HTTP clone URL with the admin's token as password (for `git push`)."""
        return f"http://{self.admin}:{self.token}@127.0.0.1:{self.port}/{repo.full_name}.git"

    def push(self, repo: Repo, checkout: Path, *refspecs: str) -> None:
        """`git push` from a local repository over HTTP; GiteaError with git's output on failure."""
        command = ["git", "-c", "credential.helper=", "-C", str(checkout), "push", "--porcelain", self.push_url(repo), *refspecs]
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
        if done.returncode != 0:
            raise GiteaError(f"git push {' '.join(refspecs)} failed ({done.returncode}):\n"
                             + (done.stdout + done.stderr).replace(self.token, "<token>"))

    def open_pull(self, repo: Repo, head: str, base: str, title: str, body: str = "") -> dict[str, Any]:
        return self.api("POST", f"/repos/{repo.full_name}/pulls", json={"head": head, "base": base, "title": title, "body": body})

    def close_pull(self, repo: Repo, number: int) -> dict[str, Any]:
        return self.api("PATCH", f"/repos/{repo.full_name}/pulls/{number}", json={"state": "closed"})

    def commit_statuses(self, repo: Repo, ref: str) -> list[dict[str, Any]]:
        """Every status posted on a commit (ref: sha, branch or tag), newest first.

        By index: the default order (creation time, in seconds) leaves statuses of one second
        unordered. Gitea's sort names are inverted: `leastindex` sorts by index descending."""
        return self.api("GET", f"/repos/{repo.full_name}/commits/{ref}/statuses", params={"sort": "leastindex"})

    def combined_status(self, repo: Repo, ref: str) -> dict[str, Any]:
        """The latest status per context and their combined `state`."""
        return self.api("GET", f"/repos/{repo.full_name}/commits/{ref}/status")

    def issue_comments(self, repo: Repo, number: int) -> list[dict[str, Any]]:
        """The comments of an issue or pull request (they share their numbers)."""
        return self.api("GET", f"/repos/{repo.full_name}/issues/{number}/comments")

    # -- Gitea's own records --------------------------------------------------------------------

    def hook_deliveries(self, hook_id: int) -> list[HookDelivery]:
        """A hook's deliveries, oldest first, read from Gitea's database (its hook_task table): the
        REST API has no deliveries endpoint, only the web UI shows them."""
        with sqlite3.connect(f"file:{self.work / 'data' / 'gitea.db'}?mode=ro", uri=True, timeout=10) as db:
            rows = db.execute("SELECT uuid, event_type, is_delivered, is_succeed, request_content, response_content"
                              " FROM hook_task WHERE hook_id = ? ORDER BY id", (hook_id,)).fetchall()
        return [HookDelivery(uuid, event, bool(delivered), bool(succeeded), json.loads(request or "{}"), json.loads(response or "{}"))
                for uuid, event, delivered, succeeded, request, response in rows]

    def settled_hook_deliveries(self, hook_id: int, count: int, timeout: float = 60.0) -> list[HookDelivery]:
        """A hook's deliveries once `count` of them have their outcome recorded. Gitea marks a task
        delivered *before* it sends the request (so it is sent once), and writes the response and
        whether it succeeded after the answer is read: a receiver has the body, and the task reads
        delivered, while the outcome is still to come. Settled: delivered with a response recorded
        (an answer's status, or the error that stood for one)."""
        deadline = time.monotonic() + timeout
        while True:
            recorded = self.hook_deliveries(hook_id)
            if sum(d.delivered and bool(d.response) for d in recorded) >= count or time.monotonic() > deadline:
                return recorded
            time.sleep(0.1)


def _run(build: GiteaBuild, args: list[str], env: dict[str, str]) -> None:
    done = subprocess.run([str(build.binary), *args], cwd=env["GITEA_WORK_DIR"], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise GiteaError(f"gitea {' '.join(args[:3])} failed ({done.returncode}):\n{done.stdout}{done.stderr}")


def _json(response: httpx.Response) -> Any:
    if response.is_error:
        raise GiteaError(f"{response.request.method} {response.request.url.path}: HTTP {response.status_code} {response.text[:500]}")
    return response.json() if response.content else None
