"""memhazard, the sim backend's store-buffer model, on tiny programs with known patterns.

Each pattern of ``patterns.c`` is one function called 1000 times; the tool is run with that
function as its window, so every count below is exact per call (the tool is deterministic).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from perfci_agent.cpuinfo import CpuId
from perfci_agent.backends.sim import DISTANCE_PREFIX, SimBackend, hazard_raw
from perfci_agent.hazards import DEFAULT_COMMIT_RULE, DEFAULT_FAMILY, FamilyChoice, ToolUnavailable, family_for, memhazard_lib, parse_report
from perfci_agent.hazards.family import recorded_commit_rule
from perfci_core.metrics import hazard_sites

HERE = Path(__file__).resolve().parent
CALLS = 1000


@pytest.fixture(scope="session")
def patterns(tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("patterns") / "patterns"
    subprocess.run(["cc", "-O2", "-g", "-o", str(exe), str(HERE / "patterns.c")], check=True)
    return exe


def run(run_window, exe: Path, tmp_path: Path, window: str, *extra: str):
    report = run_window(exe, tmp_path, window, *extra)
    assert report.windows == CALLS and report.window_fn == window
    return report


def per_call(report) -> dict[str, float]:
    return {k: v / CALLS for k, v in report.counts.items()}


NO_SHARING = {"line_transfers": 0, "read_transfers": 0}  # one thread: no line can move


def test_same_size_store_then_load_is_forwarded(run_window, patterns, tmp_path):
    c = per_call(run(run_window, patterns, tmp_path, "same_size"))
    assert c == {"sf_blocked": 0, "sf_forwarded": 1, "split_loads": 0, "split_stores": 0, "alias_4k": 0, **NO_SHARING}


def test_narrow_stores_then_a_wide_load_block_once_per_call(run_window, patterns, tmp_path):
    report = run(run_window, patterns, tmp_path, "narrow_then_wide")
    assert per_call(report) == {"sf_blocked": 1, "sf_forwarded": 0, "split_loads": 0, "split_stores": 0, "alias_4k": 0,
                                **NO_SHARING}
    (site,) = report.top_sites("sf_blocked", 5)
    assert site.function == "narrow_then_wide" and site.where.startswith("patterns.c:") and site.count == CALLS


def test_a_load_and_a_store_across_a_line_are_split(run_window, patterns, tmp_path):
    c = per_call(run(run_window, patterns, tmp_path, "line_split"))
    assert (c["split_loads"], c["split_stores"], c["sf_blocked"]) == (1, 1, 0)


def test_a_load_4k_away_from_a_store_in_flight_aliases(run_window, patterns, tmp_path):
    c = per_call(run(run_window, patterns, tmp_path, "alias_4k"))
    assert (c["alias_4k"], c["sf_blocked"], c["sf_forwarded"]) == (1, 0, 0)


@pytest.mark.parametrize("family, blocked", [("intel-icx", 1), ("intel-spr", 1), ("amd-zen4", 0)])
def test_the_forwarding_rules_follow_the_family(run_window, patterns, tmp_path, family, blocked):
    report = run(run_window, patterns, tmp_path, "vector_then_straddling", f"--family={family}")
    assert report.family == family
    assert (report.counts["sf_blocked"], report.counts["sf_forwarded"]) == (blocked * CALLS, (1 - blocked) * CALLS)


def test_a_store_leaves_the_buffer_after_n_younger_stores_or_rob_instructions(run_window, patterns, tmp_path):
    # evicted: the load's store has three younger stores behind it (and is 4 instructions back).
    # --rob sizes the ROB of the rule "rob" only (the rule "time" does not look at it), so it is asked for.
    assert run(run_window, patterns, tmp_path, "evicted").counts["sf_forwarded"] == CALLS
    assert run(run_window, patterns, tmp_path, "evicted", "--store-buffer=4").counts["sf_forwarded"] == CALLS
    assert run(run_window, patterns, tmp_path, "evicted", "--commit-rule=rob", "--rob=4").counts["sf_forwarded"] == CALLS
    for small in (("--store-buffer=3",), ("--commit-rule=rob", "--rob=3")):
        gone = run(run_window, patterns, tmp_path, "evicted", *small).counts
        assert gone["sf_forwarded"] == 0 and gone["sf_blocked"] == 0, small  # committed: read from the cache


# A 4-byte store, k NOPs, an 8-byte load over it (patterns.c, STORE_NOPS_LOAD): blocked while the store is in
# flight. rob: for ROB instructions (352 on intel-icx, 224 on intel-skx). time: until it retired and committed,
# latency x width instructions when nothing queues ahead (11 x 5 = 55 on intel-icx, 10 x 4 = 40 on intel-skx).
@pytest.mark.parametrize("window, family, blocked_rob, blocked_time", [
    ("store_10_nops_load", "intel-icx", 1, 1),
    ("store_10_nops_load", "amd-zen4", 1, 1),
    ("store_40_nops_load", "intel-icx", 1, 1),  # 41 < 55
    ("store_40_nops_load", "intel-skx", 1, 0),  # 41 >= 40: committed at skx's narrower width
    ("store_300_nops_load", "intel-icx", 1, 0),  # the example: 301 < 352, but ~60 cycles later
    ("store_300_nops_load", "intel-spr", 1, 0),
    ("store_300_nops_load", "intel-skx", 0, 0),  # 301 > 224
])
def test_a_store_then_k_nops_then_a_wider_load_under_each_commit_rule(run_window, patterns, tmp_path, window, family,
                                                                       blocked_rob, blocked_time):
    distance = int(window.split("_")[1]) + 1  # the NOPs and the load
    for rule, blocked in (("rob", blocked_rob), ("time", blocked_time)):
        report = run(run_window, patterns, tmp_path, window, f"--family={family}", f"--commit-rule={rule}")
        assert report.commit_rule == rule
        assert (report.counts["sf_blocked"], report.counts["sf_forwarded"]) == (blocked * CALLS, 0), rule
        sites = report.top_sites("sf_blocked", 5)
        assert [(s.function, s.count, str(s.distance)) for s in sites] == \
            ([(window, CALLS, f"{distance}/{distance}/{distance}")] if blocked else []), rule


def test_stores_queued_ahead_keep_a_store_in_flight_at_the_commit_rate(run_window, patterns, tmp_path):
    # 20 back-to-back stores, the 4-byte store, 70 NOPs, the 8-byte load. Alone, the store would have committed
    # 55 instructions after it (test above); behind 20 stores committing 2 per 5 instructions (intel-icx) it
    # commits 55 + 20 x 2.5 = 105 instructions after the first, 85 after itself: the load (71 after) is blocked.
    for family in ("intel-icx", "intel-skx", "amd-zen4"):
        report = run(run_window, patterns, tmp_path, "queued_store_70_nops_load", f"--family={family}")
        assert report.commit_rule == "time" and report.counts["sf_blocked"] == CALLS, family
        assert str(report.top_sites("sf_blocked", 1)[0].distance) == "71/71/71"


def test_the_default_commit_rule_is_time_and_an_unknown_one_is_refused(tool_lib, run_window, patterns, tmp_path):
    assert run(run_window, patterns, tmp_path, "store_300_nops_load").commit_rule == "time"
    r = subprocess.run(["valgrind", "-q", "--tool=memhazard", "--commit-rule=never", f"--out-file={tmp_path / 'x'}", str(patterns)],
                       env={**os.environ, "VALGRIND_LIB": str(tool_lib)}, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "unknown commit rule never" in r.stderr


def test_counts_are_identical_run_to_run(run_window, patterns, tmp_path):
    a = run(run_window, patterns, tmp_path, "narrow_then_wide")
    b = run(run_window, patterns, tmp_path, "narrow_then_wide")
    assert (a.instructions, a.loads, a.stores, a.counts) == (b.instructions, b.loads, b.stores, b.counts)


def test_an_unknown_family_is_refused(tool_lib, patterns, tmp_path):
    r = subprocess.run(["valgrind", "-q", "--tool=memhazard", "--family=pentium4", f"--out-file={tmp_path / 'x'}", str(patterns)],
                       env={**os.environ, "VALGRIND_LIB": str(tool_lib)}, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "unknown family pentium4" in r.stderr


def test_a_missing_window_function_counts_nothing(tool_lib, patterns, tmp_path):
    out = tmp_path / "none.out"
    subprocess.run(["valgrind", "-q", "--tool=memhazard", "--window-fn=fwd_burst", f"--out-file={out}", str(patterns)],
                   check=True, env={**os.environ, "VALGRIND_LIB": str(tool_lib)}, timeout=60)
    report = parse_report(out.read_text())
    assert report.windows == 0 and report.instructions == 0  # the sim backend turns this into a clear error


def test_without_the_sdk_the_error_says_what_is_missing(tmp_path, monkeypatch):
    with pytest.raises(ToolUnavailable, match="valgrind's own files"):
        memhazard_lib(tmp_path, libexec=tmp_path / "no-valgrind-here")
    monkeypatch.setenv("PATH", str(tmp_path))  # no valgrind on the PATH at all
    with pytest.raises(ToolUnavailable, match="apt-get install valgrind"):
        memhazard_lib(tmp_path)


def test_family_follows_cpuid_and_falls_back_to_the_default():
    def cpu(vendor: str, family: int, model: int) -> CpuId:
        return CpuId(vendor, family, model, 1, "", None, frozenset())

    assert family_for(cpu("GenuineIntel", 6, 0x8F)).name == "intel-spr"
    assert family_for(cpu("GenuineIntel", 6, 0x6A)).name == "intel-icx"
    assert family_for(cpu("AuthenticAMD", 0x19, 0x11)).name == "amd-zen4"
    unknown = family_for(cpu("AuthenticAMD", 0x17, 0x31))  # Zen 2: not modelled
    assert unknown.default and unknown.name == DEFAULT_FAMILY and "not a modelled family" in unknown.reason
    assert family_for(cpu("AuthenticAMD", 0x17, 0x31), "amd-zen4").name == "amd-zen4"
    with pytest.raises(ValueError, match="unknown store-buffer family"):
        family_for(cpu("GenuineIntel", 6, 0x8F), "p4")


REPORT_TEXT = "\n".join([
    "memhazard 4", "family intel-icx", "store_buffer 72", "rob 352", "window_fn fwd_burst", "commit_rule time",
    "width 5", "commit_rate 2", "latency 11", "windows 2",
    "instructions 100", "loads 10", "stores 5", "drains 2", "mfence 1", "lfence 3", "sfence 0", "rdtscp 0",
    "serializing 0", "locked 1", "sf_blocked 4", "sf_forwarded 1", "split_loads 0",
    "split_stores 0", "alias_4k 2", "line_transfers 4", "read_transfers 1", "forwarding_threads 2",
    "lines_tracked 10", "untracked_lines 0", "untracked_thread_accesses 0", "logged_accesses 99", "late_accesses 0",
    "site sf_blocked 3 dist=4,9,40 | 0x10C23C: _mm_blend_epi16 (/usr/lib/gcc/x86_64-linux-gnu/12/include/smmintrin.h:168)"
    " | 0x10C23C: mac_rewrite (/src/dataplane/src/fwd.c:110) | 0x10C23C: fwd_burst (/src/dataplane/src/fwd.c:198)",
    "site alias_4k 2 | 0x4A929AB: ??? (in /usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0/librte_net_ring.so.23.0)",
    "site line_transfers 4 | 0x10C300: fwd_burst (/src/dataplane/src/fwd.c:201)",
    "site sf_blocked 1 dist=60,60,60 | 0x10C240: mac_rewrite (/src/dataplane/src/fwd.c:110)",
])


def test_report_parser_names_the_own_source_frame_and_rejects_garbage():
    text = REPORT_TEXT
    r = parse_report(text)
    assert [s.label for s in r.sites] == ["mac_rewrite@fwd.c:110", "???@librte_net_ring.so.23.0", "fwd_burst@fwd.c:201",
                                          "mac_rewrite@fwd.c:110"]
    assert r.commit_rule == "time" and str(r.sites[0].distance) == "4/9/40" and r.sites[1].distance is None
    # two addresses of one line: counts add up, the range spans both, the median is the busier address's
    (merged,) = r.top_sites("sf_blocked", 5)
    assert (merged.count, str(merged.distance)) == (4, "4/9/60")
    assert r.counts["sf_blocked"] == 4 and (r.counts["line_transfers"], r.counts["read_transfers"]) == (4, 1)
    assert r.sharing["forwarding_threads"] == 2 and r.top_sites("line_transfers", 1)[0].count == 4
    assert r.fences == {"mfence": 1, "lfence": 3, "sfence": 0, "rdtscp": 0, "serializing": 0, "locked": 1, "drains": 2}
    with pytest.raises(ValueError, match="not a memhazard output"):
        parse_report("callgrind 1\n")
    with pytest.raises(ValueError, match="another version.*rebuild"):
        parse_report(text.replace("memhazard 4", "memhazard 3"))
    with pytest.raises(ValueError, match="unknown commit_rule 'never'"):
        parse_report(text.replace("commit_rule time", "commit_rule never"))
    with pytest.raises(ValueError, match="a blocked load, and only one, has dist="):
        parse_report(text.replace("site sf_blocked 3 dist=4,9,40 |", "site sf_blocked 3 |"))
    with pytest.raises(ValueError, match="a blocked load, and only one, has dist="):
        parse_report(text.replace("site line_transfers 4 |", "site line_transfers 4 dist=1,1,1 |"))
    with pytest.raises(ValueError, match="lacks 'line_transfers'"):
        parse_report(text.replace("line_transfers 4\n", ""))
    with pytest.raises(ValueError, match="lacks 'windows'"):
        parse_report(text.replace("windows 2\n", ""))
    with pytest.raises(ValueError, match="malformed site"):
        parse_report(text + "\nsite sf_blocked x | nonsense")


def test_the_sim_backend_records_its_commit_rule_and_the_block_distances():
    raw = hazard_raw(parse_report(REPORT_TEXT), FamilyChoice("intel-icx", False, "set in the config"))
    assert raw["sim.hz_commit_rule.time"] == 1.0 and recorded_commit_rule(raw) == "time"
    assert recorded_commit_rule({"sim.hz_family.intel-icx": 1.0}) == "rob"  # measured before the rule was recorded
    # the two addresses of mac_rewrite@fwd.c:110 as one site: 4 blocks, 4 to 60 instructions back, median 9
    assert {k: v for k, v in raw.items() if k.startswith(DISTANCE_PREFIX)} == {
        "sim.sf_dist_min.mac_rewrite@fwd.c:110": 4.0, "sim.sf_dist_median.mac_rewrite@fwd.c:110": 9.0,
        "sim.sf_dist_max.mac_rewrite@fwd.c:110": 60.0}
    assert raw["sim.site.sf_blocks.mac_rewrite@fwd.c:110"] == 4.0
    assert hazard_sites({**raw, "sim.fwd_packets": 4.0})[("sf_blocks", "mac_rewrite@fwd.c:110")] == 1.0  # no distance as a site
    assert SimBackend(cache_sim=False).commit_rule == DEFAULT_COMMIT_RULE == "time"
    with pytest.raises(ValueError, match="unknown store-commit rule 'never'"):
        SimBackend(cache_sim=False, commit_rule="never")
