"""Runs at one or more lcore counts, the calibration loop beside them, and the window's energy
where RAPL is readable.

A repetition of a ``scaling`` config runs the commit at 1, 2, 4, ... lcores and at N, back to back
(N: the config's ``lcores``, else every core this agent is allotted), so the repetitions interleave
the counts (1, 2, 4, 1, 2, 4, ...) and the host's drift over the measurement does not bias the
slope. Amdahl's serial fraction needs three or more counts
(:func:`perfci_core.analysis.scaling.unidentified`): with two (a 2-core agent) the result stores
throughput and efficiency at both and says in ``unavailable`` why it has no B. Right before the
dataplane at each count, the calibration loop (:mod:`.clockcal`) runs on the same cores; its figures
tell the clock and a sibling's share from the dataplane's own contention. An ordinary config runs
at ``lcores`` (default one). The 1-lcore run (or the only run) also gives the sample's ordinary
``tsc.*`` counts, so ``pps``, ``cpp`` and ``cur`` stay the figures of today's single-lcore loop.

Per run the sample's raw counts gain ``lc.<n>.*`` (packets and busy cycles summed over the
lcores, the shared window's wall-clock length) from the report, ``lc.<n>.cal_dependent`` /
``cal_throughput`` from the calibration loop, and, when energy is read,
``lc.<n>.pkg_joules`` / ``ram_joules`` / ``energy_seconds`` / ``other_cpus_busy`` / ``loadavg1``.

Backends: ``tsc`` runs everything here (energy included). ``pmu`` takes its own 1-lcore sample
(perf owns the window's control FIFOs, so no energy) and the wider runs are rdtsc-accounted runs
made here. ``sim`` is refused for a scaling config: valgrind runs a program's threads one at a
time, so no throughput it sees scales; at a fixed count above one its hazard simulator runs the
dataplane on that many lcores and counts the cache-line transfers between them (the cachegrind
pass stays on one: it models one cache).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from perfci_core import metrics
from perfci_core.analysis import scaling
from perfci_core.result import BenchConfig, MetricValue, Sample

from . import clockcal, energy, runner
from .backends import Backend, metric_values
from .errors import RunFailed, UsageError


def counts_for(config: BenchConfig, allotted: Sequence[int], backend: metrics.Backend) -> list[int]:
    """The lcore counts each repetition runs, in order; UsageError when the config cannot run here."""
    want = config.lcores or (len(allotted) if config.scaling else 1)
    if want > len(allotted):
        raise UsageError(f"config {config.name!r} needs {want} lcores; this agent is allotted {len(allotted)} ({', '.join(map(str, allotted))})")
    if backend is metrics.Backend.SIM and config.scaling:
        raise UsageError("sim does not measure scaling: valgrind runs a program's threads one at a time, so no throughput it "
                         "sees scales; use --backend tsc or pmu for a scaling config (sim runs a fixed lcore count: its "
                         "hazard simulator counts the cache-line transfers between them)")
    if backend is metrics.Backend.PMU and not config.scaling and want > 1:
        raise UsageError("pmu counts one forwarding lcore (perf stat -C on one core); use --backend tsc for a fixed count above one")
    if config.scaling:
        if want < 2:
            raise UsageError(f"a scaling config needs two or more lcores; this agent is allotted {len(allotted)}")
        return scaling_counts(want)
    return [want]


def scaling_counts(most: int) -> list[int]:
    """1, 2, 4, ... below ``most``, then ``most``: each doubling a point of the fit, the widest run the last."""
    counts = [1]
    while counts[-1] * 2 < most:
        counts.append(counts[-1] * 2)
    return counts + [most]


def lcore_raw(report: dict, n: int) -> dict[str, float]:
    """``lc.<n>.*`` of one report (dataplane/README.md, "Report"): the window's packets and busy
    cycles are sums over the lcores, its ``cycles.window`` the shared window's wall-clock length.
    The per-lcore section must name ``n`` lcores; a report without one is a one-lcore dataplane."""
    per = report.get("lcores")
    if per is None and n != 1:
        raise RunFailed(f"asked for {n} forwarding lcores, the report has no per-lcore counters (a one-lcore dataplane)")
    if per is not None and len(per) != n:
        raise RunFailed(f"asked for {n} forwarding lcore(s), the report has {len(per)}")
    w = report["window"]
    return {f"lc.{n}.packets": float(w["packets"]["rx"]), f"lc.{n}.busy_cycles": float(w["cycles"]["busy"]),
            f"lc.{n}.window_cycles": float(w["cycles"]["window"])}


def _spec(binary: Path, cores: Sequence[int], config: BenchConfig, workdir: Path, timeout: float) -> runner.RunSpec:
    return runner.RunSpec(binary, cores[0], config, cores=list(cores) if len(cores) > 1 else [], workdir=workdir, timeout=timeout)


class Runs:
    """Makes the samples of one measurement; ``unavailable`` collects what could not be measured.
    A scaling config builds the calibration loop in ``tool_cache`` (:func:`.clockcal.binary`)."""

    def __init__(self, impl: Backend, binary: Path, allotted: Sequence[int], counts: Sequence[int], config: BenchConfig,
                 workdir: Path, energy_source: energy.Source | None, timeout: float = 120.0,
                 tool_cache: Path | None = None) -> None:
        self.impl, self.binary, self.allotted, self.counts = impl, binary, list(allotted), list(counts)
        self.config, self.workdir, self.energy_source, self.timeout = config, workdir, energy_source, timeout
        self.unavailable: dict[str, str] = {}
        self.tool_cache = tool_cache
        self.clockcal: Path | None = None  # the loop's executable, built at the first run
        if config.scaling and (why := scaling.unidentified(self.counts)) is not None:
            self.unavailable["serial_fraction"] = f"not fitted: {why}"

    def _calibrate(self, n: int) -> dict[str, float]:
        """The calibration loop on the cores of the run at ``n`` lcores, right before it (scaling
        configs); nothing once it failed: the same loop for every run, or none."""
        if not self.config.scaling or "calibration" in self.unavailable:
            return {}
        try:
            self.clockcal = self.clockcal or clockcal.binary(self.tool_cache)
            return clockcal.run(self.clockcal, self.allotted[:n]).raw(n)
        except clockcal.CalibrationUnavailable as exc:
            self.unavailable["calibration"] = f"not measured: {exc}"
            return {}

    def _run(self, n: int, with_energy: bool) -> tuple[dict, dict[str, float | None]]:
        cores = self.allotted[:n]
        calibrated = self._calibrate(n)
        report, raw = self._dataplane(n, cores, with_energy)
        return report, {**raw, **calibrated}

    def _dataplane(self, n: int, cores: list[int], with_energy: bool) -> tuple[dict, dict[str, float | None]]:
        spec = _spec(self.binary, cores, self.config, self.workdir, self.timeout)
        if with_energy and self.energy_source is not None:
            result, e = energy.run_measured(self.energy_source, spec, cores)
            if isinstance(e, energy.EnergyUnavailable):
                self.unavailable["energy"] = f"RAPL reading failed: {e}"
                return result.report, lcore_raw(result.report, n)
            return result.report, {**lcore_raw(result.report, n), **e.raw(f"lc.{n}")}
        result = runner.run(spec)
        return result.report, lcore_raw(result.report, n)

    def sample(self, rep: int) -> Sample:
        backend = self.impl.name
        raw: dict[str, float | None] = {}
        base: Sample | None = None
        if backend is metrics.Backend.TSC:
            for n in self.counts:
                report, lc = self._run(n, with_energy=True)
                if n == self.counts[0]:
                    raw.update(runner.tsc_raw(report))
                raw.update(lc)
            derived = metric_values(metrics.derive_tsc(raw), backend)
        else:
            calibrated = self._calibrate(1) if backend is metrics.Backend.PMU else {}
            base = self.impl.sample(self.binary, self.allotted[0], self.config, self.workdir, rep)
            raw.update(base.raw)
            raw.update(calibrated)
            if backend is metrics.Backend.PMU:
                raw.update({"lc.1.packets": raw.get("tsc.packets"), "lc.1.busy_cycles": raw.get("tsc.busy_cycles"),
                            "lc.1.window_cycles": raw.get("tsc.window_cycles")})
                for n in self.counts[1:]:
                    raw.update(self._run(n, with_energy=False)[1])
            derived = list(base.metrics)
        if backend is not metrics.Backend.SIM:
            derived += metric_values(scaling.derive(raw), backend)
        running = base.running_pct if base is not None else {}
        return Sample(rep=rep, raw=raw, running_pct=running, metrics=derived)


def with_interval(samples: list[Sample], backend: metrics.Backend) -> list[Sample]:
    """Every sample gains the result's bootstrap interval of the serial fraction (when there is one)."""
    extra = scaling.interval_metrics([s.raw for s in samples])
    if not extra:
        return samples
    values = [MetricValue(metric=k, backend=backend, value=v) for k, v in sorted(extra.items())]
    return [s.model_copy(update={"metrics": [*s.metrics, *values]}) for s in samples]
