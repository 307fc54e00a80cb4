"""Calibrate the simulated memory hazards against the PMU's.

On a machine with a PMU, the same two commits — a baseline and regression (a), the store-forward
block of ``dataplane/regressions/`` — are measured with ``perfci measure --backend sim --json``
and ``--backend pmu --json``. This compares the four result documents for every hazard metric
both backends can have (:data:`HAZARD_METRICS`: store-forward blocks, split loads, split stores,
4K aliases): per build the median of each backend and their ratio pmu/sim, and the regression's
step (regression minus baseline) in both, with its ratio. A metric the PMU of this CPU does not
count (no event for it, or ``<not supported>``) is listed as not compared, with the reason. The
playbook role ``perfci_calibration`` runs it (``perfci_calibration_sf_compare``); see its README.

    python -m perfci_agent.calibration --sim-baseline SB.json --pmu-baseline PB.json \\
        --sim-regression SR.json --pmu-regression PR.json [--json]

Exit status: 0 compared (at least one metric); 2 a document is unreadable, not a result document,
not ``ok``, of another backend, or the builds do not pair up; 3 the pmu documents carry none of the
hazard metrics (this CPU's events are unsupported or were not counted).

A ratio is ``null`` where its denominator (the simulated value) is zero: ``sim`` counts every
hazard of its model exactly, so a zero there says the model sees none, and no ratio exists.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from pydantic import ValidationError

from perfci_core import metrics
from perfci_core.result import ResultDocument

from .hazards.family import recorded_family

HAZARD_METRICS = ("sf_blocks_pp", "split_loads_pp", "split_stores_pp", "alias_4k_pp")
PMU_RAW = {"sf_blocks_pp": "pmu.sf_blocks", "split_loads_pp": "pmu.split_loads", "split_stores_pp": "pmu.split_stores",
           "alias_4k_pp": "pmu.alias_4k"}
BUILDS = ("baseline", "regression")


class CalibrationError(Exception):
    """A document cannot be used; the message names the file and what is wrong."""

    exit_code = 2


class EventUnsupported(CalibrationError):
    """The pmu documents have none of the hazard metrics: the CPU's events are missing or not counted."""

    exit_code = 3


@dataclass(frozen=True)
class BuildFigures:
    build: str
    commit: str
    sim: float
    pmu: float
    ratio: float | None  # pmu / sim
    sim_samples: int
    pmu_samples: int


@dataclass(frozen=True)
class Step:
    sim: float
    pmu: float
    ratio: float | None  # pmu step / sim step


@dataclass(frozen=True)
class MetricCalibration:
    metric: str
    unit: str
    baseline: BuildFigures | None  # None: not compared (``unavailable`` says why)
    regression: BuildFigures | None
    step: Step | None
    unavailable: str | None = None
    sim_lacks: bool = False  # unavailable because a sim result lacks it (not the PMU)

    def lines(self) -> list[str]:
        if self.unavailable is not None:
            return [f"{self.metric}: not compared: {self.unavailable}"]
        assert self.baseline and self.regression and self.step
        out = [f"{b.build} {b.commit[:12]}: {self.metric} sim {b.sim:.4f}, pmu {b.pmu:.4f} {self.unit} "
               f"(medians of {b.sim_samples} and {b.pmu_samples} samples); pmu/sim {_ratio_text(b.ratio)}"
               for b in (self.baseline, self.regression)]
        s = self.step
        return [*out, f"{self.metric} regression step: sim {s.sim:+.4f}, pmu {s.pmu:+.4f} {self.unit}; pmu/sim {_ratio_text(s.ratio)}"]


@dataclass(frozen=True)
class Calibration:
    metrics: list[MetricCalibration]  # HAZARD_METRICS' order
    sim_family: str | None  # the store-buffer model sim used (raw sim.hz_family.<name>)
    sim_family_default: bool  # true: the CPU is not a modelled family, sim used the default model

    def to_json(self) -> dict:
        return {**asdict(self), "summary": self.lines()}

    def lines(self) -> list[str]:
        out = [line for m in self.metrics for line in m.lines()]
        if self.sim_family_default:
            out.append(f"note: sim used its default model {self.sim_family or '?'}, not one of this CPU's family: "
                       f"the ratios calibrate that model against this CPU")
        return out


def _ratio_text(ratio: float | None) -> str:
    return "n/a (sim is 0)" if ratio is None else f"{ratio:.3f}"


def _ratio(num: float, den: float) -> float | None:
    return num / den if den != 0 else None


