"""The daemon measures a noisy result once more and uploads it marked only when it stays noisy.

The host's load cannot be made to burst on cue in a test, so ``measure`` answers with documents
built from repetitions recorded on a loaded host (benchmarks/detection/data/tsc-noise.json), marked
by the real noisy-run rule, and from a quiet simulated run."""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from perfci_agent import noisy
from perfci_agent.daemon import agent as daemon
from perfci_agent.daemon.config import load
from perfci_core.result import BenchConfig, MetricValue, ResultDocument, Sample

RECORDED = Path(__file__).resolve().parents[3] / "benchmarks" / "detection" / "data" / "tsc-noise.json"
NOW = datetime(2026, 11, 23, tzinfo=timezone.utc)


def recorded_jobs() -> list[list[float]]:
    return [job["cpp"] for job in json.loads(RECORDED.read_text())["jobs"]]


def tsc_document(cpp: list[float]) -> ResultDocument:
    samples = [Sample(rep=i, metrics=[MetricValue(metric="cpp", backend="tsc", value=v)]) for i, v in enumerate(cpp)]
    return ResultDocument(status="ok", commit="a" * 40, config=BenchConfig(), backend="tsc", machine={},
                          machine_id="b" * 64, samples=samples, started_at=NOW, finished_at=NOW)


@pytest.fixture
def agent(tmp_path):
    cfg = load(None, environ={"PERFCI_AGENT_SERVER_URL": "http://127.0.0.1:1", "PERFCI_AGENT_MACHINE_NAME": "m",
                              "PERFCI_AGENT_STATE_DIR": str(tmp_path / "state")})
    a = daemon.Agent(cfg, stop=threading.Event())
    a.backends = ["tsc"]
    return a


class Lease:
    lost = None


JOB = daemon.Claim(job_id=1, attempt=1, lease_seconds=60, clone_url="file:///nowhere", commit="a" * 40,
                   config=BenchConfig(), backend="tsc", repetitions=8)


def answers(monkeypatch, tmp_path, runs: list[list[float]]) -> list[dict]:
    calls: list[dict] = []

    def fake_measure(**kw):
        calls.append(kw)
        return noisy.mark(tsc_document(runs[len(calls) - 1]), tmp_path / "noise", None)

    monkeypatch.setattr(daemon, "measure", fake_measure)
    return calls


def test_a_noisy_result_is_measured_again_and_the_quiet_one_is_uploaded(agent, monkeypatch, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="perfci_agent.daemon")
    quiet = list(80 * (1 + 0.01 * np.random.default_rng(1).standard_normal(8)))
    calls = answers(monkeypatch, tmp_path, [recorded_jobs()[2], quiet])
    doc = agent._measure_trusted(JOB, tmp_path, Lease())
    assert len(calls) == 2 and doc.noisy is None
    assert "noisy: cpp spread" in caplog.text and "measuring again" in caplog.text


def test_still_noisy_after_one_more_measurement_is_uploaded_marked(agent, monkeypatch, tmp_path):
    calls = answers(monkeypatch, tmp_path, recorded_jobs()[:3])
    doc = agent._measure_trusted(JOB, tmp_path, Lease())
    assert len(calls) == daemon.NOISY_REMEASURES + 1 == 2  # bounded: never a third time
    assert doc.noisy is not None and doc.noisy.remeasured == 1 and doc.noisy.spread > doc.noisy.threshold


def test_a_quiet_result_is_measured_once(agent, monkeypatch, tmp_path):
    calls = answers(monkeypatch, tmp_path, [list(80 * (1 + 0.01 * np.random.default_rng(2).standard_normal(8)))])
    assert agent._measure_trusted(JOB, tmp_path, Lease()).noisy is None and len(calls) == 1
