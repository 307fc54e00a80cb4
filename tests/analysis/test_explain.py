import math

import pytest

from perfci_core.analysis.explain import decompose, explain


def test_worked_example_store_forwarding():
    before = {"cpp": 7.60, "ipp": 40.0, "eipc": 40.0 / 7.60, "sf_blocks_pp": 0.010, "l1d_misses_pp": 0.50}
    after = {"cpp": 7.60 * 1.061, "ipp": 40.0, "eipc": 40.0 / (7.60 * 1.061), "sf_blocks_pp": 0.189,
             "l1d_misses_pp": 0.51}
    e = explain(before, after)
    assert e.cause == "stalls"
    assert e.sentence == ("CPP +6.1 %: instructions per packet unchanged, eIPC \u22125.7 % (stalls): "
                          "store-forward blocks per packet \u00d718.9 (0.010 \u2192 0.189)")
    assert [c.metric for c in e.counters] == ["sf_blocks_pp"]  # +2 % L1D is below the 10 % bar
    assert e.counters[0].worse


def test_cpp_contributions_sum_exactly():
    before = {"cpp": 10.0, "ipp": 50.0, "eipc": 5.0}
    after = {"cpp": 12.1, "ipp": 55.0, "eipc": 55.0 / 12.1}
    d = decompose("cpp", before, after)
    parts = {p.factor: p.log_contribution for p in d.contributions}
    assert parts["ipp"] == pytest.approx(math.log(1.1))
    assert parts["eipc"] == pytest.approx(math.log(1.1))  # eIPC down 1/1.1 -> +ln 1.1 on CPP
    assert parts["other"] == pytest.approx(0.0, abs=1e-12)
    assert math.fsum(parts.values()) == pytest.approx(d.log_change, abs=1e-15)
    assert d.log_change == pytest.approx(math.log(1.21))
    assert explain(before, after).cause == "several"


def test_pps_decomposition_puts_frequency_into_other():
    f0, f1 = 2.0e9, 1.9e9
    b = {"pps": f0 * 0.9 * 2.0 / 50.0, "cur": 0.9, "eipc": 2.0, "ipp": 50.0}
    a = {"pps": f1 * 0.95 * 2.0 / 50.0, "cur": 0.95, "eipc": 2.0, "ipp": 50.0}
    d = decompose("pps", b, a)
    parts = {p.factor: p.log_contribution for p in d.contributions}
    assert parts["cur"] == pytest.approx(math.log(0.95 / 0.9))
    assert parts["other"] == pytest.approx(math.log(f1 / f0))
    assert math.fsum(parts.values()) == pytest.approx(d.log_change, abs=1e-15)
    s = explain(b, a).sentence
    assert s.startswith("PPS \u22120.0 %") or s.startswith("PPS +0.")
    assert "CUR +5.6 % (more busy time)" in s and "clock frequency/other \u22125.0 %" in s


def test_sim_subset_ipp_and_caches_only():
    e = explain({"ipp": 100.0, "l1d_misses_pp": 0.5, "llc_misses_pp": 0.01},
                {"ipp": 103.0, "l1d_misses_pp": 0.9, "llc_misses_pp": 0.01})
    assert e.decompositions == ()
    assert e.cause == "instructions"
    assert e.sentence == "IPP +3.0 % (100 \u2192 103 instructions per packet): L1D misses per packet +80.0 % (0.500 \u2192 0.900)"


def test_missing_factor_goes_to_other_and_nothing_known():
    d = decompose("cpp", {"cpp": 10.0, "ipp": 50.0}, {"cpp": 11.0, "ipp": 50.0})
    parts = {p.factor: p.log_contribution for p in d.contributions}
    assert set(parts) == {"ipp", "other"} and parts["other"] == pytest.approx(math.log(1.1))
    assert explain({}, {}).sentence == "no CPP, PPS or IPP measured"
    assert explain({"cpp": 0.0}, {"cpp": 1.0}).cause == "unknown"
    e = explain({"branch_misses_pp": 0.0}, {"branch_misses_pp": 0.2})
    assert e.cause == "counters only" and "from zero" in e.sentence


