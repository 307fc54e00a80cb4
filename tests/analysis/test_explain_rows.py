"""Explanations that name every cause, on the metric they explain: every site that moved, the functions
whose instructions moved, layout-sensitive counts kept out of an IPP move, one why per metric.

``fixtures/sim_regressions.json`` holds raw samples recorded from the real dataplane under the ``sim``
backend (``SimBackend(cache_sim=False).sample`` on trees of dataplane/ built with ``compile_tree``, as
tests/agent/hazards/test_explain_dataplane.py builds and measures them live): the base, regressions (d)
and (e), (f) with (a) on top (``git apply -C1``: two store-forward sites), and the base and (g) on two
lcores.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from perfci_core.analysis.explain import (
    MAX_SITES, explain, function_moves, functions_text, sharing_text, sites_moved, why,
)
from perfci_core.metrics import OTHER_FUNCTIONS, derive_sim, function_instructions, hazard_sites

RECORDED = json.loads((Path(__file__).parent / "fixtures" / "sim_regressions.json").read_text())


def side(name: str) -> dict:
    raw = RECORDED[name]
    return {"values": derive_sim(raw), "sites": hazard_sites(raw), "functions": function_instructions(raw)}


def context(before: dict, after: dict) -> dict:
    return {"sites_before": before["sites"], "sites_after": after["sites"],
            "functions_before": before["functions"], "functions_after": after["functions"]}


# --- recorded: the real dataplane under sim ---------------------------------------------------------


def test_recorded_functions_add_up_to_the_windows_instructions():
    for name, raw in RECORDED.items():
        functions = function_instructions(raw)
        assert OTHER_FUNCTIONS not in functions, name  # the window runs fewer functions than are named
        assert math.fsum(functions.values()) == pytest.approx(derive_sim(raw)["ipp"], rel=1e-12), name


def test_regression_d_is_explained_by_its_function_delta_and_not_by_4k_aliases():
    base, d = side("base"), side("d-helper-out-of-line")
    assert base["sites"] != d["sites"]  # the 4K aliases moved from site to site with the layout
    e = explain(base["values"], d["values"], **context(base, d))
    assert e.cause == "instructions"
    assert e.sentence == ("IPP +5.1 % (59.03 \u2192 62.03 instructions per packet: +6.0 in ttl_decrement (new), "
                          "\u22123.0 in fwd_burst); no per-packet counter moved")
    assert "4K" not in e.sentence and all(c.metric != "alias_4k_pp" for c in e.counters)
    assert why("ipp", base["values"], d["values"], **context(base, d)) == (
        "IPP +5.1 % (59.03 \u2192 62.03 instructions per packet: +6.0 in ttl_decrement (new), \u22123.0 in fwd_burst)")
    moves = function_moves(base["functions"], d["functions"])
    assert math.fsum(m.delta for m in moves) == pytest.approx(d["values"]["ipp"] - base["values"]["ipp"], abs=1e-9)


def test_a_barrier_per_burst_is_pinned_to_the_function_that_runs_it():
    base, e = side("base"), side("e-full-barrier")
    text = why("ipp", base["values"], e["values"], **context(base, e))
    assert text.endswith("instructions per packet: +0.031 in fwd_burst)"), text  # one MFENCE per 32-packet burst


def test_two_store_forward_sites_are_both_named_largest_first():
    base, two = side("base"), side("f-then-a")
    assert (base["values"]["sf_blocks_pp"], two["values"]["sf_blocks_pp"]) == (0.0, 2.0)
    text = why("sf_blocks_pp", base["values"], two["values"], **context(base, two))
    assert text == ("store-forward blocks per packet from zero (0 \u2192 2): +1.0 in mac_rewrite (fwd.c:121), "
                    "+1.0 in ttl_decrement (fwd.c:105)")
    e = explain(base["values"], two["values"], **context(base, two))
    assert "+1.0 in mac_rewrite (fwd.c:121), +1.0 in ttl_decrement (fwd.c:105)" in e.sentence
    [blocks] = [c for c in e.counters if c.metric == "sf_blocks_pp"]
    assert [s.site for s in blocks.sites] == ["mac_rewrite (fwd.c:121)", "ttl_decrement (fwd.c:105)"]
    pki = why("sf_blocks_pki", base["values"], two["values"], **context(base, two))  # per-packet site moves are not per 1000
    assert pki.endswith("in mac_rewrite (fwd.c:121), ttl_decrement (fwd.c:105)") and "+1.0" not in pki


def test_the_shared_counter_names_its_line_sharing_site():
    base, g = side("base-2-lcores"), side("g-shared-counter-2-lcores")
    text = sharing_text(base["values"], g["values"], base["sites"], g["sites"])
    assert text == "sim: line transfers per packet \u00d725.1 (0.024 \u2192 0.596) in forward_one (fwd.c:175)"
    # said with the serial fraction of a scaling config over the same range (its own numbers)
    scaling = ({"pps": 38e6, "pps_max_lcores": 72e6, "scaling_efficiency": 0.947, "serial_fraction": 0.03},
               {"pps": 38e6, "pps_max_lcores": 50e6, "scaling_efficiency": 0.658, "serial_fraction": 0.41})
    e = explain(*scaling, sharing=text)
    assert e.cause == "scaling"
    assert e.sentence == ("serial fraction 0.03 \u2192 0.41: throughput at 2 lcores fell 31 % while 1 lcore did not move; "
                          "sim: line transfers per packet \u00d725.1 (0.024 \u2192 0.596) in forward_one (fwd.c:175)")
    assert why("serial_fraction", *scaling, sharing=text) == e.sentence


# --- each row its own why -------------------------------------------------------------------------


BEFORE = {"ipp": 59.0, "sf_blocks_pp": 0.0, "alias_4k_pp": 0.17, "cpp": 20.0, "eipc": 2.95, "l1d_misses_pp": 0.5}
AFTER = {"ipp": 64.0, "sf_blocks_pp": 1.0, "alias_4k_pp": 0.06, "cpp": 24.0, "eipc": 64.0 / 24.0, "l1d_misses_pp": 0.5}
SITES = {"sites_before": {}, "sites_after": {("sf_blocks", "ttl_decrement@fwd.c:103"): 1.0}}


def test_each_metric_gets_its_own_story():
    ipp = why("ipp", BEFORE, AFTER, **SITES)
    assert ipp == "IPP +8.5 % (59 \u2192 64 instructions per packet)"  # no function counts: the move alone
    blocks = why("sf_blocks_pp", BEFORE, AFTER, **SITES)
    assert blocks == "store-forward blocks per packet from zero (0 \u2192 1) in ttl_decrement (fwd.c:103)"
    alias = why("alias_4k_pp", BEFORE, AFTER, **SITES)
    assert alias.startswith("4K-aliasing loads per packet \u00f72.83") and "store-forward" not in alias
    cycles = why("cpp", BEFORE, AFTER, **SITES)
    assert cycles.startswith("CPP +20.0 %: instructions per packet +8.5 %, eIPC \u22129.6 % (stalls)")
    assert "store-forward blocks per packet from zero" in cycles
    assert "4K-aliasing" in cycles  # eIPC moved: a cycles figure shows what the aliases may cost
    assert why("l1d_misses_pp", BEFORE, AFTER) == ""  # did not move: nothing to say


def test_layout_sensitive_counts_never_explain_an_ipp_move():
    before, after = {"ipp": 59.0, "alias_4k_pp": 0.17}, {"ipp": 64.0, "alias_4k_pp": 0.06}
    e = explain(before, after)
    assert e.counters == () and e.cause == "instructions"
    assert e.sentence == "IPP +8.5 % (59 \u2192 64 instructions per packet); no per-packet counter moved"
    # with cycles and eIPC unchanged (the move is all instructions) they are not named either
    before.update(cpp=20.0, eipc=2.95)
    after.update(cpp=20.0 * 64 / 59, eipc=2.95)
    assert "4K" not in explain(before, after).sentence


def test_scaling_rows_without_a_serial_fraction_say_what_the_lcores_did():
    before = {"pps": 38e6, "pps_max_lcores": 72e6, "scaling_efficiency": 0.947}
    after = {"pps": 38e6, "pps_max_lcores": 60e6, "scaling_efficiency": 0.789}
    assert why("pps_max_lcores", before, after) == "throughput at 2 lcores fell 17 % while 1 lcore did not move"


def test_energy_rows_say_the_package_power():
    before, after = {"power_w": 45.0, "energy_per_packet": 1.18}, {"power_w": 49.5, "energy_per_packet": 1.30}
    assert why("power_w", before, after).startswith("package power +10.0 % (45.0 \u2192 49.5 W")


# --- every site, capped ------------------------------------------------------------------------------


def test_every_site_that_moved_is_named_by_size_with_a_cap():
    after = {("sf_blocks", f"f{i}@fwd.c:{100 + i}"): 0.1 * (i + 1) for i in range(MAX_SITES + 2)}
    after[("sf_blocks", "steady@fwd.c:90")] = 0.5
    before = {("sf_blocks", "steady@fwd.c:90"): 0.5, ("sf_blocks", "gone@fwd.c:80"): 0.3}
    moves = sites_moved("sf_blocks", before, after, worse=True)
    assert [m.site for m in moves] == [f"f{i} (fwd.c:{100 + i})" for i in reversed(range(MAX_SITES + 2))]
    text = why("sf_blocks_pp", {"sf_blocks_pp": 0.8}, {"sf_blocks_pp": 2.6}, sites_before=before, sites_after=after)
    assert text.endswith(": +0.6 in f5 (fwd.c:105), +0.5 in f4 (fwd.c:104), +0.4 in f3 (fwd.c:103), "
                         "+0.3 in f2 (fwd.c:102), +2 more")
    # an improvement names the sites that went down
    assert [m.site for m in sites_moved("sf_blocks", after, before, worse=False)][0] == "f5 (fwd.c:105)"


def test_sites_below_the_floor_are_left_out_unless_nothing_else_moved():
    after = {("sf_blocks", "hot@fwd.c:1"): 1.0, ("sf_blocks", "rare@fwd.c:2"): 0.004}
    assert [m.site for m in sites_moved("sf_blocks", {}, after, True, floor=0.01)] == ["hot (fwd.c:1)"]
    assert [m.site for m in sites_moved("sf_blocks", {}, {("sf_blocks", "rare@fwd.c:2"): 0.004}, True, floor=0.01)] == \
        ["rare (fwd.c:2)"]


# --- functions ---------------------------------------------------------------------------------------


def test_functions_new_gone_and_capped():
    before = {"fwd_burst": 50.0, "route_lookup": 4.0, "old_helper": 2.0, "steady": 1.0}
    after = {"fwd_burst": 50.5, "route_lookup": 3.5, "ip_fwd_helper": 3.0, "steady": 1.005}
    assert functions_text(function_moves(before, after)) == (
        "+3.0 in ip_fwd_helper (new), \u22122.0 in old_helper (gone), +0.5 in fwd_burst, \u22120.5 in route_lookup")
    many_after = {**after, **{f"g{i}": 0.2 for i in range(3)}}
    assert functions_text(function_moves(before, many_after)).endswith(", +3 more")


def test_a_side_that_lists_only_its_largest_functions_does_not_make_others_new():
    before = {"fwd_burst": 50.0, OTHER_FUNCTIONS: 0.5}  # some small functions were not listed
    after = {"fwd_burst": 50.0, "tiny": 0.4, "ip_fwd_helper": 3.0}
    assert function_moves(before, after) == []  # neither is known on the left: neither is called new
    assert [m.function for m in function_moves({"fwd_burst": 50.0, "ip_fwd_helper": 0.0001}, after)] == ["ip_fwd_helper", "tiny"]
    assert function_moves({}, after) == []  # no per-function counts on one side: nothing to say


def test_function_instructions_from_raw_keys():
    raw = {"sim.fwd_packets": 100.0, "sim.fn.fwd_burst": 5000.0, "sim.fn.route": 300.0, "sim.fn_other": 20.0}
    assert function_instructions(raw) == {"fwd_burst": 50.0, "route": 3.0, OTHER_FUNCTIONS: 0.2}
    assert function_instructions({"sim.fwd_packets": 100.0}) == {}
    assert function_instructions({"sim.fn.fwd_burst": 5000.0}) == {}  # no packets: nothing per packet
