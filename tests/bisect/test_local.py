"""`perfci bisect --local` on a real repository: real builds, real callgrind, the real CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfci_agent.bisect.local import LocalBisect
from perfci_cli.app import app

from tests.bisect.bisect_repo import BROKEN_INDEX, IMPROVEMENT_INDEX, REGRESSION_INDEX

pytestmark = pytest.mark.dataplane
CONFIG = "self-64B-short"


@pytest.fixture(scope="module")
def report(bisect_repo):
    shas = bisect_repo["shas"]
    return LocalBisect(bisect_repo["repo"], shas[0], shas[-1], "ipp", config=CONFIG, backend="sim",
                       cache_dir=bisect_repo["cache"]).run()


def test_names_exactly_the_regression_commit(report, bisect_repo):
    shas = bisect_repo["shas"]
    doc = report.to_dict()
    assert report.status == "culprit" and report.exit_code == 3, doc["message"]  # 3: the improvement too
    assert doc["culprit"]["sha"] == shas[REGRESSION_INDEX]
    assert doc["culprit"]["author"] == "Rita Gression"
    assert doc["parent"]["sha"] == shas[REGRESSION_INDEX - 1]
    assert doc["kind"] == "regression" and doc["change"]["change_pct"] > 0 and doc["change"]["exact"]


def test_the_improvement_the_search_walked_past_is_isolated_too(report, bisect_repo):
    """The range holds an improvement (3) before the regression (9): the search saw it at its
    first buildable middle, followed the regression, then isolated the improvement on its own."""
    shas = bisect_repo["shas"]
    doc = report.to_dict()
    assert doc["direction"] == "any"
    [move] = doc["opposing"]
    assert move["kind"] == "improvement" and move["isolated"] and move["status"] == "culprit", move
    assert move["culprit"]["sha"] == shas[IMPROVEMENT_INDEX] and move["parent"]["sha"] == shas[IMPROVEMENT_INDEX - 1]
    assert move["change"]["change_pct"] < 0 and move["change"]["exact"]
    assert any(f"isolated at commit {IMPROVEMENT_INDEX}" in n for n in doc["notes"])


def test_within_log2_plus_two_builds_and_the_unbuildable_commit_was_skipped(report, bisect_repo):
    doc = report.to_dict()
    hunted = {0, 15} | {s["mid"] for s in doc["steps"] if s["phase"] == "search" and s["stage"] == "hunt"}
    assert len(hunted) <= math.ceil(math.log2(16)) + 2, doc["steps"]  # the regression's own search
    assert doc["builds"] <= 2 * (math.ceil(math.log2(16)) + 2), doc["steps"]  # and the improvement's
    broken = [c for c in doc["commits"] if c["sha"] == bisect_repo["shas"][BROKEN_INDEX]]
    assert broken and broken[0]["status"] == "build_failed"
    # one repetition per buildable commit and the confirmations of both culprits and their parents ...
    assert doc["repetitions"] + doc["reused_repetitions"] >= doc["builds"] - 1 + 4
    # ... of which three binaries were simulated (the barrier, the plain dataplane, the regression): the other commits
    # differ in documentation only, and the confirmations build binaries the search simulated (their counts kept)
    assert doc["repetitions"] == 3


def test_the_improvement_was_not_taken_for_the_regression(report):
    middles = [s for s in report.steps if s["phase"] == "search"]
    assert any(s["lo_mid"]["kind"] == "improvement" for s in middles), report.steps


def test_reports_the_forwarding_functions_that_moved(report):
    callgrind = next(p for p in report.profiles if p.tool == "callgrind")
    assert callgrind.available, callgrind.reason
    moved = {f.function: f.delta for f in callgrind.functions}
    assert "ttl_decrement" in moved and moved["ttl_decrement"] > 0  # now a real call per packet
    assert "fwd_burst" in moved
    perf = next(p for p in report.profiles if p.tool == "perf record")
    assert not perf.available and "PMU" in perf.reason


def test_cli_reuses_cached_results_and_prints_json(report, bisect_repo):
    shas, repo = bisect_repo["shas"], bisect_repo["repo"]
    cli = subprocess.run(
        [str(Path(sys.executable).parent / "perfci"), "bisect", "--repo", str(repo), "--good", shas[0], "--bad", shas[-1],
         "--metric", "ipp", "--config", CONFIG, "--backend", "sim", "--cache-dir", str(bisect_repo["cache"]), "--json"],
        capture_output=True, text=True, timeout=900,
    )
    assert cli.returncode == 3, cli.stderr[-3000:]  # the culprit, and the improvement isolated too
    doc = json.loads(cli.stdout)
    assert doc["culprit"]["sha"] == shas[REGRESSION_INDEX]
    assert doc["opposing"][0]["culprit"]["sha"] == shas[IMPROVEMENT_INDEX]
    assert doc["compiled"] == 0 and doc["reused_repetitions"] > 0
    # nothing simulated: the search took the first run's results, the confirmations the counts kept for the same binaries
    assert doc["repetitions"] == 0


def test_hunting_the_improvement_names_it_and_isolates_the_regression(bisect_repo, report):
    shas = bisect_repo["shas"]
    result = CliRunner().invoke(app, ["bisect", "--repo", str(bisect_repo["repo"]), "--good", shas[0], "--bad", shas[-1],
                                      "--metric", "ipp", "--config", CONFIG, "--backend", "sim", "--direction", "improvement",
                                      "--cache-dir", str(bisect_repo["cache"]), "--json"])
    assert result.exit_code == 3, result.output
    doc = json.loads(result.stdout)
    assert doc["direction"] == "improvement" and doc["kind"] == "improvement"
    assert doc["culprit"]["sha"] == shas[IMPROVEMENT_INDEX]
    assert [m["culprit"]["sha"] for m in doc["opposing"]] == [shas[REGRESSION_INDEX]]


def test_no_change_exits_1(bisect_repo, report):
    shas = bisect_repo["shas"]
    result = CliRunner().invoke(app, ["bisect", "--repo", str(bisect_repo["repo"]), "--good", shas[REGRESSION_INDEX],
                                      "--bad", shas[11], "--metric", "ipp", "--config", CONFIG, "--backend", "sim",
                                      "--cache-dir", str(bisect_repo["cache"]), "--json"])
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["status"] == "no_change"


@pytest.mark.parametrize("args, message", [
    (["--metric", "nope"], "unknown metric"),
    (["--metric", "ipp", "--backend", "sim", "--swap"], "is not an ancestor"),
    (["--metric", "cpp", "--backend", "sim"], "does not measure cpp"),
    (["--metric", "ipp", "--config", "jumbo"], "unknown config"),
    (["--metric", "sf_blocks_pp", "--backend", "sim", "--sim-family", "zen9"], "unknown store-buffer family 'zen9'"),
    (["--metric", "cpp", "--backend", "tsc", "--sim-family", "amd-zen4"], "sets the sim backend's model"),
    (["--metric", "ipp", "--machine", "dut", "--sim-family", "amd-zen4"], "is for a local bisect"),
])
def test_usage_errors_exit_2(bisect_repo, args, message):
    shas = bisect_repo["shas"]
    good, bad = (shas[-1], shas[0]) if "--swap" in args else (shas[0], shas[-1])
    args = [a for a in args if a != "--swap"]
    result = CliRunner().invoke(app, ["bisect", "--repo", str(bisect_repo["repo"]), "--good", good, "--bad", bad, *args])
    assert result.exit_code == 2
    assert message in result.output


@pytest.fixture(scope="module")
def store_forward_repo(tmp_path_factory):
    """base, two neutral commits, regression (f) (a store-forward block, no extra instruction), two more."""
    from tests.bisect.bisect_repo import DATAPLANE, PATCHES, _build_dirs, git

    repo = tmp_path_factory.mktemp("sf") / "repo"
    repo.mkdir()
    import shutil

    shutil.copytree(DATAPLANE, repo / "dataplane", ignore=_build_dirs)
    git(repo, "init", "-q", "-b", "main")
    shas = []
    for i in range(6):
        if i == 3:
            git(repo, "apply", str(PATCHES / "f-ttl-word-over-checksum.patch"))
        else:
            readme = repo / "dataplane" / "README.md"
            readme.write_text(readme.read_text() + f"\nNote {i}.\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"change {i}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return {"repo": repo, "shas": shas, "cache": tmp_path_factory.mktemp("sf-cache")}


def test_a_store_forward_block_without_instructions_is_bisected_to_its_commit_and_line(store_forward_repo):
    repo, shas = store_forward_repo["repo"], store_forward_repo["shas"]
    report = LocalBisect(repo, shas[0], shas[-1], "sf_blocks_pp", config=CONFIG, backend="sim",
                         cache_dir=store_forward_repo["cache"]).run()
    doc = report.to_dict()
    assert report.status == "culprit" and doc["culprit"]["sha"] == shas[3], doc["message"]
    assert doc["kind"] == "regression"
    hazards = next(p for p in report.profiles if p.tool == "memhazard")
    assert hazards.available, hazards.reason
    top = hazards.functions[0]
    assert top.function.startswith("store-forward blocks: ttl_decrement@fwd.c:") and top.delta == pytest.approx(1.0, abs=0.01)
    callgrind = next(p for p in report.profiles if p.tool == "callgrind")
    assert all(abs(f.delta) < 0.01 for f in callgrind.functions)  # no function's instructions moved
