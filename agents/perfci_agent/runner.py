"""Run the dataplane once, in a fresh process pinned to one core, and read its JSON report.

Command line (dataplane/README.md):

    [wrapper...] taskset -c CORES perfci-fwd -l CORES --no-huge -m 512 --no-pci
        --log-level=lib.*:error --file-prefix perfci-<pid>-<n>
        -- --harness self --packets N --warmup N [--idle --idle-polls N]
           [--perf-ctl FD --perf-ack FD] --report FILE

``wrapper`` is ``perf stat ... --`` or ``valgrind ...``; taskset sits *inside* perf so perf
itself is not pinned to the forwarding core, and execs the dataplane (same process).
``--file-prefix`` keeps EAL runtime files of concurrent runs apart; the dataplane removes them
when it exits, :func:`run` after a run that was killed or crashed. CORES is one core, or
several (``a,b``: the dataplane forwards on every one of them, each lcore with its own queue
pair, and the report gains a per-lcore breakdown under ``lcores``).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from perfci_core.result import BenchConfig

from .errors import RunFailed
from .workspace import tail

REPORT_SCHEMA = "perfci-fwd.report/1"
_counter = itertools.count()


@dataclass
class RunSpec:
    binary: Path
    core: int
    config: BenchConfig
    cores: list[int] = field(default_factory=list)  # every forwarding core (EAL -l); empty: `core` alone
    idle: bool = False
    idle_polls: int = 1_000_000
    workdir: Path | None = None  # cwd; routes files are relative to dataplane/
    timeout: float = 120.0
    wrapper: list[str] = field(default_factory=list)
    perf_fds: tuple[int, int] | None = None  # (ctl, ack) inherited by the child
    pass_fds: tuple[int, ...] = ()
    pin_outer: bool = False  # taskset before the wrapper (valgrind runs the program itself)
    env: dict[str, str] | None = None  # the whole environment (None: inherit this process's)
    stable_stack: bool = False  # pad the environment so the stack starts at the same address

    def __post_init__(self) -> None:
        if self.cores and self.core not in self.cores:
            raise ValueError(f"core {self.core} is not among the forwarding cores {list(self.cores)}")
        if len(set(self.cores)) != len(self.cores) or any(c < 0 for c in self.cores):
            raise ValueError(f"forwarding cores must be distinct CPU numbers, got {list(self.cores)}")

    @property
    def core_list(self) -> str:
        """The forwarding cores as EAL's -l and taskset -c take them (``a,b``)."""
        return ",".join(str(c) for c in sorted(self.cores or (self.core,)))

    def app_args(self, report: Path) -> list[str]:
        c = self.config
        args = ["--harness", c.harness, "--packets", str(c.packets), "--warmup", str(c.warmup)]
        if c.harness == "self":
            args += ["--pkt-size", str(c.pkt_size), "--flows", str(c.flows)]
        if c.routes != "default":
            args += ["--routes", c.routes]
        if self.idle:
            args += ["--idle", "--idle-polls", str(self.idle_polls)]
        if self.perf_fds:
            args += ["--perf-ctl", str(self.perf_fds[0]), "--perf-ack", str(self.perf_fds[1])]
        return args + ["--report", str(report)]

    def argv(self, report: Path) -> list[str]:
        # fixed length (pids up to 2^22 have 7 digits): EAL keeps the prefix in heap strings, whose
        # sizes would move the heap between a pid of 4 digits and one of 7
        prefix = f"perfci-{os.getpid():07d}-{next(_counter) % 1_000_000:06d}"
        eal = ["-l", self.core_list, "--no-huge", "-m", "512", "--no-pci", "--log-level=lib.*:error", "--file-prefix", prefix]
        taskset = [shutil.which("taskset") or "taskset", "-c", self.core_list]
        app = [str(self.binary), *eal, "--", *self.app_args(report)]
        if self.pin_outer:
            return [*taskset, *self.wrapper, *app]
        return [*self.wrapper, *taskset, *app]


@dataclass
class RunResult:
    report: dict
    stdout: str
    stderr: str
    elapsed: float
    argv: list[str]


STACK_STRINGS = 8192  # bytes of argv + environment strings a stable-stack run is padded to


