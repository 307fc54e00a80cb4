"""Recorded real perf stat outputs (tests/agent/fixtures/perf/README.md) parse to the right numbers."""

from pathlib import Path

import pytest

from perfci_agent import perfstat

PERF = Path(__file__).parent / "fixtures" / "perf"


def load(name: str) -> list[perfstat.Count]:
    return perfstat.parse((PERF / name).read_text())


def test_intel_spr_csv_and_json_agree_on_events_and_skip_metric_groups():
    csv, js = load("intel-spr-csv.txt"), load("intel-spr-json.txt")
    assert [c.event for c in csv] == [c.event for c in js] == [
        "cpu-clock", "context-switches", "cpu-migrations", "page-faults", "cycles", "instructions", "branches", "branch-misses"]
    c = perfstat.by_event(csv)
    assert c["cycles"].value == 52288305 and c["instructions"].value == 37977214
    assert c["cpu-clock"].value == pytest.approx(225851.20) and c["cpu-clock"].unit == "msec"
    assert c["branch-misses"].runtime == 225849672536 and c["branch-misses"].running_pct == 100.0
    j = perfstat.by_event(js)
    assert j["instructions"].value == 38620409 and j["cycles"].value == 48433482
    assert j["branch-misses"].value == 54747 and j["cycles"].runtime == 225903792732
    assert not any(x.multiplexed for x in csv + js)


@pytest.mark.parametrize("name", ["intel-adl-hybrid-csv.txt", "intel-adl-hybrid-json.txt"])
def test_hybrid_multiplexed_counts_keep_running_percentage_and_are_never_summed(name):
    counts = load(name)
    atom = perfstat.lookup(counts, "cycles", pmu="cpu_atom")
    core = perfstat.lookup(counts, "cycles", pmu="cpu_core")
    assert atom.running_pct == 54.0 and atom.multiplexed
    assert core.running_pct == 100.0 and not core.multiplexed
    assert atom.value in (256500230, 255620352) and core.value in (6766433, 18685492)
    assert perfstat.lookup(counts, "cycles") is None  # ambiguous without a PMU: refuse to pick or sum
    instr = perfstat.lookup(counts, "instructions", pmu="cpu_atom")
    assert instr.running_pct == 63.0 and instr.multiplexed


def test_not_counted_is_absent_not_zero():
    counts = load("intel-topdown-not-counted-csv.txt")
    assert [c.event for c in counts] == ["slots", "topdown-retiring", "topdown-be-bound", "topdown-fe-bound", "topdown-bad-spec", "cycles"]
    assert all(c.value is None and c.status == "not counted" and not c.multiplexed for c in counts)
    js = load("intel-adl-hybrid-json-not-counted.txt")
    atom = perfstat.lookup(js, "branch-misses", pmu="cpu_atom")
    assert atom.value is None and atom.status == "not counted" and atom.running_pct == 0.0
    assert perfstat.lookup(js, "branch-misses", pmu="cpu_core").value == 6326


def test_amd_zen5_csv_not_supported_and_multiplexed():
    c = perfstat.by_event(load("amd-zen5-csv.txt"))
    assert c["cycles"].value == 1964145726 and c["instructions"].value == 11682238319
    assert c["ref-cycles"].value == 1901000000 and c["branch-misses"].value == 116348
    fills = c["ls_dmnd_fills_from_sys.dram_io_all"]
    assert fills.value is None and fills.status == "not supported"
    walks = c["ls_l1_d_tlb_miss.all_l2_miss"]
    assert walks.value == 150396 and walks.running_pct == 74.0 and walks.multiplexed
    assert c["task-clock"].value == pytest.approx(976.56)


@pytest.mark.parametrize("name", ["vm-amd-kvm-csv-not-supported.txt", "vm-amd-kvm-json-not-supported.txt"])
def test_this_vm_hardware_events_are_absent(name):
    c = perfstat.by_event(load(name))
    assert c["instructions"].value is None and c["instructions"].status == "not supported"
    assert c["cycles"].value is None
    assert c["task-clock"].value > 0 and c["task-clock"].status == "ok"


def test_window_gated_recordings_parse_despite_events_enabled_lines():
    csv = perfstat.by_event(load("vm-amd-kvm-csv-control-window.txt"))
    assert csv["task-clock"].value == pytest.approx(126.78)
    assert csv["context-switches"].value == 31
    assert csv["instructions"].value is None
    js = perfstat.by_event(load("vm-amd-kvm-json-control-window.txt"))
    assert js["task-clock"].value == pytest.approx(161.081944)
    # the window was 0.2 s of a 0.8 s process: the gated count must be well below the whole run
    assert js["task-clock"].value < 400 and csv["task-clock"].value < 400


def test_base_event_names():
    assert perfstat.base_event("cpu_core/cycles/") == "cycles"
    assert perfstat.base_event("cycles:u") == "cycles"
    assert perfstat.base_event("ld_blocks.store_forward") == "ld_blocks.store_forward"
    assert perfstat.base_event("cpu/event=0x3c/") == "cpu/event=0x3c/"


def test_interval_and_repeat_columns():
    interval = "0.020098855,40000000,,cycles,20000000,100.00,,\n0.040389647,<not counted>,,cycles,0,100.00,,\n"
    counts = perfstat.parse_csv(interval)
    assert [c.value for c in counts] == [40000000, None]
    repeat = "2.50,msec,task-clock,1.00%,2500000,100.00,,\n"  # synthetic -r row
    (c,) = perfstat.parse_csv(repeat)
    assert c.value == 2.5 and c.runtime == 2500000 and c.running_pct == 100.0
