"""``perfci agent check``: is this host ready to run the agent daemon?

Each check yields lines of (status, name, detail); ``fail`` makes the command exit 1. The checks
are the contract's: the config parses; the dataplane toolchain is present (meson, ninja,
pkg-config finding libdpdk, valgrind and perf where a configured backend needs them); the state,
spool and cache directories are writable; the token file is 0600; the tuned-state report; and,
unless ``--no-server``, the server answers and accepts the token.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from ..server_api import AgentClient, ApiError, ApiClient, ServerUnreachable
from . import host, identity
from .config import AgentConfig, ConfigError, load

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass(frozen=True)
class Line:
    status: str
    name: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def _tool(name: str, needed_for: str | None = None) -> Line:
    path = shutil.which(name)
    if path:
        return Line(OK, name, path)
    if needed_for is None:
        return Line(OK, name, "not installed; not needed by the configured backends")
    return Line(FAIL, name, f"not found on PATH (needed {needed_for})")


def toolchain(backends: list[str]) -> Iterator[Line]:
    for name in ("git", "meson", "ninja", "pkg-config"):
        yield _tool(name, "to fetch and build the dataplane")
    if shutil.which("pkg-config"):
        r = subprocess.run(["pkg-config", "--modversion", "libdpdk"], capture_output=True, text=True, errors="replace",
                           timeout=30)
        yield Line(OK, "libdpdk", r.stdout.strip()) if r.returncode == 0 else \
            Line(FAIL, "libdpdk", "pkg-config does not find libdpdk (Debian: libdpdk-dev)")
    ccache = shutil.which("ccache")
    yield Line(OK, "ccache", ccache) if ccache else \
        Line(WARN, "ccache", "not installed: every new source tree compiles every file (Debian: ccache)")
    yield _tool("valgrind", "by the sim backend" if {"auto", "sim"} & set(backends) else None)
    yield _tool("perf", "by the pmu backend" if {"auto", "pmu"} & set(backends) else None)


def _writable(path: Path) -> Line:
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not os.access(existing, os.W_OK | os.X_OK):
        return Line(FAIL, "dir", f"{path} is not writable by this user ({existing} is the nearest existing directory)")
    return Line(OK, "dir", str(path) if existing == path else f"{path} (created at start)")


def directories(cfg: AgentConfig) -> Iterator[Line]:
    for path in (cfg.state_dir, cfg.spool_dir, cfg.cache_dir):
        yield _writable(path)


def token(cfg: AgentConfig) -> Iterator[Line]:
    problem = identity.token_mode_problem(cfg.token_path)
    if problem:
        yield Line(FAIL, "token", problem)
    elif cfg.token_path.exists():
        yield Line(OK, "token", f"{cfg.token_path} (mode 0600)")
    elif cfg.enrollment_token:
        yield Line(OK, "token", f"not enrolled yet; enrolls at start with enrollment_token, token to {cfg.token_path}")
    else:
        yield Line(FAIL, "token", f"{cfg.token_path} does not exist and no enrollment_token is configured")


def machine(cfg: AgentConfig) -> Iterator[Line]:
    allowed = os.sched_getaffinity(0)
    missing = [c for c in cfg.cores if c not in allowed]
    if missing:
        yield Line(FAIL, "cores", f"{missing} not available to this process (allowed: {sorted(allowed)})")
        return
    yield Line(OK, "cores", f"{cfg.cores} (forwarding on {cfg.core})")
    this = identity.this_machine(cfg.core)
    if cfg.token_path.exists():
        try:
            identity.check_enrollment_record(cfg, this)
            yield Line(OK, "fingerprint", f"{this.machine_id[:16]}")
        except identity.IdentityError as exc:
            yield Line(FAIL, "fingerprint", str(exc))
    with tempfile.TemporaryDirectory() as scratch:  # a check must not create the agent's cache as another user
        usable, problems = host.usable_backends(cfg.backends, host.probe_backends(this, Path(scratch), cfg.core))
    for p in problems:
        yield Line(FAIL, "backends", p)
    if usable:
        yield Line(OK, "backends", ", ".join(usable))
    tuned = host.tuned_state(cfg.core, this, cfg.backends)
    if tuned.ok:
        yield Line(OK, "tuning", "host is in its tuned state")
    for deviation in tuned.deviations:
        yield Line(FAIL if cfg.refuse_untuned else WARN, "tuning", deviation)


def server(cfg: AgentConfig) -> Iterator[Line]:
    with ApiClient(cfg.server_url, timeout=10.0) as client:
        try:
            health = client.get("/health")
            yield Line(OK, "server", f"{cfg.server_url} answers ({health.get('env', '?')})")
        except (ApiError, ServerUnreachable) as exc:
            yield Line(FAIL, "server", str(exc) if isinstance(exc, ServerUnreachable) else f"{cfg.server_url}: {exc}")
            return
    try:
        token = identity.read_token(cfg.token_path)
    except identity.IdentityError:
        return  # already reported by token()
    if token is None:
        return
    with AgentClient(cfg.server_url, token, timeout=10.0) as client:
        try:
            client.heartbeat()
            yield Line(OK, "auth", "the server accepts the agent token")
        except (ApiError, ServerUnreachable) as exc:
            yield Line(FAIL, "auth", f"token refused: {exc}")


def run_checks(config_path: str | None, with_server: bool) -> list[Line]:
    """Every check's lines (:class:`~perfci_agent.daemon.config.ConfigFileError` propagates)."""
    try:
        cfg = load(config_path)
    except ConfigError as exc:
        return [*(Line(FAIL, "config", p) for p in exc.problems), *toolchain(["auto"])]
    lines = [Line(OK, "config", f"{config_path or 'environment'}: machine {cfg.machine_name!r}, server {cfg.server_url}")]
    lines += [*toolchain(list(cfg.backends)), *directories(cfg), *token(cfg), *machine(cfg)]
    if with_server:
        lines += list(server(cfg))
    return lines