def test_sim_store_forward_block_is_named_with_its_function_and_line():
    # regression (f): no instruction added, one blocked load per packet in ttl_decrement
    before = {"ipp": 58.94, "sf_blocks_pp": 0.0, "alias_4k_pp": 0.59}
    after = {"ipp": 58.94, "sf_blocks_pp": 1.0, "alias_4k_pp": 0.59}
    sites_after = {("sf_blocks", "ttl_decrement@fwd.c:104"): 1.0, ("sf_blocks", "fwd_burst@fwd.c:198"): 0.004}
    e = explain(before, after, sites_before={}, sites_after=sites_after)
    assert e.cause == "stalls"
    assert e.sentence == ("IPP +0.0 % (58.94 \u2192 58.94 instructions per packet): store-forward blocks per "
                          "packet from zero (0 \u2192 1) in ttl_decrement (fwd.c:104)")
    assert e.counters[0].where == "ttl_decrement (fwd.c:104)"


def test_sim_block_with_extra_instructions_has_both_causes():
    # regression (a): 12 more instructions per packet and a blocked 128-bit load in mac_rewrite
    e = explain({"ipp": 58.94, "sf_blocks_pp": 0.0}, {"ipp": 70.94, "sf_blocks_pp": 1.0},
                sites_after={("sf_blocks", "mac_rewrite@fwd.c:118"): 1.0})
    assert e.cause == "several"
    assert "IPP +20.4 %" in e.sentence and "store-forward blocks per packet from zero (0 \u2192 1) in mac_rewrite (fwd.c:118)" in e.sentence


def test_hazard_moves_below_the_floor_are_not_named():
    # one block in 20 000 packets (a drop landing elsewhere) is not a property of the path
    e = explain({"ipp": 58.94, "sf_blocks_pp": 0.0}, {"ipp": 58.94, "sf_blocks_pp": 0.00005})
    assert e.counters == () and e.cause == "unknown"


def _scaling(pps1: float, b: float, n: int = 2) -> dict[str, float]:
    from perfci_core.analysis.scaling import amdahl_pps, efficiency

    pn = float(amdahl_pps(n, pps1, b))
    return {"pps": pps1, "cpp": 2.45e9 / pps1, "cur": 1.0, "pps_max_lcores": pn, "scaling_efficiency": efficiency(n, pn, pps1),
            "serial_fraction": b}


def test_scaling_regression_is_worded_with_both_lcore_counts():
    """A shared counter per packet: free on one lcore, B 0.02 -> 0.31 on two."""
    before, after = _scaling(38e6, 0.02), _scaling(38e6 * 1.001, 0.31)
    e = explain(before, after)
    assert e.cause == "scaling"
    assert e.sentence == "serial fraction 0.02 \u2192 0.31: throughput at 2 lcores fell 22 % while 1 lcore did not move"


def test_scaling_with_one_lcore_moving_too_is_not_called_scaling():
    before, after = _scaling(38e6, 0.02, 4), _scaling(30e6, 0.10, 4)
    e = explain(before, after)
    assert e.cause != "scaling"
    assert e.sentence.startswith("serial fraction 0.02 \u2192 0.10: throughput at 4 lcores fell 36 % while 1 lcore fell 21 %")


def test_serial_fraction_that_did_not_move_is_not_named():
    before, after = _scaling(38e6, 0.100), _scaling(38e6, 0.105)
    assert "serial fraction" not in explain(before, after).sentence


def test_energy_is_worded_with_what_else_ran():
    before = {"pps": 38e6, "power_w": 45.0, "energy_per_packet": 1.18, "other_cpus_busy": 0.05}
    after = {"pps": 38e6, "power_w": 49.5, "energy_per_packet": 1.30, "other_cpus_busy": 0.90}
    s = explain(before, after).sentence
    assert "package power +10.0 % (45.0 \u2192 49.5 W, 1.18 \u2192 1.3 nJ/packet)" in s
    assert "RAPL counts the whole package: other CPUs were busy 0.05 \u2192 0.90 CPUs over the window" in s
    del before["other_cpus_busy"]
    assert "other cores' work included" in explain(before, after).sentence
