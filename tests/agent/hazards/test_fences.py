"""memhazard's fences: which instructions drain the store buffer and which only order.

Each function of ``fences.c`` makes a 4-byte store, one fencing instruction, then an 8-byte load
over the store, and runs 1000 times: the load is blocked (once per call) exactly when the fence
leaves the store in the buffer. The rules and their sources are in the tool (mh_main.c, "Fences").
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CALLS = 1000
NO_FENCES = {"mfence": 0, "lfence": 0, "sfence": 0, "rdtscp": 0, "serializing": 0, "locked": 0, "drains": 0}


@pytest.fixture(scope="session")
def fences(tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("fences") / "fences"
    subprocess.run(["cc", "-O2", "-g", "-o", str(exe), str(HERE / "fences.c")], check=True)
    return exe


# window: (blocked loads per call, the fence counted, whether it drained the buffer)
CASES = {
    "no_fence": (1, None, False),
    "lfence": (1, "lfence", False),  # orders loads only: the wider load still finds the store
    "sfence": (1, "sfence", False),  # orders stores only
    "rdtscp": (1, "rdtscp", False),  # waits for older loads, not for stores to commit
    "mfence": (0, "mfence", True),
    "locked_add": (0, "locked", True),
    "xchg_mem": (0, "locked", True),  # XCHG with memory is locked without a prefix
    "cpuid": (0, "serializing", True),
}


@pytest.mark.parametrize("window", CASES)
def test_each_fence_drains_the_store_buffer_or_only_orders(run_window, fences, tmp_path, window):
    blocked, fence, drains = CASES[window]
    report = run_window(fences, tmp_path, window)
    assert report.windows == CALLS
    assert (report.counts["sf_blocked"], report.counts["sf_forwarded"]) == (blocked * CALLS, 0)
    expected = dict(NO_FENCES)
    if fence:
        expected[fence] = CALLS
    expected["drains"] = CALLS if drains else 0
    assert report.fences == expected
    if blocked:
        (site,) = report.top_sites("sf_blocked", 5)
        assert site.function == window and site.where.startswith("fences.c:")


def test_a_locked_instruction_on_the_stores_bytes_waits_for_the_drain_and_commits_its_own_store(
        run_window, fences, tmp_path):
    # a 2-byte store, lock add of 4 bytes over it, an 8-byte load: the locked load is neither blocked
    # nor forwarded (the buffer drained first), and the locked store is not in the buffer for the load
    report = run_window(fences, tmp_path, "locked_same_address")
    assert (report.counts["sf_blocked"], report.counts["sf_forwarded"]) == (0, 0)
    assert report.fences == {**NO_FENCES, "locked": CALLS, "drains": CALLS}
    # loads: the locked add's (one, though VEX gives it a load and a compare-and-swap), the 8-byte one, ret's
    assert (report.loads, report.stores) == (3 * CALLS, 2 * CALLS)
