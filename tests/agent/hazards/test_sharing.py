"""memhazard's cache-line sharing model on two threads with known patterns (``sharing.c``).

Each mode runs ROUNDS calls of the window function ``step`` in each of two threads (after one
warm-up call each on a line of its own). The threads do not synchronise: the tool orders their
accesses as two cores running in lockstep would make them (the same number of window
instructions per unit of time), whatever order valgrind ran them in, so the counts below follow
from the pattern alone and are identical run to run, with either of valgrind's scheduler locks.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from perfci_agent.hazards import parse_report

HERE = Path(__file__).resolve().parent
ROUNDS = 1000


@pytest.fixture(scope="session")
def sharing(tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("sharing") / "sharing"
    subprocess.run(["cc", "-O2", "-g", "-pthread", "-o", str(exe), str(HERE / "sharing.c")], check=True)
    return exe


def run(tool_lib: Path, exe: Path, tmp_path: Path, mode: str, fair: str = "yes", name: str | None = None):
    out = tmp_path / f"{name or mode}.out"
    subprocess.run(["valgrind", "-q", "--tool=memhazard", "--window-fn=step", f"--out-file={out}", f"--fair-sched={fair}",
                    "--vex-iropt-register-updates=allregs-at-mem-access", "--read-inline-info=yes", str(exe), mode],
                   check=True, env={**os.environ, "VALGRIND_LIB": str(tool_lib)}, timeout=180)
    report = parse_report(out.read_text())
    threads = 1 if mode == "single" else 2
    assert report.windows == threads * (ROUNDS + 1) and report.sharing["forwarding_threads"] == threads
    assert report.sharing["late_accesses"] == 0 and report.sharing["untracked_lines"] == 0
    return report


def transfers(report) -> tuple[int, int]:
    return report.counts["line_transfers"], report.counts["read_transfers"]


def test_a_counter_both_threads_increment_moves_at_every_increment(tool_lib, sharing, tmp_path):
    # (*p)++ is a load and a store. In lockstep each thread's load comes after the other's
    # store: every increment's store finds the line in the other cache (all but the very
    # first), and one load in two misses it (the other thread's load sits between a thread's
    # load and store in every round, so only the leading thread's load finds it gone).
    report = run(tool_lib, sharing, tmp_path, "counter")
    assert transfers(report) == (2 * ROUNDS - 1, ROUNDS)
    (site,) = report.top_sites("line_transfers", 5)
    assert site.function == "step" and site.where.startswith("sharing.c:") and site.count == 2 * ROUNDS - 1


def test_a_locked_add_is_one_transfer_and_no_read(tool_lib, sharing, tmp_path):
    # lock xadd: its load is part of the store's request for ownership, never a read transfer.
    # Each add takes the line from the other thread, but for the first ones: a locked add is
    # shorter than the warm-up call, so the thread that starts first runs two adds before the
    # other's first.
    line, read = transfers(run(tool_lib, sharing, tmp_path, "atomic"))
    assert read == 0 and 2 * ROUNDS - 3 <= line <= 2 * ROUNDS - 1


def test_a_line_one_thread_writes_and_the_other_reads(tool_lib, sharing, tmp_path):
    # Each write takes the line back from the reader, each read fetches what the writer wrote.
    line, read = transfers(run(tool_lib, sharing, tmp_path, "handoff"))
    assert ROUNDS - 2 <= line <= ROUNDS and ROUNDS - 2 <= read <= ROUNDS


def test_counters_on_lines_of_their_own_move_nothing(tool_lib, sharing, tmp_path):
    assert transfers(run(tool_lib, sharing, tmp_path, "separate")) == (0, 0)


def test_two_counters_in_one_line_move_it_as_one_would(tool_lib, sharing, tmp_path):
    # False sharing: other bytes, same line, same traffic as the shared counter.
    assert transfers(run(tool_lib, sharing, tmp_path, "false")) == (2 * ROUNDS - 1, ROUNDS)


def test_one_thread_alone_moves_nothing(tool_lib, sharing, tmp_path):
    report = run(tool_lib, sharing, tmp_path, "single")
    assert transfers(report) == (0, 0) and report.sharing["logged_accesses"] == 0  # one thread: nothing to order


@pytest.mark.parametrize("mode", ["counter", "false"])
def test_the_counts_do_not_depend_on_how_valgrind_interleaved_the_threads(tool_lib, sharing, tmp_path, mode):
    # Three runs with the ticket lock, two with the pipe lock (which hands the threads over in an
    # order the host kernel picks): the same counts, instructions and per-site figures.
    reports = [run(tool_lib, sharing, tmp_path, mode, fair, f"{mode}-{fair}-{i}")
               for i, fair in enumerate(["yes", "yes", "yes", "no", "no"])]
    first = reports[0]
    for r in reports[1:]:
        assert (r.instructions, r.counts, r.sites) == (first.instructions, first.counts, first.sites)


def test_the_explanation_names_the_transfers_and_where_they_moved():
    from perfci_core.analysis.explain import explain

    before = {"ipp": 65.82, "line_transfers_pp": 0.0, "read_transfers_pp": 0.024}
    after = {"ipp": 66.82, "line_transfers_pp": 0.5, "read_transfers_pp": 0.024}
    e = explain(before, after, sites_before={}, sites_after={("line_transfers", "forward_one@fwd.c:190"): 0.48})
    assert e.cause == "several"  # an instruction more, and a stall
    assert "line transfers per packet from zero (0 \u2192 0.500) in forward_one (fwd.c:190)" in e.sentence
