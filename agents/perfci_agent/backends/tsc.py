"""``tsc``: the dataplane's own rdtsc accounting (busy/idle cycles, packets) -> CPP, PPS, CUR."""

from __future__ import annotations

from pathlib import Path

from perfci_core import metrics
from perfci_core.result import BenchConfig, Sample

from .. import runner
from . import metric_values


class TscBackend:
    name = metrics.Backend.TSC
    default_reps = 5

    def __init__(self, timeout: float = 120.0) -> None:
        self.timeout = timeout

    def config_for(self, config: BenchConfig) -> BenchConfig:
        return config

    def prepare(self, binary: Path, core: int, config: BenchConfig, workdir: Path) -> None:
        return None

    def sample(self, binary: Path, core: int, config: BenchConfig, workdir: Path, rep: int) -> Sample:
        res = runner.run(runner.RunSpec(binary, core, config, workdir=workdir, timeout=self.timeout))
        raw = runner.tsc_raw(res.report)
        return Sample(rep=rep, raw=raw, metrics=metric_values(metrics.derive_tsc(raw), metrics.Backend.TSC))
