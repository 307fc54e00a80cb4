"""What `perfci demo` prints of its scaling run: on two cores, what the machine cannot show instead
of a serial fraction; with three or more lcore counts, B and the rates it was fitted to, together.
Repetitions from recorded dataplane reports (one scaling well, one badly) go through the agent's own
sample assembly (lcores.Runs), with the calibration loop's figures as recorded; the demo reads the
result document as `perfci measure --scaling --json` would print it (no dataplane run, no timing)."""

from __future__ import annotations

import copy
import io
import json
import re
import statistics
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from perfci_agent import lcores
from perfci_agent.demo import run
from perfci_core import metrics
from perfci_core.analysis import scaling
from perfci_core.result import BenchConfig, ResultDocument

REPORTS = Path(__file__).parent / "fixtures" / "reports"
T = metrics.Backend.TSC
# (1-lcore window, 2-lcore window) scale of each repetition: the second scales far worse
REPETITIONS = ((1.0, 1.0), (0.99, 1.6))
CALIBRATION = {"cal_dependent": 3.3, "cal_throughput": 7.1}  # TSC cycles per iteration, a quiet core


class RecordedRuns(lcores.Runs):
    """The agent's Runs, with the dataplane's report at each lcore count read from a recording (4
    lcores: the 2-lcore recording with 1.8 times the packets in the same window) and the calibration
    loop's figures fixed."""

    def __init__(self, stretch: tuple[float, float], counts: tuple[int, ...]) -> None:
        config = BenchConfig(name="self-64B-short-scaling", scaling=True)
        super().__init__(SimpleNamespace(name=T), Path("dataplane"), [3, 2, 1, 0], list(counts), config, Path("."), None)
        self.stretch = stretch

    def _calibrate(self, n: int) -> dict[str, float]:
        return {f"lc.{n}.{k}": v for k, v in CALIBRATION.items()}

    def _dataplane(self, n: int, cores: list[int], with_energy: bool) -> tuple[dict, dict[str, float | None]]:
        name = "forward-self-64B.json" if n == 1 else "forward-self-64B-2lcores.json"
        report = copy.deepcopy(json.loads((REPORTS / name).read_text()))
        report["window"]["cycles"]["window"] *= self.stretch[min(n, 2) - 1]
        if n == 4:
            report["window"]["packets"]["rx"] *= 1.8
            report["lcores"] *= 2
        return report, lcores.lcore_raw(report, n)


def scaling_document(counts: tuple[int, ...] = (1, 2, 4)) -> ResultDocument:
    samples = lcores.with_interval([RecordedRuns(s, counts).sample(rep) for rep, s in enumerate(REPETITIONS)], T)
    now = datetime.now(UTC)
    return ResultDocument(status="ok", commit="a" * 40, config=BenchConfig(name="self-64B-short-scaling", scaling=True),
                          backend=T, machine={"core": 1}, machine_id="b" * 64, samples=samples, started_at=now,
                          finished_at=now)


def demo_scaling_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, stdout: str) -> run.Outcome:
    monkeypatch.setattr(run.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(run, "_run_cli", lambda args, env, log: subprocess.CompletedProcess(args, 0, stdout, ""))
    out = run.Outcome(commits=[SimpleNamespace(sha="a" * 40)])
    run._scaling(out, tmp_path, tmp_path, {}, tmp_path, Console(file=io.StringIO()))
    return out


def test_the_serial_fraction_printed_is_the_one_of_the_rates_printed(monkeypatch, tmp_path):
    doc = scaling_document()
    per_rep = [scaling.throughputs(s.raw) for s in doc.samples]
    b_of_each = [next(m.value for m in s.metrics if m.metric == "serial_fraction") for s in doc.samples]
    assert b_of_each[1] - b_of_each[0] > 0.1  # the two repetitions disagree: a mix of them shows

    out = demo_scaling_line(monkeypatch, tmp_path, doc.model_dump_json(by_alias=True))
    assert out.problems == []
    b = float(re.search(r"serial fraction B = ([0-9.]+)", out.scaling).group(1))
    low, high = map(float, re.search(r"interval ([0-9.]+)\s*[-–]\s*([0-9.]+)", out.scaling).groups())
    rates = [float(v) for v in re.findall(r"([0-9.]+) Mpps", out.scaling)]
    # the rates are the medians of the repetitions at each count (for two, their mean), and B is the fit to
    # them (up to the printed rounding)
    assert rates == pytest.approx([statistics.median(r[n] for r in per_rep) / 1e6 for n in (1, 2, 4)], abs=0.01)
    assert b == pytest.approx(scaling.fit_serial_fraction(dict(zip((1, 2, 4), rates))).serial, abs=0.003)
    assert low <= b <= high
    assert "1 \u2192 4 lcores: busy cycles per packet" in out.scaling  # what the calibration loop says moved


def test_two_cores_show_what_they_cannot_instead_of_a_serial_fraction(monkeypatch, tmp_path):
    doc = scaling_document((1, 2))
    assert not any(m.metric.startswith("serial_fraction") for s in doc.samples for m in s.metrics)
    out = demo_scaling_line(monkeypatch, tmp_path, doc.model_dump_json(by_alias=True))
    assert out.problems == []
    assert out.scaling.startswith("2 cores cannot show a serial fraction, only the throughput at 2 lcore counts: no serial fraction: "
                                  "a serial fraction needs throughput at 3 or more lcore counts, measured at 1, 2")
    assert "serial fraction B =" not in out.scaling and re.search(r"1 lcore [0-9.]+ Mpps, 2 lcores [0-9.]+ Mpps", out.scaling)
    assert "calibration loop dependent 3.30 \u2192 3.30 (+0 %)" in out.scaling


def test_a_result_without_the_calibration_loop_or_a_scaling_fit_is_a_problem_not_a_crash(monkeypatch, tmp_path):
    doc = scaling_document()
    bare = doc.model_copy(deep=True)
    for s in bare.samples:
        s.raw = {k: v for k, v in s.raw.items() if ".cal_" not in k}
    out = demo_scaling_line(monkeypatch, tmp_path, bare.model_dump_json(by_alias=True))
    assert out.problems and "no calibration loop figures" in out.problems[0]
    plain = doc.model_copy(update={"config": BenchConfig(name="self-64B-short")})
    out = demo_scaling_line(monkeypatch, tmp_path, plain.model_dump_json(by_alias=True))
    assert out.scaling == "" and "no scaling result" in out.problems[0] and "not a scaling measurement" in out.problems[0]
