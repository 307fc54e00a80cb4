"""Running perfci-fwd from tests: the built binary, EAL arguments that let runs coexist."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from perfci_agent.errors import BuildFailed
from perfci_agent.workspace import compile_tree

REPO = Path(__file__).resolve().parents[2]
DATAPLANE = REPO / "dataplane"


def forwarding_core() -> int:
    """The last CPU this process may run on (core 0 keeps the rest of the machine)."""
    return max(os.sched_getaffinity(0))


def eal_args(*extra: str, hugepages: bool = False) -> list[str]:
    # A unique --file-prefix keeps concurrent DPDK processes from sharing runtime state.
    args = ["-l", str(forwarding_core()), "--no-pci", f"--file-prefix=t{uuid.uuid4().hex[:12]}",
            "--log-level=lib.*:error"]
    args += ["-m", "256", "--huge-unlink"] if hugepages else ["--no-huge", "-m", "512"]
    return args + list(extra)


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    @property
    def report(self) -> dict:
        assert self.returncode == 0, f"perfci-fwd failed ({self.returncode}): {self.stderr}"
        return json.loads(self.stdout)


def run_fwd(binary: Path, eal: list[str], app: list[str], timeout: float = 60, **kw) -> Run:
    proc = subprocess.run([str(binary), *eal, "--", *app], capture_output=True, text=True,
                          timeout=timeout, **kw)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def build(source: Path, builddir: Path) -> Path:
    """The agent's build of a dataplane tree (meson + ninja); returns the binary."""
    try:
        return compile_tree(source, builddir)
    except BuildFailed as exc:
        raise AssertionError(f"{source} does not build: {exc}\n{exc.log_tail}") from None
