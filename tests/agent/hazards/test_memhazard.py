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
from perfci_agent.hazards import DEFAULT_FAMILY, ToolUnavailable, family_for, memhazard_lib, parse_report

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
    # evicted: the load's store has three younger stores behind it (and is 4 instructions back)
    assert run(run_window, patterns, tmp_path, "evicted").counts["sf_forwarded"] == CALLS
    assert run(run_window, patterns, tmp_path, "evicted", "--store-buffer=4").counts["sf_forwarded"] == CALLS
    for small in ("--store-buffer=3", "--rob=3"):
        gone = run(run_window, patterns, tmp_path, "evicted", small).counts
        assert gone["sf_forwarded"] == 0 and gone["sf_blocked"] == 0, small  # committed: read from the cache


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


def test_report_parser_names_the_own_source_frame_and_rejects_garbage():
    text = "\n".join([
        "memhazard 3", "family intel-icx", "store_buffer 72", "rob 352", "window_fn fwd_burst", "windows 2",
        "instructions 100", "loads 10", "stores 5", "drains 2", "mfence 1", "lfence 3", "sfence 0", "rdtscp 0",
        "serializing 0", "locked 1", "sf_blocked 3", "sf_forwarded 1", "split_loads 0",
        "split_stores 0", "alias_4k 2", "line_transfers 4", "read_transfers 1", "forwarding_threads 2",
        "lines_tracked 10", "untracked_lines 0", "untracked_thread_accesses 0", "logged_accesses 99", "late_accesses 0",
        "site sf_blocked 3 | 0x10C23C: _mm_blend_epi16 (/usr/lib/gcc/x86_64-linux-gnu/12/include/smmintrin.h:168)"
        " | 0x10C23C: mac_rewrite (/src/dataplane/src/fwd.c:110) | 0x10C23C: fwd_burst (/src/dataplane/src/fwd.c:198)",
        "site alias_4k 2 | 0x4A929AB: ??? (in /usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0/librte_net_ring.so.23.0)",
        "site line_transfers 4 | 0x10C300: fwd_burst (/src/dataplane/src/fwd.c:201)",
    ])
    r = parse_report(text)
    assert [s.label for s in r.sites] == ["mac_rewrite@fwd.c:110", "???@librte_net_ring.so.23.0", "fwd_burst@fwd.c:201"]
    assert r.counts["sf_blocked"] == 3 and (r.counts["line_transfers"], r.counts["read_transfers"]) == (4, 1)
    assert r.sharing["forwarding_threads"] == 2 and r.top_sites("line_transfers", 1)[0].count == 4
    assert r.fences == {"mfence": 1, "lfence": 3, "sfence": 0, "rdtscp": 0, "serializing": 0, "locked": 1, "drains": 2}
    with pytest.raises(ValueError, match="not a memhazard output"):
        parse_report("callgrind 1\n")
    with pytest.raises(ValueError, match="another version.*rebuild"):
        parse_report(text.replace("memhazard 3", "memhazard 2"))
    with pytest.raises(ValueError, match="lacks 'line_transfers'"):
        parse_report(text.replace("line_transfers 4\n", ""))
    with pytest.raises(ValueError, match="lacks 'windows'"):
        parse_report(text.replace("windows 2\n", ""))
    with pytest.raises(ValueError, match="malformed site"):
        parse_report(text + "\nsite sf_blocked x | nonsense")
