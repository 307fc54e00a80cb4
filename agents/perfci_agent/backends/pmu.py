"""``pmu``: perf stat hardware counters on the forwarding core, gated to the measurement window.

One repetition is

    perf stat -x, -o OUT -e <groups> -C CORE -D -1 --control fd:CTL,ACK --
        taskset -c CORE perfci-fwd ... -- ... --perf-ctl CTL --perf-ack ACK

CTL and ACK are two FIFOs the agent creates and opens read-write (so neither open blocks) before
starting perf; perf and the dataplane inherit them. ``-D -1`` starts perf with its counters
disabled; the dataplane writes ``enable`` when its window opens and ``disable`` when it closes,
each time waiting for perf's ``ack`` (docs/design.md, "These machines"). ``-C CORE`` confines counting to the
forwarding core. The same path works for software events (task-clock), which is how it is
tested on machines without a PMU.

eIPC needs the idle share removed: before the repetitions an idle calibration run (``--idle``:
the same loop, no traffic) gives instructions and cycles per empty poll
(:class:`perfci_core.metrics.IdleCalibration`); its raw counts are stored in every sample
(``pmu.idle_*``) so the server can re-derive.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from perfci_core import metrics
from perfci_core.result import BenchConfig, Sample

from .. import events as ev
from .. import perfstat, runner
from ..errors import RunFailed
from . import metric_values

IDLE_POLLS = 200_000


@dataclass
class WindowRun:
    result: runner.RunResult
    counts: list[perfstat.Count]
    perf_output: str


def run_counted(spec: runner.RunSpec, event_spec: str, perf: str | None = None, fmt: str = "csv", cpu_wide: bool = True) -> WindowRun:
    """Run ``spec`` under ``perf stat`` gated by the dataplane's --perf-ctl/--perf-ack window."""
    perf = perf or shutil.which("perf")
    if perf is None:
        raise RunFailed("perf is not installed")
    with tempfile.TemporaryDirectory(prefix="perfci-perf-") as tmp:
        ctl_path, ack_path, out_path = Path(tmp) / "ctl", Path(tmp) / "ack", Path(tmp) / "perf.out"
        os.mkfifo(ctl_path)
        os.mkfifo(ack_path)
        ctl = os.open(ctl_path, os.O_RDWR)
        ack = os.open(ack_path, os.O_RDWR)
        try:
            wrapper = [perf, "stat", "-x," if fmt == "csv" else "-j", "-o", str(out_path), "-e", event_spec]
            if cpu_wide:
                wrapper += ["-C", str(spec.core)]
            wrapper += ["-D", "-1", "--control", f"fd:{ctl},{ack}", "--"]
            spec.wrapper = wrapper
            spec.perf_fds = (ctl, ack)
            result = runner.run(spec)
        finally:
            os.close(ctl)
            os.close(ack)
        text = out_path.read_text() if out_path.exists() else ""
    counts = perfstat.parse(text)
    if not counts:
        raise RunFailed("perf stat printed no counters", runner.tail(text + result.stderr))
    return WindowRun(result, counts, text)


class PmuBackend:
    name = metrics.Backend.PMU
    default_reps = 5

    def __init__(self, probe: ev.Probe, mapping: ev.Mapping, timeout: float = 120.0) -> None:
        self.probe = probe
        self.mapping = mapping
        self.timeout = timeout
        self.keys = [k for k in ev.KEYS if k in probe.supported]
        self.groups = ev.groups(self.keys, mapping)
        self.spec = ev.event_spec(self.groups, ev.Mapping({k: probe.supported[k] for k in self.keys}, {}, mapping.general_counters, mapping.fixed))
        self.idle_raw: dict[str, float | None] = {}
        self.idle: metrics.IdleCalibration | None = None

    def config_for(self, config: BenchConfig) -> BenchConfig:
        return config

    def _counts_raw(self, counts: list[perfstat.Count], prefix: str = "pmu.") -> tuple[dict[str, float | None], dict[str, float]]:
        raw: dict[str, float | None] = {}
        pct: dict[str, float] = {}
        for key in ev.KEYS:
            name = self.probe.supported.get(key)
            c = perfstat.lookup(counts, name, self.probe.pmu) if name else None
            raw[prefix + key] = c.value if c is not None else None
            if c is not None and c.value is not None and c.running_pct is not None:
                pct[prefix + key] = c.running_pct
        return raw, pct

    def prepare(self, binary: Path, core: int, config: BenchConfig, workdir: Path) -> None:
        spec = runner.RunSpec(binary, core, config, idle=True, idle_polls=IDLE_POLLS, workdir=workdir, timeout=self.timeout)
        run = run_counted(spec, self.spec)
        raw, _ = self._counts_raw(run.counts, "pmu.idle_")
        empty = float(run.result.report["window"]["polls"]["empty"])
        self.idle_raw = {"pmu.idle_instructions": raw.get("pmu.idle_instructions"), "pmu.idle_cycles": raw.get("pmu.idle_cycles"),
                         "pmu.idle_empty_polls": empty}
        instr, cycles = raw.get("pmu.idle_instructions"), raw.get("pmu.idle_cycles")
        if instr is not None and cycles is not None and empty > 0:
            self.idle = metrics.IdleCalibration.from_idle_run(instr, cycles, empty)

    def sample(self, binary: Path, core: int, config: BenchConfig, workdir: Path, rep: int) -> Sample:
        spec = runner.RunSpec(binary, core, config, workdir=workdir, timeout=self.timeout)
        run = run_counted(spec, self.spec)
        raw, pct = self._counts_raw(run.counts)
        raw.update(runner.tsc_raw(run.result.report))
        raw.update(self.idle_raw)
        values = metric_values(metrics.derive_pmu(raw, self.idle), metrics.Backend.PMU)
        values += metric_values(metrics.derive_tsc(raw), metrics.Backend.TSC)
        return Sample(rep=rep, raw=raw, running_pct=pct, metrics=values)