def load(path: Path, backend: metrics.Backend) -> ResultDocument:
    """A ``perfci measure --json`` document of ``backend`` with status ok, or :class:`CalibrationError`."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise CalibrationError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        doc = ResultDocument.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "document"
        raise CalibrationError(f"{path}: not a perfci result document ({exc.error_count()} error(s); "
                               f"{where}: {first['msg']})") from None
    if doc.backend is not backend:
        raise CalibrationError(f"{path}: a {doc.backend.value} result where a {backend.value} result was expected")
    if doc.status != "ok":
        raise CalibrationError(f"{path}: the measurement did not succeed ({doc.status}: {doc.reason})")
    return doc


def median_value(doc: ResultDocument, metric: str) -> tuple[float, int] | None:
    """Median of ``metric`` over the samples of the document's own backend and how many had it (None: none had it)."""
    values = [m.value for s in doc.samples for m in s.metrics if m.metric == metric and m.backend is doc.backend]
    return (statistics.median(values), len(values)) if values else None


def _not_counted(doc: ResultDocument, path: Path, metric: str) -> str:
    cpu = doc.machine.get("cpu_model_name") or "this CPU"
    return (f"{path}: the pmu result of commit {doc.commit[:12]} has no {metric}: perf did not count its event on {cpu} "
            f"(raw {PMU_RAW[metric]} absent: the event is <not supported> or <not counted> there, or none is known "
            f"for this CPU)")


def sim_family(doc: ResultDocument) -> tuple[str | None, bool]:
    """The store-buffer model of a sim result (from its raw keys) and whether it was the default."""
    raw = doc.samples[0].raw
    return recorded_family(raw), "sim.hz_family_default" in raw


def compare_metric(metric: str, docs: dict[tuple[str, metrics.Backend], ResultDocument],
                   paths: dict[tuple[str, metrics.Backend], Path]) -> MetricCalibration:
    unit = metrics.get(metric).unit
    figures: dict[str, BuildFigures] = {}
    for build in BUILDS:
        sim_key, pmu_key = (build, metrics.Backend.SIM), (build, metrics.Backend.PMU)
        sim, pmu = median_value(docs[sim_key], metric), median_value(docs[pmu_key], metric)
        if pmu is None:
            return MetricCalibration(metric, unit, None, None, None, _not_counted(docs[pmu_key], paths[pmu_key], metric))
        if sim is None:
            return MetricCalibration(metric, unit, None, None, None, f"{paths[sim_key]}: the sim result of commit "
                                     f"{docs[sim_key].commit[:12]} has no {metric} (measured by an agent without the "
                                     f"memory-hazard simulator, or an older one?)", sim_lacks=True)
        figures[build] = BuildFigures(build, docs[sim_key].commit, sim[0], pmu[0], _ratio(pmu[0], sim[0]), sim[1], pmu[1])
    base, reg = figures["baseline"], figures["regression"]
    step_sim, step_pmu = reg.sim - base.sim, reg.pmu - base.pmu
    return MetricCalibration(metric, unit, base, reg, Step(step_sim, step_pmu, _ratio(step_pmu, step_sim)))


def compare(paths: dict[tuple[str, metrics.Backend], Path]) -> Calibration:
    """Compare the four documents keyed by (build, backend); :class:`CalibrationError` on bad input."""
    docs = {key: load(path, key[1]) for key, path in paths.items()}
    for build in BUILDS:
        sim_key, pmu_key = (build, metrics.Backend.SIM), (build, metrics.Backend.PMU)
        if docs[sim_key].commit != docs[pmu_key].commit:
            raise CalibrationError(f"the {build} documents measure different commits: {paths[sim_key]} has "
                                   f"{docs[sim_key].commit[:12]}, {paths[pmu_key]} has {docs[pmu_key].commit[:12]}")
    if docs[("baseline", metrics.Backend.SIM)].commit == docs[("regression", metrics.Backend.SIM)].commit:
        raise CalibrationError(f"the baseline and the regression are the same commit ({docs[('baseline', metrics.Backend.SIM)].commit[:12]})")
    compared = [compare_metric(metric, docs, paths) for metric in HAZARD_METRICS]
    if all(m.sim_lacks for m in compared):
        raise CalibrationError("; ".join(m.unavailable or "" for m in compared))
    if all(m.unavailable is not None for m in compared):
        raise EventUnsupported("; ".join(m.unavailable or "" for m in compared) + "; sim cannot be calibrated against the PMU "
                               "on this machine")
    return Calibration(compared, *sim_family(docs[("regression", metrics.Backend.SIM)]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfci_agent.calibration",
                                 description="Compare sim and pmu hazard metrics of a baseline and regression (a).")
    for build in BUILDS:
        for backend in ("sim", "pmu"):
            ap.add_argument(f"--{backend}-{build}", type=Path, required=True, metavar="FILE",
                            help=f"perfci measure --backend {backend} --json output for the {build}")
    ap.add_argument("--json", action="store_true", help="print the comparison as one JSON object")
    args = ap.parse_args(argv)
    paths = {(build, metrics.Backend(backend)): getattr(args, f"{backend}_{build}")
             for build in BUILDS for backend in ("sim", "pmu")}
    try:
        result = compare(paths)
    except CalibrationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.json:
        print(json.dumps(result.to_json(), indent=2, sort_keys=True))
    else:
        print("\n".join(result.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
