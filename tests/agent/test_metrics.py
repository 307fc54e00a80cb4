"""metrics.py formulas against hand-computed values, and the lean-model identity on real reports."""

import json
from pathlib import Path

import pytest

from perfci_agent import runner
from perfci_agent.errors import RunFailed
from perfci_core import metrics

REPORTS = Path(__file__).parent / "fixtures" / "reports"


def test_derive_tsc_hand_computed():
    raw = {"tsc.packets": 1000.0, "tsc.busy_cycles": 8000.0, "tsc.window_cycles": 10000.0, "tsc.tsc_hz": 2e9}
    d = metrics.derive_tsc(raw)
    assert d["cpp"] == 8.0  # 8000 / 1000
    assert d["cur"] == 0.8  # 8000 / 10000
    assert d["pps"] == pytest.approx(2e8)  # 1000 packets in 10000 cycles at 2 GHz = 5 us


def test_derive_pmu_hand_computed_with_idle_calibration():
    # idle run: 1,000 empty polls cost 50,000 instructions and 20,000 cycles -> 50 and 20 per poll
    idle = metrics.IdleCalibration.from_idle_run(50_000, 20_000, 1_000)
    assert (idle.instructions_per_empty_poll, idle.cycles_per_empty_poll) == (50.0, 20.0)
    raw = {
        "tsc.packets": 10_000.0, "tsc.empty_polls": 100.0, "tsc.window_cycles": 200_000.0, "tsc.tsc_hz": 1e9,
        "pmu.instructions": 905_000.0, "pmu.cycles": 152_000.0,
        "pmu.cache_references": 4_000.0, "pmu.cache_misses": 1_000.0, "pmu.l1d_load_misses": 20_000.0,
        "pmu.llc_load_misses": 500.0, "pmu.sf_blocks": 1_800.0, "pmu.branch_misses": 300.0,
    }
    d = metrics.derive_pmu(raw, idle)
    # useful instructions = 905,000 - 100*50 = 900,000 ; useful cycles = 152,000 - 100*20 = 150,000
    assert d["ipc"] == pytest.approx(905_000 / 152_000)
    assert d["eipc"] == pytest.approx(6.0)
    assert d["ipp"] == pytest.approx(90.0)
    assert d["cpp"] == pytest.approx(15.0)
    assert d["cur"] == pytest.approx(150_000 / 152_000)
    assert d["pps"] == pytest.approx(10_000 / 200e-6)
    assert d["cache_miss_rate"] == 0.25 and d["cache_misses_pp"] == 0.1
    assert d["l1d_misses_pp"] == 2.0 and d["llc_misses_pp"] == 0.05
    assert d["sf_blocks_pp"] == 0.18 and d["sf_blocks_pki"] == pytest.approx(1000 * 1_800 / 905_000)
    assert d["branch_misses_pp"] == 0.03
    assert d["cpp"] == pytest.approx(d["ipp"] / d["eipc"])  # CPP = IPP / eIPC
    hazards = metrics.derive_pmu({**raw, "pmu.split_loads": 500.0, "pmu.split_stores": 0.0, "pmu.alias_4k": 7_900.0}, idle)
    assert (hazards["split_loads_pp"], hazards["split_stores_pp"], hazards["alias_4k_pp"]) == (0.05, 0.0, 0.79)


def test_absent_counts_are_not_derived_never_zero():
    raw = {"tsc.packets": 10.0, "pmu.instructions": None, "pmu.cycles": 100.0, "pmu.sf_blocks": None}
    d = metrics.derive_pmu(raw, None)
    assert "ipc" not in d and "sf_blocks_pp" not in d and "eipc" not in d
    assert metrics.derive_sim({"sim.fwd_instructions": None, "sim.fwd_packets": 5.0}) == {}


def test_derive_sim_hand_computed():
    d = metrics.derive_sim({"sim.fwd_instructions": 8_336_620.0, "sim.fwd_packets": 102_016.0,
                            "sim.d1_misses": 2_000.0, "sim.ll_misses": 80.0, "sim.cache_packets": 1_000.0})
    assert d == {"ipp": pytest.approx(8_336_620 / 102_016), "l1d_misses_pp": 2.0, "llc_misses_pp": 0.08}


def test_derive_sim_hazards_per_packet_and_sites():
    raw = {"sim.fwd_instructions": 6_012_568.0, "sim.fwd_packets": 102_016.0, "sim.sf_blocks": 102_016.0,
           "sim.split_loads": 0.0, "sim.split_stores": 0.0, "sim.alias_4k": 60_295.0,
           "sim.site.sf_blocks.ttl_decrement@fwd.c:104": 102_016.0, "sim.site.alias_4k.route@fwd.c:132": 14_346.0}
    d = metrics.derive_sim(raw)
    assert d["sf_blocks_pp"] == 1.0 and d["split_loads_pp"] == 0.0 and d["alias_4k_pp"] == pytest.approx(60_295 / 102_016)
    assert d["sf_blocks_pki"] == pytest.approx(1000 * 102_016 / 6_012_568)
    assert metrics.hazard_sites(raw) == {("sf_blocks", "ttl_decrement@fwd.c:104"): 1.0,
                                         ("alias_4k", "route@fwd.c:132"): pytest.approx(14_346 / 102_016)}


