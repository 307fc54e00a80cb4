"""Calibrate the simulated store-forward blocks against the PMU's (issue 16).

On a machine with a PMU, the same two commits — a baseline and regression (a), the store-forward
block of ``dataplane/regressions/`` — are measured with ``perfci measure --backend sim --json``
and ``--backend pmu --json``. This compares the four result documents: per build the median
``sf_blocks_pp`` of each backend and their ratio pmu/sim, and the regression's step (regression
minus baseline) in both, with its ratio. The playbook role ``perfci_calibration`` runs it
(``perfci_calibration_sf_compare``); see its README.

    python -m perfci_agent.calibration --sim-baseline SB.json --pmu-baseline PB.json \\
        --sim-regression SR.json --pmu-regression PR.json [--json]

Exit status: 0 compared; 2 a document is unreadable, not a result document, not ``ok``, of
another backend, or the builds do not pair up; 3 the pmu documents carry no ``sf_blocks_pp``
(this CPU's store-forward event is unsupported or was not counted).

A ratio is ``null`` where its denominator (the simulated value) is zero: ``sim`` counts every
block of its model exactly, so a zero there says the model sees none, and no ratio exists.
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

METRIC = "sf_blocks_pp"
BUILDS = ("baseline", "regression")


class CalibrationError(Exception):
    """A document cannot be used; the message names the file and what is wrong."""

    exit_code = 2


class EventUnsupported(CalibrationError):
    """The pmu document has no store-forward blocks: the CPU's event is missing or not counted."""

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
    sim_family: str | None  # the store-buffer model sim used (raw sim.hz_family.<name>)
    sim_family_default: bool  # true: the CPU is not a modelled family, sim used the default model


@dataclass(frozen=True)
class Step:
    sim: float
    pmu: float
    ratio: float | None  # pmu step / sim step


@dataclass(frozen=True)
class Calibration:
    metric: str
    unit: str
    baseline: BuildFigures
    regression: BuildFigures
    step: Step

    def to_json(self) -> dict:
        return {**asdict(self), "summary": self.lines()}

    def lines(self) -> list[str]:
        out = []
        for b in (self.baseline, self.regression):
            out.append(f"{b.build} {b.commit[:12]}: {self.metric} sim {b.sim:.4f}, pmu {b.pmu:.4f} {self.unit} "
                       f"(medians of {b.sim_samples} and {b.pmu_samples} samples); pmu/sim {_ratio_text(b.ratio)}")
        defaults = {b.sim_family for b in (self.baseline, self.regression) if b.sim_family_default}
        if defaults:
            out.append(f"note: sim used its default model {', '.join(sorted(f or '?' for f in defaults))}, "
                       f"not one of this CPU's family: the ratio calibrates that model against this CPU")
        s = self.step
        out.append(f"regression step: sim {s.sim:+.4f}, pmu {s.pmu:+.4f} {self.unit}; pmu/sim {_ratio_text(s.ratio)}")
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


def median_value(doc: ResultDocument, path: Path) -> tuple[float, int]:
    """Median of ``sf_blocks_pp`` over the samples of the document's own backend, and how many had it."""
    values = [m.value for s in doc.samples for m in s.metrics if m.metric == METRIC and m.backend is doc.backend]
    if values:
        return statistics.median(values), len(values)
    if doc.backend is metrics.Backend.PMU:
        cpu = doc.machine.get("cpu_model_name") or "this CPU"
        raise EventUnsupported(f"{path}: the pmu result of commit {doc.commit[:12]} has no {METRIC}: perf did not count "
                               f"a store-forward event on {cpu} (raw pmu.sf_blocks absent: the event is <not supported> "
                               f"or <not counted> there, or none is known for this CPU); sim cannot be calibrated "
                               f"against the PMU on this machine")
    raise CalibrationError(f"{path}: the sim result of commit {doc.commit[:12]} has no {METRIC} "
                           f"(measured by an agent without the memory-hazard simulator?)")


def sim_family(doc: ResultDocument) -> tuple[str | None, bool]:
    """The store-buffer model of a sim result (from its raw keys) and whether it was the default."""
    raw = doc.samples[0].raw
    return recorded_family(raw), "sim.hz_family_default" in raw


def compare(paths: dict[tuple[str, metrics.Backend], Path]) -> Calibration:
    """Compare the four documents keyed by (build, backend); :class:`CalibrationError` on bad input."""
    docs = {key: load(path, key[1]) for key, path in paths.items()}
    figures: dict[str, BuildFigures] = {}
    for build in BUILDS:
        sim_key, pmu_key = (build, metrics.Backend.SIM), (build, metrics.Backend.PMU)
        sim_doc, pmu_doc = docs[sim_key], docs[pmu_key]
        if sim_doc.commit != pmu_doc.commit:
            raise CalibrationError(f"the {build} documents measure different commits: {paths[sim_key]} has "
                                   f"{sim_doc.commit[:12]}, {paths[pmu_key]} has {pmu_doc.commit[:12]}")
        sim, n_sim = median_value(sim_doc, paths[sim_key])
        pmu, n_pmu = median_value(pmu_doc, paths[pmu_key])
        figures[build] = BuildFigures(build, sim_doc.commit, sim, pmu, _ratio(pmu, sim), n_sim, n_pmu, *sim_family(sim_doc))
    base, reg = figures["baseline"], figures["regression"]
    if base.commit == reg.commit:
        raise CalibrationError(f"the baseline and the regression are the same commit ({base.commit[:12]})")
    step_sim, step_pmu = reg.sim - base.sim, reg.pmu - base.pmu
    return Calibration(METRIC, metrics.get(METRIC).unit, base, reg, Step(step_sim, step_pmu, _ratio(step_pmu, step_sim)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfci_agent.calibration",
                                 description="Compare sim and pmu sf_blocks_pp of a baseline and regression (a).")
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