def stable_stack_env(argv: list[str], env: dict[str, str]) -> dict[str, str]:
    """``env`` plus a padding variable that brings argv and environment strings to a fixed size.

    The kernel (and valgrind, which builds its client's stack the same way) copies those strings
    to the top of the stack, so their length decides where every stack frame lands; a file prefix
    with another pid or a longer temporary path would move the frames and with them every
    address-dependent count (4K aliasing between stack and packet data). valgrind adds its core
    preload library, named after ``VALGRIND_LIB``, to ``LD_PRELOAD``: counted too.
    """
    def size() -> int:
        strings = sum(len(a) + 1 for a in argv) + sum(len(k) + len(v) + 2 for k, v in env.items())
        return strings + len(env.get("VALGRIND_LIB", ""))

    env = {k: v for k, v in env.items() if k != "PERFCI_STACK_PAD"}
    used = size() + len("PERFCI_STACK_PAD=") + 1
    if used > STACK_STRINGS:
        raise RunFailed(f"argv and environment take {used} bytes, more than the {STACK_STRINGS} a stable-stack run allows")
    env["PERFCI_STACK_PAD"] = "x" * (STACK_STRINGS - used)
    return env


def eal_runtime_dir(prefix: str, env: dict[str, str] | None = None) -> Path:
    """Where EAL keeps the runtime files of a ``--file-prefix`` (its rule: /var/run for root,
    else ``$XDG_RUNTIME_DIR`` or /tmp)."""
    env = os.environ if env is None else env
    base = "/var/run" if os.getuid() == 0 else env.get("XDG_RUNTIME_DIR", "/tmp")
    return Path(base) / "dpdk" / prefix


def run(spec: RunSpec) -> RunResult:
    """Run once; :class:`RunFailed` on timeout, crash, non-zero exit or a bad report."""
    with tempfile.TemporaryDirectory(prefix="perfci-run-") as tmp:
        report_path = Path(tmp) / "report.json"
        argv = spec.argv(report_path)
        env = spec.env
        if spec.stable_stack:  # only the program's own argv reaches its stack, not the wrapper's
            env = stable_stack_env(argv[argv.index(str(spec.binary)):], spec.env if spec.env is not None else dict(os.environ))
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",  # the dataplane's and EAL's messages end up in a log tail, whatever their bytes
                cwd=spec.workdir,
                env=env,
                pass_fds=tuple(spec.pass_fds) + (tuple(spec.perf_fds) if spec.perf_fds else ()),
                start_new_session=True,
            )
        except FileNotFoundError as exc:
            raise RunFailed(f"cannot start {argv[0]}: {exc}") from None
        try:
            out, err = proc.communicate(timeout=spec.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise RunFailed(f"dataplane timed out after {spec.timeout:.0f} s", tail(out + err)) from None
        finally:  # a killed or crashed dataplane leaves its EAL runtime files (6.5 MB) behind
            if proc.returncode != 0:
                shutil.rmtree(eal_runtime_dir(argv[argv.index("--file-prefix") + 1], env), ignore_errors=True)
        elapsed = time.monotonic() - start
        if proc.returncode != 0:
            how = f"killed by signal {-proc.returncode} ({signal.Signals(-proc.returncode).name})" if proc.returncode < 0 else f"exit status {proc.returncode}"
            raise RunFailed(f"dataplane failed: {how}", tail(out + err))
        try:
            report = json.loads(report_path.read_text())
        except (OSError, ValueError) as exc:
            raise RunFailed(f"dataplane wrote no usable report: {exc}", tail(out + err)) from None
    if report.get("schema") != REPORT_SCHEMA:
        raise RunFailed(f"unexpected report schema {report.get('schema')!r} (want {REPORT_SCHEMA})")
    return RunResult(report, out, err, elapsed, argv)


def tsc_raw(report: dict) -> dict[str, float]:
    """The ``tsc.*`` raw counts of one report (docs/design.md, "Measurement" / metrics.derive_tsc)."""
    w = report["window"]
    return {
        "tsc.packets": float(w["packets"]["rx"]),
        "tsc.busy_cycles": float(w["cycles"]["busy"]),
        "tsc.idle_cycles": float(w["cycles"]["idle"]),
        "tsc.window_cycles": float(w["cycles"]["window"]),
        "tsc.harness_cycles": float(w["cycles"]["harness"]),
        "tsc.tsc_hz": float(report["tsc_hz"]),
        "tsc.empty_polls": float(w["polls"]["empty"]),
        "tsc.busy_polls": float(w["polls"]["busy"]),
    }
