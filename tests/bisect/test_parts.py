"""The parts of `perfci bisect` that need no build: output parsers (recorded real outputs), the
alert contract, the local result cache, and commit ranges."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from perfci_agent.bisect.cache import ResultCache
from perfci_agent.bisect.commits import commit_range
from perfci_agent.backends.sim import block_distances
from perfci_agent.bisect.local import LocalBisect
from perfci_agent.bisect.profile import (FunctionDelta, callgrind_self_costs, diff, distances_by_source, parse_perf_report,
                                         site_moves, sites_by_source)
from perfci_cli.commands.bisect import BisectUsage, alert_target, exit_status, local_model, render, resolve_local_shas
from perfci_agent.errors import UsageError
from perfci_core.analysis.bisect import change_text
from perfci_core.result import BenchConfig, ResultDocument, Sample

from tests.bisect.bisect_repo import git

FIXTURES = Path(__file__).parent / "fixtures"


def test_callgrind_self_costs_add_up_to_the_totals_line():
    text = (FIXTURES / "callgrind-fwd_burst.out").read_text()
    costs = callgrind_self_costs(text)
    totals = int(next(line for line in text.splitlines() if line.startswith("totals:")).split()[1])
    assert sum(costs.values()) == totals  # the calls= lines' inclusive costs are not counted twice
    assert costs["fwd_burst"] > 0
    assert any(name.endswith("(librte_net_ring.so.23.0)") for name in costs)  # a symbol-less PMD function


def test_callgrind_without_events_is_an_error():
    with pytest.raises(ValueError):
        callgrind_self_costs("fn=(1) f\n1 2\n")


def test_diff_keeps_only_moved_functions_largest_first():
    moved = diff({"a": 10.0, "b": 5.0, "c": 1.0}, {"a": 10.0, "b": 2.0, "c": 4.5, "d": 0.5})
    assert [f.function for f in moved] == ["c", "b", "d"]
    assert moved[0] == FunctionDelta("c", 1.0, 4.5) and moved[1].delta == -3.0


def test_perf_report_shares_per_user_symbol():
    text = (FIXTURES / "perf-report-vm-cpu-clock.txt").read_text()
    shares = parse_perf_report(text)
    assert shares["fwd_burst"] == pytest.approx(2.74)
    assert "clear_page_erms" not in shares  # kernel symbols are not the dataplane's
    assert parse_perf_report(text, user_only=False)["clear_page_erms"] == pytest.approx(46.18)


ALERT = {
    "id": 7, "repository_id": 1, "repository": "acme/dataplane", "branch": "main", "machine_id": 2, "machine": "dut-01",
    "direction": "regression", "status": "untriaged",
    "last_good": {"sha": "a" * 40, "position": 41, "subject": "x"},
    "first_bad": {"sha": "b" * 40, "position": 42, "subject": "y", "author": "z"},
    "alerts": [
        {"config": "self-64B", "metric": "l1d_misses_pp", "backend": "sim", "direction": "improvement"},
        {"config": "self-64B", "metric": "ipp", "backend": "sim", "direction": "regression"},
    ],
}


def test_alert_target_is_its_range_on_its_first_regressed_metric():
    t = alert_target(ALERT)
    assert (t["good"], t["bad"], t["metric"], t["backend"], t["machine"]) == ("a" * 40, "b" * 40, "ipp", "sim", "dut-01")
    with pytest.raises(BisectUsage, match="no good commit"):
        alert_target({**ALERT, "last_good": None})
    with pytest.raises(BisectUsage, match="no metric"):
        alert_target({**ALERT, "alerts": []})


def test_an_alert_is_bisected_for_its_own_direction_unless_told_otherwise():
    assert alert_target(ALERT)["direction"] == "regression"
    assert alert_target(ALERT, "any")["direction"] == "any"
    improved = {**ALERT, "alerts": [{**row, "direction": "improvement"} for row in ALERT["alerts"]]}
    assert alert_target(improved)["direction"] == "improvement"


def test_a_local_bisect_of_an_alert_uses_the_model_of_the_alerted_results():
    recorded = {**ALERT, "alerts": [{**row, "sim_family": "intel-spr"} for row in ALERT["alerts"]]}
    target = alert_target(recorded)
    assert target["sim_family"] == "intel-spr"
    assert local_model(target, None) == "intel-spr" and local_model(target, "intel-spr") == "intel-spr"
    with pytest.raises(BisectUsage, match="measured with the intel-spr model, not amd-zen4"):
        local_model(target, "amd-zen4")
    unrecorded = alert_target(ALERT)  # a server that does not say: never this CPU's model silently
    with pytest.raises(BisectUsage, match="does not say which store-buffer model.*give --sim-family"):
        local_model(unrecorded, None)
    assert local_model(unrecorded, "amd-zen4") == "amd-zen4"
    tsc = alert_target({**ALERT, "alerts": [{**ALERT["alerts"][1], "metric": "cpp", "backend": "tsc"}]})
    assert local_model(tsc, None) is None
    with pytest.raises(BisectUsage, match="sets the sim backend's model"):
        local_model(tsc, "amd-zen4")


FWD_C = ["static void", "ttl_decrement(struct rte_ipv4_hdr *ip)", "{", "\tip->time_to_live--;", "}",
         "void", "fwd_burst(void)", "{", "\tnb_tx = rte_eth_tx_burst(port, q, pkts, n);", "}"]


def test_the_hazard_profile_matches_sites_by_function_and_source_text_not_line_number(tmp_path):
    parent, culprit = tmp_path / "parent", tmp_path / "culprit"
    for tree, lines in ((parent, FWD_C), (culprit, ["/* two new lines", " * above everything */", *FWD_C])):
        (tree / "src").mkdir(parents=True)
        (tree / "src" / "fwd.c").write_text("\n".join(lines) + "\n")
    before = sites_by_source({("sf_blocks", "ttl_decrement@fwd.c:4"): 1.0, ("alias_4k", "fwd_burst@fwd.c:9"): 0.7}, parent)
    after = sites_by_source({("sf_blocks", "ttl_decrement@fwd.c:6"): 1.0, ("alias_4k", "fwd_burst@fwd.c:11"): 0.8,
                             ("alias_4k", "???@librte_net_ring.so.23.0"): 0.1}, culprit)
    moves = {m.function: (m.before, m.after) for m in site_moves(before, after)}
    # the store-forward block only moved two lines down: no change; the alias count moved at its moved line
    assert moves == {"4K aliases: fwd_burst@fwd.c:9 -> 11 `nb_tx = rte_eth_tx_burst(port, q, pkts, n);`": (0.7, 0.8),
                     "4K aliases: ???@librte_net_ring.so.23.0": (0.0, 0.1)}


def test_the_hazard_profile_names_a_blocked_loads_distance_to_its_store(tmp_path):
    parent, culprit = tmp_path / "parent", tmp_path / "culprit"
    for tree, lines in ((parent, FWD_C), (culprit, ["/* one new line */", *FWD_C])):
        (tree / "src").mkdir(parents=True)
        (tree / "src" / "fwd.c").write_text("\n".join(lines) + "\n")
    raw = {"sim.sf_dist_min.ttl_decrement@fwd.c:5": 1.0, "sim.sf_dist_median.ttl_decrement@fwd.c:5": 3.0,
           "sim.sf_dist_max.ttl_decrement@fwd.c:5": 40.0, "sim.sf_dist_min.fwd_burst@fwd.c:10": 2.0}  # no median, max
    assert block_distances(raw) == {"ttl_decrement@fwd.c:5": "1/3/40"}
    before = sites_by_source({("alias_4k", "fwd_burst@fwd.c:9"): 0.7}, parent)
    after = sites_by_source({("sf_blocks", "ttl_decrement@fwd.c:5"): 1.0, ("alias_4k", "fwd_burst@fwd.c:10"): 0.7}, culprit)
    moves = {m.function: (m.before, m.after) for m in site_moves(before, after, distances_by_source(block_distances(raw), culprit))}
    assert moves == {"store-forward blocks: ttl_decrement@fwd.c:5 `ip->time_to_live--;` [1/3/40 instructions after the store]":
                     (0.0, 1.0)}


def test_a_change_from_zero_reads_from_zero():
    assert change_text(float("inf")) == "from zero" and change_text(None) == "from zero"
    assert change_text(0.016) == "+1.600%" and change_text(-0.0642, 2) == "-6.42%"
    from rich.console import Console

    console = Console(record=True, width=200)
    render({"status": "culprit", "message": "m", "metric": "sf_blocks_pp", "backend": "sim", "sim_family": "intel-spr",
            "change": {"before_median": 0.0, "after_median": 1.0, "change_pct": None, "kind": "regression", "exact": True},
            "opposing": [_move(change_pct=None, isolated=False, dismissed=False)]}, console)
    text = console.export_text()
    assert "0 -> 1 (from zero, regression), exact rule" in text and "regression from zero seen between" in text
    assert "store-buffer model: intel-spr" in text and "inf" not in text


def _move(**fields):
    base = {"kind": "regression", "change_pct": 1.6, "p_value": 0.0, "exact": True, "seen": "search",
            "good": {"sha": "a" * 40, "index": 0}, "bad": {"sha": "c" * 40, "index": 2}}
    return {**base, **fields}


@pytest.mark.parametrize("status, moves, code", [
    ("culprit", [], 0),
    ("no_change", [_move(isolated=True, dismissed=False, status="culprit")], 1),
    ("unconfirmed", [], 1),
    ("culprit", [_move(isolated=True, dismissed=False, status="culprit", culprit={"sha": "b" * 40, "index": 2})], 3),
    ("culprit", [_move(isolated=False, dismissed=False, status="ambiguous", message="commit 2 or 1")], 4),
    ("culprit", [_move(isolated=False, dismissed=False)], 4),  # seen, never searched
    ("culprit", [_move(isolated=False, dismissed=True, status="unconfirmed")], 0),  # chance: not counted
    ("culprit", [_move(isolated=True, dismissed=False, status="culprit"), _move(isolated=False, dismissed=False)], 4),
])
def test_exit_status_says_whether_a_move_the_other_way_was_seen_and_isolated(status, moves, code):
    result = {"status": status, "message": "m", "metric": "ipp", "backend": "sim", "opposing": moves}
    assert exit_status(result) == code
    from rich.console import Console

    console = Console(record=True, width=200)
    render(result, console)
    text = console.export_text()
    for m in moves:
        expected = ("not counted" if m["dismissed"] else "isolated at" if m.get("status") == "culprit" else "not isolated")
        assert expected in text and "regression +1.600 % seen between aaaaaaaaaaaa and cccccccccccc" in text


def _doc(status: str = "ok", commit: str = "c" * 40) -> ResultDocument:
    now = datetime.now(UTC)
    return ResultDocument(status=status, reason=None if status == "ok" else "broken", commit=commit, config=BenchConfig(),
                          backend="sim", machine={}, machine_id="d" * 64, started_at=now, finished_at=now,
                          samples=[Sample(rep=0, metrics=[{"metric": "ipp", "backend": "sim", "value": 81.5}])] if status == "ok" else [])


def test_result_cache_round_trip_skips_run_failures_and_unreadable_files(tmp_path):
    cache = ResultCache(tmp_path)
    first, second = cache.store("self-64B", _doc()), cache.store("self-64B", _doc("build_failed"))
    assert first and second and cache.store("self-64B", _doc("run_failed")) is None
    (first.parent / "7.json").write_text("{not json")
    loaded = cache.load("d" * 64, "self-64B", "sim", "c" * 40)
    assert [d.status for _, d in loaded] == ["ok", "build_failed"]
    assert cache.load("d" * 64, "other", "sim", "c" * 40) == []


def test_commit_range_is_good_then_first_parent_commits_to_bad(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for i in range(4):
        (repo / "f").write_text(str(i))
        git(repo, "add", "f")
        git(repo, "commit", "-qm", f"c{i}")
    shas = git(repo, "log", "--reverse", "--format=%H").split()
    assert [c.sha for c in commit_range(repo, shas[1], "HEAD")] == shas[1:]
    assert commit_range(repo, shas[0], shas[2])[-1].subject == "c2"
    for good, bad, message in ((shas[2], shas[0], "not an ancestor"), (shas[1], shas[1], "same commit"), ("nope", "HEAD", "unknown commit")):
        with pytest.raises(UsageError, match=message):
            commit_range(repo, good, bad)


def test_server_revisions_full_shas_go_as_given_other_names_resolve_in_the_checkout(tmp_path):
    upstream, checkout = tmp_path / "upstream", tmp_path / "checkout"
    for repo in (upstream, checkout):
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        git(repo, "commit", "-q", "--allow-empty", "-m", f"first of {repo.name}")
        git(repo, "commit", "-q", "--allow-empty", "-m", f"second of {repo.name}")
    first, second = git(upstream, "log", "--reverse", "--format=%H").split()
    # `perfci bisect --machine` run inside a checkout that lacks the server's commits
    assert resolve_local_shas(str(checkout), first.upper(), second) == [first, second]
    assert resolve_local_shas(None, first, second) == [first, second]
    assert resolve_local_shas(str(upstream), "HEAD~1", second) == [first, second]
    with pytest.raises(BisectUsage, match="without --repo"):
        resolve_local_shas(None, "HEAD~1", second)
    with pytest.raises(BisectUsage, match="unknown commit"):
        resolve_local_shas(str(checkout), "HEAD~5", second)


def test_a_local_bisect_reuses_only_sim_results_of_its_model_and_commit_rule():
    def doc(*keys: str) -> ResultDocument:
        d = _doc()
        d.samples[0].raw.update({k: 1.0 for k in keys})
        return d

    icx = SimpleNamespace(sim_family="intel-icx")
    assert LocalBisect._same_model(icx, doc("sim.hz_family.intel-icx", "sim.hz_commit_rule.time"))
    assert not LocalBisect._same_model(icx, doc("sim.hz_family.intel-icx", "sim.hz_commit_rule.rob"))
    assert not LocalBisect._same_model(icx, doc("sim.hz_family.intel-icx"))  # before the rule was recorded: rob
    assert not LocalBisect._same_model(icx, doc("sim.hz_family.amd-zen4", "sim.hz_commit_rule.time"))
