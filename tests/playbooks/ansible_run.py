"""Running ansible-playbook from the tests and reading its PLAY RECAP."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"
BIN = Path(sys.executable).parent

_RECAP = re.compile(
    r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)"
    r"\s+failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)\s+rescued=(?P<rescued>\d+)\s+ignored=(?P<ignored>\d+)",
    re.MULTILINE,
)
_TASK = re.compile(r"^(?:TASK|RUNNING HANDLER) \[(?P<name>.+?)\]", re.MULTILINE)


@dataclass
class Run:
    returncode: int
    output: str
    seconds: float

    def recap(self) -> dict[str, dict[str, int]]:
        """Host -> counters of the PLAY RECAP; empty when the run ended before printing one."""
        _, _, tail = self.output.rpartition("PLAY RECAP")
        return {
            m["host"]: {k: int(v) for k, v in m.groupdict().items() if k != "host"} for m in _RECAP.finditer(tail)
        }

    def changed_tasks(self) -> list[str]:
        """Names of the tasks that reported `changed`, to say why an apply was not idempotent."""
        names: list[str] = []
        current = None
        for line in self.output.splitlines():
            task = _TASK.match(line)
            if task:
                current = task["name"]
            elif line.startswith("changed:") and current and current not in names:
                names.append(current)
        return names


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        ANSIBLE_CONFIG=str(PLAYBOOKS / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        PY_COLORS="0",
    )
    return env


def run(argv: list[str], timeout: float = 900) -> Run:
    started = time.monotonic()
    proc = subprocess.run(
        argv, cwd=PLAYBOOKS, env=environment(), capture_output=True, text=True, timeout=timeout, check=False
    )
    return Run(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started)


def playbook(*args: str, timeout: float = 900) -> Run:
    return run([str(BIN / "ansible-playbook"), *args], timeout=timeout)


def tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.splitlines()[-lines:])
