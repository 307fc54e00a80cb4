"""Local bisect on a noisy backend: a step that measures two commits measures them interleaved.

Which commits a step measures together is plumbing, not timing, so the measurement itself is
replaced by recorded-shape documents (cycles per packet 80, the culprit and after 84); the
interleaved measurement's own behaviour on the real dataplane is tested in
tests/agent/test_interleave.py."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from perfci_agent.bisect import local
from perfci_agent.interleave import Interleaved, pair_order
from perfci_core.result import BenchConfig, MetricValue, ResultDocument, Sample

from tests.bisect.bisect_repo import REGRESSION_INDEX

NOW = datetime(2026, 11, 23, tzinfo=timezone.utc)
WIGGLE = [0.0, 0.3, -0.2, 0.1, -0.1, 0.2, -0.3, 0.05]


def doc(sha: str, level: float, reps: int, start: int = 0) -> ResultDocument:
    samples = [Sample(rep=start + k, metrics=[MetricValue(metric="cpp", backend="tsc", value=level + WIGGLE[(start + k) % 8])])
               for k in range(reps)]
    return ResultDocument(status="ok", commit=sha, config=BenchConfig(name="self-64B-short"), backend="tsc", machine={},
                          machine_id="e" * 64, samples=samples, started_at=NOW, finished_at=NOW)


@pytest.fixture
def fake_runs(bisect_repo, monkeypatch, tmp_path):
    shas = bisect_repo["shas"]
    level = {sha: 84.0 if i >= REGRESSION_INDEX else 80.0 for i, sha in enumerate(shas)}
    calls: list[tuple] = []

    def fake_interleave(root, base, head, pairs, **kw):
        calls.append(("pair", shas.index(base), shas.index(head), pairs))
        return Interleaved(doc(base, level[base], pairs), doc(head, level[head], pairs), 7, pair_order(7, pairs))

    def fake_measure(root, sha, reps=None, **kw):
        calls.append(("alone", shas.index(sha), reps))
        return doc(sha, level[sha], reps or 5)

    monkeypatch.setattr(local, "interleave", fake_interleave)
    monkeypatch.setattr(local, "measure", fake_measure)
    monkeypatch.setattr(local.LocalBisect, "_profiles", lambda self, outcome: [])  # real builds + callgrind: not this test
    return calls


def test_steps_of_two_commits_are_interleaved_and_single_commits_measured_alone(bisect_repo, fake_runs, tmp_path):
    shas = bisect_repo["shas"]
    bisect = local.LocalBisect(bisect_repo["repo"], shas[0], shas[-1], "cpp", config="self-64B-short", backend="tsc",
                               cache_dir=tmp_path / "cache")
    report = bisect.run()
    assert fake_runs[0][:3] == ("pair", 0, len(shas) - 1)  # the endpoints, together
    assert any(c[0] == "alone" for c in fake_runs)  # a middle commit on its own
    pairs = [c for c in fake_runs if c[0] == "pair"]
    assert all(i < j for _, i, j, _ in pairs)
    assert bisect.interleavings and bisect.interleavings[0]["seed"] == 7
    # the other commit of an interleaved step is served from what was measured, not measured again: nothing is
    # measured alone before the first middle commit (a later step may add repetitions to an end with its middle)
    ends = (0, len(shas) - 1)
    first_middle = next(k for k, c in enumerate(fake_runs) if c[0] == "alone" and c[1] not in ends)
    assert all(c[0] == "pair" for c in fake_runs[:first_middle]), fake_runs
    done = report.to_dict()
    assert done["status"] == "culprit" and done["culprit"]["sha"] == shas[REGRESSION_INDEX], done["message"]
    confirm = [c for c in pairs if (c[1], c[2]) == (REGRESSION_INDEX - 1, REGRESSION_INDEX)]
    assert confirm, fake_runs  # the confirmation measured parent and culprit together
    # ... in enough pairs for the paired test to reach its look's share of alpha 0.01 (11), and decided on them
    assert all(p >= 11 for *_, p in pairs), pairs
    assert done["overall"]["paired"] and done["change"]["paired"] and done["change"]["n_before"] >= 11


def test_sim_is_never_interleaved(bisect_repo, fake_runs, tmp_path, monkeypatch):
    shas = bisect_repo["shas"]
    bisect = local.LocalBisect(bisect_repo["repo"], shas[0], shas[-1], "ipp", config="self-64B-short", backend="sim",
                               cache_dir=tmp_path / "cache")
    bisect._step = local.core.Measure(((0, 1), (15, 1)), "endpoints")
    assert bisect._interleaved(0, False) is None and not fake_runs
