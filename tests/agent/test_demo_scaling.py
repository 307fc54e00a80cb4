"""What `perfci demo` prints of its scaling run: the serial fraction B and the rates it shows belong
together. Two repetitions from recorded dataplane reports, one scaling well and one badly, go
through the agent's own sample assembly (lcores.Runs); the demo reads the result document as
`perfci measure --scaling --json` would print it (no dataplane run, no timing)."""

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


class RecordedRuns(lcores.Runs):
    """The agent's Runs, with the dataplane's report at each lcore count read from a recording."""

    def __init__(self, stretch: tuple[float, float]) -> None:
        config = BenchConfig(name="self-64B-short-scaling", scaling=True)
        super().__init__(SimpleNamespace(name=T), Path("dataplane"), [1, 0], [1, 2], config, Path("."), None)
        self.stretch = stretch

    def _run(self, n: int, with_energy: bool) -> tuple[dict, dict[str, float | None]]:
        name = "forward-self-64B.json" if n == 1 else "forward-self-64B-2lcores.json"
        report = copy.deepcopy(json.loads((REPORTS / name).read_text()))
        report["window"]["cycles"]["window"] *= self.stretch[n - 1]
        return report, lcores.lcore_raw(report, n)


def scaling_document() -> ResultDocument:
    samples = lcores.with_interval([RecordedRuns(s).sample(rep) for rep, s in enumerate(REPETITIONS)], T)
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
    assert b_of_each[1] - b_of_each[0] > 0.5  # the two repetitions disagree: a mix of them shows

    out = demo_scaling_line(monkeypatch, tmp_path, doc.model_dump_json(by_alias=True))
    assert out.problems == []
    b = float(re.search(r"serial fraction B =? ?([0-9.]+)", out.scaling).group(1))
    low, high = map(float, re.search(r"interval ([0-9.]+)\s*[-–]\s*([0-9.]+)", out.scaling).groups())
    pps1, pps2 = (float(v) for v in re.findall(r"([0-9.]+) Mpps", out.scaling))
    # at two lcore counts Amdahl's B is exactly 2 PPS(1)/PPS(2) - 1 (up to the printed rounding)
    assert b == pytest.approx(2 * pps1 / pps2 - 1, abs=0.003)
    # the rates are the medians of the repetitions at each count (for two, their mean), not each
    # figure's upper value
    assert pps1 == pytest.approx(statistics.median(r[1] for r in per_rep) / 1e6, abs=0.01)
    assert pps2 == pytest.approx(statistics.median(r[2] for r in per_rep) / 1e6, abs=0.01)
    assert low <= b <= high


def test_a_result_without_a_scaling_fit_is_a_problem_not_a_crash(monkeypatch, tmp_path):
    doc = scaling_document().model_copy(update={"config": BenchConfig(name="self-64B-short")})
    out = demo_scaling_line(monkeypatch, tmp_path, doc.model_dump_json(by_alias=True))
    assert out.scaling == "" and "no serial fraction" in out.problems[0] and "not a scaling measurement" in out.problems[0]
