"""`perfci compare --measure`: two commits measured here interleaved, decided on paired
differences, with the minimum effect and where it came from. Real builds and runs of the
dataplane; the only verdict asserted is sim's (exact counts), tsc is checked for structure."""

import json
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from perfci_agent.bisect.cache import ResultCache
from perfci_agent.history import local_series
from perfci_cli.app import app
from perfci_core.analysis.min_effect import min_effect_of_series
from perfci_core.result import BenchConfig, MetricValue, ResultDocument, Sample, NoisyRun

CONFIG = "self-64B-short"


def perfci(*args):
    return CliRunner().invoke(app, ["compare", *args], env={"COLUMNS": "200"})


@pytest.mark.dataplane
def test_sim_regression_measured_interleaved_exits_1_with_the_exact_rule(scratch_repo):
    r = scratch_repo
    out = perfci(r["base"], r["regressed"], "--measure", "--repo", str(r["repo"]), "--backend", "sim", "--config", CONFIG,
                 "--pairs", "1", "--max-pairs", "1", "--seed", "5", "--metric", "ipp", "--cache-dir", str(r["cache"]), "--json")
    assert out.exit_code == 1, out.output
    data = json.loads(out.stdout)
    assert data["mode"] == "measured" and data["backend"] == "sim" and data["regressed"] == ["ipp/sim"]
    assert data["interleave"]["seed"] == 5 and data["interleave"]["pairs"] == 1
    [ipp] = data["metrics"]
    assert ipp["verdict"] == "different" and ipp["worse"] and ipp["test"] == "exact-change rule" and ipp["p_value"] is None
    assert ipp["min_effect"]["source"] == "exact" and len(ipp["pairs"]) == 1 and ipp["change_pct"] > 0.5
    same = perfci(r["base"], r["base"], "--measure", "--repo", str(r["repo"]), "--backend", "sim", "--config", CONFIG,
                  "--pairs", "1", "--max-pairs", "1", "--metric", "ipp", "--cache-dir", str(r["cache"]))
    assert same.exit_code == 0, same.output
    assert "SAME" in same.output.upper() and "seed" in same.output


@pytest.mark.dataplane
def test_tsc_json_has_pairs_min_effect_source_and_never_decides_on_two_pairs(scratch_repo):
    r = scratch_repo
    out = perfci(r["base"], r["regressed"], "--measure", "--repo", str(r["repo"]), "--backend", "tsc", "--config", CONFIG,
                 "--pairs", "2", "--max-pairs", "2", "--cache-dir", str(r["cache"]), "--json")
    assert out.exit_code == 0, out.output  # 2 pairs cannot reach p <= 0.01: UNKNOWN, never a regression
    data = json.loads(out.stdout)
    assert data["status"] == {"base": "ok", "head": "ok"} and data["deciding_metric"] == "cpp"
    assert len(data["interleave"]["run_order"]) == 4 and data["max_pairs"] == 2
    by_name = {m["metric"]: m for m in data["metrics"]}
    assert set(by_name) == {"cpp", "pps", "cur", "roi_cpu"}  # every metric tsc derives
    cpp = by_name["cpp"]
    assert cpp["verdict"] == "unknown" and cpp["n_pairs"] == 2 and len(cpp["pairs"]) == 2
    assert cpp["test"].startswith("Wilcoxon") and any("cannot reach" in n for n in cpp["notes"])
    assert cpp["min_effect"]["source"] == "floor" and "fixed floor" in cpp["min_effect"]["note"]
    assert set(data["noisy"]) == {"base", "head"}
    given = perfci(r["base"], r["regressed"], "--measure", "--repo", str(r["repo"]), "--backend", "tsc", "--config", CONFIG,
                   "--pairs", "1", "--max-pairs", "1", "--min-effect", "0.01", "--metric", "cpp", "--cache-dir", str(r["cache"]), "--json")
    assert given.exit_code == 0, given.output
    [cpp] = json.loads(given.stdout)["metrics"]
    assert cpp["min_effect"]["source"] == "given" and cpp["min_effect"]["value"] == 0.01


@pytest.mark.dataplane
def test_bad_input_exits_2(scratch_repo):
    r = scratch_repo
    common = ["--measure", "--repo", str(r["repo"]), "--backend", "tsc", "--config", CONFIG, "--cache-dir", str(r["cache"])]
    assert perfci(r["base"], "no-such-rev", *common).exit_code == 2
    assert perfci(r["base"], r["regressed"], *common, "--pairs", "0").exit_code == 2
    assert perfci(r["base"], r["regressed"], *common, "--metric", "nope").exit_code == 2
    assert perfci(r["base"], r["regressed"], *common, "--min-effect", "2").exit_code == 2
    broken = perfci(r["base"], r["broken"], *common, "--json")
    assert broken.exit_code == 2 and json.loads(broken.stdout)["status"]["head"] == "build_failed"
    assert perfci(r["base"], r["regressed"]).exit_code == 2  # stored results need --repository and --machine


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_local_history_orders_by_commit_date_and_leaves_noisy_runs_out(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    shas = []
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    for i in range(7):
        (repo / "f").write_text(str(i))
        _git(repo, "add", "f")
        when = (start + timedelta(hours=i)).isoformat()
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-qm", str(i)],
                       check=True, env={"GIT_COMMITTER_DATE": when, "GIT_AUTHOR_DATE": when, "PATH": "/usr/bin:/bin"})
        shas.append(_git(repo, "rev-parse", "HEAD"))
    cache = ResultCache(tmp_path / "cache")
    rng = np.random.default_rng(0)
    for i in reversed(range(7)):  # stored out of order on purpose
        values = 80 * (1 + 0.02 * rng.standard_normal(5))
        samples = [Sample(rep=k, metrics=[MetricValue(metric="cpp", backend="tsc", value=v)]) for k, v in enumerate(values)]
        mark = NoisyRun(metric="cpp", spread=0.3, low=0.5, high=2.0, threshold=0.1, basis="test") if i == 3 else None
        cache.store("self-64B", ResultDocument(status="ok", commit=shas[i], config=BenchConfig(), backend="tsc",
                                               machine={}, machine_id="c" * 64, samples=samples, noisy=mark,
                                               started_at=start, finished_at=start))
    series = local_series(repo, tmp_path / "cache", "c" * 64, "self-64B", "tsc", "cpp")
    assert [p.commit for p in series] == [shas[i] for i in (0, 1, 2, 4, 5, 6)]
    assert all(len(p.values) == 5 for p in series)
    learned = min_effect_of_series(series, "local history")
    assert learned.source == "series" and learned.points == 6 and learned.value >= 0.002
    assert local_series(repo, tmp_path / "cache", "d" * 64, "self-64B", "tsc", "cpp") == []
