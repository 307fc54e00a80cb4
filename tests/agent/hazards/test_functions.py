"""memhazard's instructions by function: each symbol's self instructions in the window, adding up to
the window's count, and the sim backend's bounded raw keys made of them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from perfci_agent.backends.sim import FUNCTIONS, function_raw
from perfci_agent.hazards import HazardReport, parse_report
from perfci_core.metrics import OTHER_FUNCTIONS, function_instructions

HERE = Path(__file__).resolve().parent
CALLS = 1000
# functions of patterns.c, each a window of its own in test_memhazard.py
PATTERNS = ("same_size", "narrow_then_wide", "line_split", "alias_4k", "store_300_nops_load")


@pytest.fixture(scope="module")
def patterns(tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("patterns") / "patterns"
    subprocess.run(["cc", "-O2", "-g", "-o", str(exe), str(HERE / "patterns.c")], check=True)
    return exe


def test_a_window_of_one_function_counts_all_its_instructions_there(run_window, patterns, tmp_path):
    for window in PATTERNS:
        report = run_window(patterns, tmp_path, window)
        assert report.functions == {window: report.instructions}, window


def test_the_functions_add_up_to_the_window_and_repeat_exactly(run_window, patterns, tmp_path):
    # main's window runs every pattern: each is its own function, main keeps its loop
    report = run_window(patterns, tmp_path, "main")
    assert sum(report.functions.values()) == report.instructions
    per_call = {name: report.functions[name] / CALLS for name in PATTERNS}
    alone = {name: run_window(patterns, tmp_path, name).instructions / CALLS for name in PATTERNS}
    assert per_call == alone
    assert report.functions["store_300_nops_load"] > 300 * CALLS  # its NOPs
    assert report.functions["main"] > 0
    again = run_window(patterns, tmp_path, "main")
    assert again.functions == report.functions


def _report(functions: dict[str, int]) -> HazardReport:
    return HazardReport("intel-icx", 72, 352, "time", "fwd_burst", 1, sum(functions.values()), 0, 0, {},
                        functions=functions)


def test_the_raw_keys_keep_the_largest_functions_and_sum_the_rest():
    functions = {f"f{i:02d}": 1000 - i for i in range(FUNCTIONS + 4)}
    raw = function_raw(_report(functions))
    assert len(raw) == FUNCTIONS + 1  # bounded whatever the program
    assert raw["sim.fn.f00"] == 1000.0 and f"sim.fn.f{FUNCTIONS - 1:02d}" in raw and f"sim.fn.f{FUNCTIONS:02d}" not in raw
    assert raw["sim.fn_other"] == sum(1000 - i for i in range(FUNCTIONS, FUNCTIONS + 4))
    assert sum(raw.values()) == sum(functions.values())
    per_packet = function_instructions({**raw, "sim.fwd_packets": 10.0})
    assert per_packet["f00"] == 100.0 and OTHER_FUNCTIONS in per_packet
    assert "sim.fn_other" not in function_raw(_report({"fwd_burst": 5000, "??? (librte_net_ring.so.23.0)": 700}))


def test_function_lines_are_parsed_and_a_malformed_one_is_refused():
    header = ("memhazard 4\nfamily intel-icx\nstore_buffer 72\nrob 352\nwindow_fn fwd_burst\ncommit_rule time\n"
              "windows 1\ninstructions 30\nloads 0\nstores 0\n"
              + "".join(f"{k} 0\n" for k in ("sf_blocked", "sf_forwarded", "split_loads", "split_stores", "alias_4k",
                                              "line_transfers", "read_transfers", "mfence", "lfence", "sfence", "rdtscp",
                                              "serializing", "locked", "drains", "forwarding_threads", "lines_tracked",
                                              "untracked_lines", "untracked_thread_accesses", "logged_accesses",
                                              "late_accesses")))
    report = parse_report(header + "function 20 fwd_burst\nfunction 10 ??? (librte_net_ring.so.23.0)\n")
    assert report.functions == {"fwd_burst": 20, "??? (librte_net_ring.so.23.0)": 10}
    with pytest.raises(ValueError, match="malformed function line"):
        parse_report(header + "function many fwd_burst\n")
