"""Running perfci-fwd from tests: the built binary, EAL arguments that let runs coexist."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from perfci_agent.errors import BuildFailed
from perfci_agent.measure import default_core
from perfci_agent.workspace import compile_tree

REPO = Path(__file__).resolve().parents[2]
DATAPLANE = REPO / "dataplane"


def forwarding_core() -> int:
    """The CPU a measurement of this process forwards on (this xdist worker's own: tests/support/services.py)."""
    return default_core()


def file_prefix(eal: list[str]) -> str:
    return next(a.split("=", 1)[1] for a in eal if a.startswith("--file-prefix="))


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


def sigterm_in_window(binary: Path, eal: list[str], app: list[str], forwarding: float = 0.3, timeout: float = 60,
                      in_window: Callable[[], object] = lambda: None) -> Run:
    """Run until the measurement window has been open for ``forwarding`` seconds, then SIGTERM.
    The dataplane's window control (``--perf-ctl``/``--perf-ack``, perf's protocol, answered here)
    says when it opened: by then its signal handlers are installed, however long start-up took on a
    loaded host. ``in_window`` is called once the window is open."""
    ctl_r, ctl_w = os.pipe()
    ack_r, ack_w = os.pipe()
    try:
        proc = subprocess.Popen([str(binary), *eal, "--", *app, "--perf-ctl", str(ctl_w), "--perf-ack", str(ack_r)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, pass_fds=(ctl_w, ack_r))
        os.close(ctl_w)
        os.close(ack_r)
        with os.fdopen(ctl_r, "r") as ctl, os.fdopen(ack_w, "w") as ack:
            for command in ("enable", "disable"):
                line = ctl.readline()
                if line != f"{command}\n":
                    break  # the dataplane ended or failed: its exit status and stderr say why
                ack.write("ack\n")
                ack.flush()
                if command == "enable":
                    in_window()
                    time.sleep(forwarding)  # every lcore in its window, forwarding
                    proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        if "proc" in locals() and proc.poll() is None:
            proc.kill()
        raise
    return Run(proc.returncode, out, err)


def build(source: Path, builddir: Path) -> Path:
    """The agent's build of a dataplane tree (meson + ninja); returns the binary."""
    try:
        return compile_tree(source, builddir)
    except BuildFailed as exc:
        raise AssertionError(f"{source} does not build: {exc}\n{exc.log_tail}") from None