def test_stable_stack_env_pads_argv_and_environment_to_one_size():
    def strings(argv, env):
        return sum(len(a) + 1 for a in argv) + sum(len(k) + len(v) + 2 for k, v in env.items()) + len(env.get("VALGRIND_LIB", ""))

    short = runner.stable_stack_env(["fwd", "--file-prefix", "p-1-0"], {"PATH": "/bin", "VALGRIND_LIB": "/c/x"})
    long = runner.stable_stack_env(["fwd", "--file-prefix", "perfci-123456-17"], {"PATH": "/usr/bin:/bin", "VALGRIND_LIB": "/cache/memhazard-1"})
    assert strings(["fwd", "--file-prefix", "p-1-0"], short) == strings(["fwd", "--file-prefix", "perfci-123456-17"], long) == runner.STACK_STRINGS
    with pytest.raises(RunFailed, match="more than"):
        runner.stable_stack_env(["x" * runner.STACK_STRINGS], {})


def _real(name: str) -> dict:
    return json.loads((REPORTS / name).read_text())


def test_tsc_identity_on_a_real_report():
    raw = runner.tsc_raw(_real("forward-self-64B.json"))
    d = metrics.derive_tsc(raw)
    # PPS = Freq x CUR / CPP with Freq = the TSC rate the report's cycles are counted in
    assert d["pps"] == pytest.approx(raw["tsc.tsc_hz"] * d["cur"] / d["cpp"], rel=1e-12)
    assert d["cpp"] == pytest.approx(raw["tsc.busy_cycles"] / raw["tsc.packets"])


def test_pmu_identity_on_real_reports():
    """PPS = Freq x CUR x eIPC / IPP, with the real forward and idle reports' tsc accounting.

    This VM has no PMU, so the instruction and cycle counts are the hand-chosen ones below (not
    recordings); the packet, poll and window counts are the dataplane's real report.
    """
    fwd, idle_rep = _real("forward-self-64B.json"), _real("idle.json")
    raw = runner.tsc_raw(fwd)
    idle_polls = idle_rep["window"]["polls"]["empty"]
    idle = metrics.IdleCalibration.from_idle_run(40.0 * idle_polls, 25.0 * idle_polls, idle_polls)
    raw.update({"pmu.instructions": 90.0 * raw["tsc.packets"] + 40.0 * raw["tsc.empty_polls"],
                "pmu.cycles": raw["tsc.window_cycles"] * 1.1})
    d = metrics.derive_pmu(raw, idle)
    freq = metrics.core_frequency_hz(raw)
    assert freq == pytest.approx(1.1 * raw["tsc.tsc_hz"])
    assert d["pps"] == pytest.approx(freq * d["cur"] * d["eipc"] / d["ipp"], rel=1e-9)
    assert d["pps"] == pytest.approx(freq * d["cur"] / d["cpp"], rel=1e-9)
    assert d["ipp"] == pytest.approx(90.0)


def test_idle_calibration_rejects_no_empty_polls():
    with pytest.raises(ValueError):
        metrics.IdleCalibration.from_idle_run(1.0, 1.0, 0)


def test_catalogue_directions():
    assert metrics.get("ipp").is_regression(80.0, 81.0)
    assert metrics.get("eipc").is_regression(2.0, 1.9)
    assert not metrics.get("pps").is_regression(1.0, 2.0)


def test_impossible_derivations_are_flagged_in_the_result_and_not_used():
    """A run whose busy-cycle count came back 0 derives 0 cycles per packet and a CUR of 0: not a
    measurement. The document the agent builds names them in its notes and keeps the rest."""
    from datetime import UTC, datetime

    from perfci_agent.backends import metric_values
    from perfci_core.result import BenchConfig, ResultDocument, Sample

    good = {"tsc.packets": 1000.0, "tsc.busy_cycles": 8000.0, "tsc.window_cycles": 10000.0, "tsc.tsc_hz": 2e9}
    broken = {**good, "tsc.busy_cycles": 0.0}
    samples = [Sample(rep=i, raw=raw, metrics=metric_values(metrics.derive_tsc(raw), metrics.Backend.TSC))
               for i, raw in enumerate((good, broken, good))]
    assert {m.metric: m.value for m in samples[1].metrics}["cpp"] == 0.0  # the formula alone accepts it
    now = datetime.now(UTC)
    doc = ResultDocument(status="ok", commit="c" * 40, config=BenchConfig(), backend="tsc", machine={}, machine_id="d" * 64,
                         started_at=now, finished_at=now, samples=samples)
    assert sorted(m.metric for m in doc.samples[1].metrics) == ["pps"]  # cpp and cur taken out
    assert [len(s.metrics) for s in doc.samples] == [3, 1, 3]
    assert any(n.startswith("impossible cpp (tsc) rep 1 = 0.0: cycles/packet must be > 0") for n in doc.notes), doc.notes
    assert any(n.startswith("impossible cur (tsc) rep 1 = 0.0") for n in doc.notes), doc.notes


@pytest.mark.parametrize("name, value, why", [
    ("ipc", 0.0, "must be > 0"), ("eipc", -0.5, "cannot be negative"), ("ipp", float("inf"), "not a finite"),
    ("cpp", float("nan"), "not a finite"), ("pps", 0.0, "must be > 0"),
])
def test_the_catalogue_knows_each_metrics_physical_bounds(name, value, why):
    assert why in metrics.get(name).impossible(value)
    assert metrics.get(name).impossible(1.0) is None


def test_zero_events_per_packet_are_possible_negative_counts_are_not():
    assert metrics.get("l1d_misses_pp").impossible(0.0) is None  # a path with no miss
    assert metrics.get("sf_blocks_pp").impossible(-0.01) is not None
    assert metrics.impossible_count(0.0) is None and "negative" in metrics.impossible_count(-1.0)
