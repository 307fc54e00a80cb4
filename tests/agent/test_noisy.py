"""Noisy-run marking on recorded repetitions: the loaded host's tsc jobs, a quiet simulated run,
the machine's usual spread learned from its earlier runs, the host load read from /proc."""

import json
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from perfci_agent import hostload, noisy
from perfci_core import metrics
from perfci_core.analysis.noise import NOISY_HISTORY, NOISY_SPREAD
from perfci_core.result import BenchConfig, MetricValue, ResultDocument, Sample

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "benchmarks" / "detection" / "data" / "tsc-noise.json"
PROC_STAT = Path(__file__).parent / "fixtures" / "proc" / "stat-steal"
NOW = datetime(2026, 11, 23, tzinfo=timezone.utc)


def tsc_document(cpp: list[float], backend: str = "tsc") -> ResultDocument:
    metric = "cpp" if backend == "tsc" else "ipp"
    samples = [Sample(rep=i, metrics=[MetricValue(metric=metric, backend=backend, value=v)]) for i, v in enumerate(cpp)]
    return ResultDocument(status="ok", commit="a" * 40, config=BenchConfig(name="self-64B"), backend=backend,
                          machine={"cpu": "test"}, machine_id="b" * 64, samples=samples, started_at=NOW, finished_at=NOW)


def recorded_jobs() -> list[list[float]]:
    return [job["cpp"] for job in json.loads(RECORDED.read_text())["jobs"]]


def test_every_job_recorded_on_the_loaded_host_is_marked_noisy(tmp_path):
    for cpp in recorded_jobs():
        doc = noisy.mark(tsc_document(cpp), tmp_path, hostload.cpu_snapshot())
        assert doc.noisy is not None
        mark = doc.noisy
        assert mark.metric == "cpp" and mark.spread > NOISY_SPREAD and mark.threshold == NOISY_SPREAD
        assert mark.low == pytest.approx(min(cpp) / np.median(cpp)) and mark.high == pytest.approx(max(cpp) / np.median(cpp))
        assert "absolute threshold" in mark.basis
        assert mark.loadavg is not None and mark.cpus
        assert "noisy: cpp spread" in noisy.describe(mark)
    # a noisy run never teaches the machine that noise is usual
    assert not list(tmp_path.rglob("*.json"))


def test_a_quiet_run_is_not_marked_and_becomes_the_usual_spread(tmp_path):
    rng = np.random.default_rng(4)
    for _ in range(NOISY_HISTORY):
        doc = noisy.mark(tsc_document(list(80 * (1 + 0.01 * rng.standard_normal(8)))), tmp_path, None)
        assert doc.noisy is None
    (history,) = tmp_path.rglob("*.json")
    spreads = json.loads(history.read_text())["spreads"]
    assert len(spreads) == NOISY_HISTORY and 0.005 < np.median(spreads) < 0.02
    # now the threshold is 3 x this machine's usual spread (~1 %), floored at 3 %: a run spread
    # 6 % -- under the absolute 10 % -- is noisy here
    spread6 = list(80 * (1 + 0.06 * np.array([-1.5, -1, -0.5, 0, 0, 0.5, 1, 1.5])))
    doc = noisy.mark(tsc_document(spread6), tmp_path, None)
    assert doc.noisy is not None and doc.noisy.threshold == pytest.approx(max(3 * np.median(spreads), 0.03))
    assert "usual spread" in doc.noisy.basis
    assert noisy.mark(tsc_document(spread6), tmp_path / "fresh-machine", None).noisy is None


def test_sim_and_short_runs_are_never_judged(tmp_path):
    assert noisy.mark(tsc_document([100.0, 150.0, 300.0], backend="sim"), tmp_path, None).noisy is None
    assert noisy.mark(tsc_document([80.0, 200.0]), tmp_path, None).noisy is None  # 2 reps: no spread


def test_the_mark_survives_the_result_document_round_trip(tmp_path):
    doc = noisy.mark(tsc_document(recorded_jobs()[4]), tmp_path, None, remeasured=1)
    again = ResultDocument.model_validate_json(doc.model_dump_json(by_alias=True))
    assert again.noisy == doc.noisy and again.noisy.remeasured == 1
    assert metrics.Backend(again.backend) is metrics.Backend.TSC


def test_host_load_from_recorded_proc_stat(tmp_path):
    before = hostload.cpu_snapshot(PROC_STAT)
    assert before == hostload.CpuSnapshot(total=44337 + 8014 + 68106 + 736 + 301 + 874, steal=874)
    later = tmp_path / "stat"
    # 1000 more ticks, 100 of them stolen by the hypervisor
    later.write_text(PROC_STAT.read_text().replace("cpu  44337 0 8014 68106 736 0 301 874", "cpu  44737 0 8114 68506 736 0 301 974"))
    load = hostload.host_load(before, later)
    assert load.steal_pct == pytest.approx(10.0) and load.runnable == 10
    assert hostload.cpu_snapshot(tmp_path / "missing") is None
    assert hostload.host_load(None, tmp_path / "missing").steal_pct is None
