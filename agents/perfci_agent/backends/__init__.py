"""Measurement backends (docs/design.md, "Measurement"): ``pmu`` (perf stat), ``sim`` (valgrind), ``tsc`` (rdtsc report).

Each backend turns one repetition into a :class:`~perfci_core.result.Sample` (raw counts plus the
metrics derived from them by :mod:`perfci_core.metrics`). :func:`select` implements ``auto``.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from perfci_core import metrics
from perfci_core.result import BenchConfig, MetricValue, Sample

from ..errors import BackendUnavailable
from ..events import Probe


class Backend(Protocol):
    name: metrics.Backend
    default_reps: int

    def config_for(self, config: BenchConfig) -> BenchConfig: ...

    def prepare(self, binary: Path, core: int, config: BenchConfig, workdir: Path) -> None: ...

    def sample(self, binary: Path, core: int, config: BenchConfig, workdir: Path, rep: int) -> Sample: ...


def metric_values(derived: dict[str, float], backend: metrics.Backend) -> list[MetricValue]:
    return [MetricValue(metric=k, backend=backend, value=v) for k, v in sorted(derived.items())]


@dataclass(frozen=True)
class Choice:
    backend: metrics.Backend
    reason: str


def valgrind_version() -> str | None:
    import subprocess

    exe = shutil.which("valgrind")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, "--version"], capture_output=True, text=True, errors="replace", timeout=30)
        return done.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def select(requested: str, probe: Callable[[], Probe], valgrind: Callable[[], str | None] = valgrind_version) -> Choice:
    """Resolve ``auto|pmu|sim|tsc`` into the backend to use and a one-line reason."""
    if requested not in ("auto", "pmu", "sim", "tsc"):
        raise BackendUnavailable(f"unknown backend {requested!r} (auto, pmu, sim, tsc)")
    if requested == "tsc":
        return Choice(metrics.Backend.TSC, "requested: tsc (the dataplane's rdtsc accounting)")
    if requested == "sim":
        v = valgrind()
        if v is None:
            raise BackendUnavailable("sim needs valgrind, which is not installed (Debian: valgrind); still possible: tsc")
        return Choice(metrics.Backend.SIM, f"requested: sim ({v})")
    p = probe()
    if requested == "pmu":
        if not p.has_pmu:
            others = ["sim"] if valgrind() else []
            raise BackendUnavailable(f"pmu backend unavailable: {p.why_no_pmu()}; still possible: {', '.join(others + ['tsc'])}")
        return Choice(metrics.Backend.PMU, f"requested: pmu ({p.perf}; events: {', '.join(sorted(p.supported))}){p.describe_pmu()}")
    if p.has_pmu:
        return Choice(metrics.Backend.PMU, f"PMU available ({p.perf}): {len(p.supported)} events count here{p.describe_pmu()}")
    v = valgrind()
    if v is not None:
        return Choice(metrics.Backend.SIM, f"{p.why_no_pmu()}; {v} found: simulated counts (sim)")
    return Choice(metrics.Backend.TSC, f"{p.why_no_pmu()}; no valgrind: the dataplane's rdtsc accounting (tsc)")
