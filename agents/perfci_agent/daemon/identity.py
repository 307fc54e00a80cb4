"""Who this agent is: its machine fingerprint, its bearer token, and the one-time enrollment.

The token file holds the agent token and nothing else, mode 0600 (it is a password). Beside the
state directory, ``enrollment.json`` remembers what the agent enrolled as (agent id, machine
fingerprint): the server compares results only within one machine, so a machine whose identity
changed (CPU, microcode, kernel...) is detected at start and before every claim, not at every
upload. Its host state (hugepages, governor) may change: that is recorded with each run.
"""

from __future__ import annotations

import json
import stat
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from perfci_core.result import HOST_STATE_KEYS, same_identity

from .. import fingerprint
from ..server_api import AgentClient
from .config import AgentConfig
from .spool import write_atomically

TOKEN_MODE = 0o600


class IdentityError(Exception):
    """The agent cannot authenticate as itself; the message says what to do."""


@dataclass(frozen=True)
class Machine:
    details: dict[str, Any]
    machine_id: str


def this_machine(core: int) -> Machine:
    """The fingerprint ``perfci measure`` records for a run on ``core`` (the same function)."""
    details = fingerprint.collect(core)
    return Machine(details, fingerprint.machine_id(details))


def token_mode_problem(path: Path) -> str | None:
    """Why the token file's permissions are unsafe, or None (also None when there is no file)."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return None
    if mode & 0o077:
        return f"token file {path} has mode {mode:04o}; it must be {TOKEN_MODE:04o} (chmod 600 {path})"
    return None


def read_token(path: Path) -> str | None:
    """The stored agent token, None when not enrolled yet; refuses a file others can read."""
    problem = token_mode_problem(path)
    if problem:
        raise IdentityError(problem)
    try:
        token = path.read_text().strip()
    except FileNotFoundError:
        return None
    if not token:
        raise IdentityError(f"token file {path} is empty; remove it and set enrollment_token to enroll again")
    return token


def write_token(path: Path, token: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomically(path, (token + "\n").encode(), TOKEN_MODE)


def changed_keys(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    return sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))


def identity_change(config: AgentConfig, machine: Machine) -> str | None:
    """Why this host is no longer the machine it enrolled as, or None. Host state (hugepages, the
    governor: perfci_core.result.HOST_STATE_KEYS) may change; every run records it."""
    try:
        record = json.loads(config.enrollment_path.read_text())
    except FileNotFoundError:
        return None  # a token provisioned by other means: nothing to compare against
    except (OSError, ValueError) as exc:
        raise IdentityError(f"{config.enrollment_path} is unreadable ({exc}); remove it to skip this check") from None
    if record.get("machine_fingerprint") == machine.machine_id:
        return None
    enrolled = record.get("machine")
    if enrolled is not None and same_identity(enrolled, machine.details):
        return None
    keys = [key for key in changed_keys(enrolled or {}, machine.details) if key not in HOST_STATE_KEYS]
    return (
        f"this machine's identity changed since enrollment ({', '.join(keys) or 'unknown keys'}); the server "
        f"compares results only within one machine, so this is a new machine to it: remove {config.token_path} "
        f"and {config.enrollment_path} and set enrollment_token to enroll again"
    )


def check_enrollment_record(config: AgentConfig, machine: Machine) -> None:
    """Raise when this host is no longer the machine it enrolled as."""
    problem = identity_change(config, machine)
    if problem is not None:
        raise IdentityError(problem)


def enroll(config: AgentConfig, client: AgentClient, machine: Machine, backends: list[str], version: str) -> str:
    """Exchange the enrollment token for an agent token; store both records. Returns the token."""
    if not config.enrollment_token:
        raise IdentityError(f"not enrolled ({config.token_path} does not exist) and no enrollment_token is configured; "
                            "get one with `perfci admin enrollment-token` and set enrollment_token")
    enrolled = client.enroll(config.enrollment_token, config.machine_name, machine.machine_id, machine.details, backends, version)
    write_token(config.token_path, enrolled["token"])
    record = {
        "agent_id": enrolled["agent_id"],
        "server_machine_id": enrolled["machine_id"],
        "machine_fingerprint": machine.machine_id,
        "machine": machine.details,
        "server_url": config.server_url,
        "enrolled_at": datetime.now(timezone.utc).isoformat(),
    }
    write_atomically(config.enrollment_path, json.dumps(record, indent=1, sort_keys=True).encode(), 0o644)
    return enrolled["token"]

