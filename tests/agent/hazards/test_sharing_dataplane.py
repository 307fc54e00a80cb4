"""Cache-line transfers between lcores on the real dataplane, by the sim backend.

The baseline and regression (g) (a counter every lcore increments per packet) are built like the
agent builds them and run under memhazard on one and on two lcores.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from perfci_agent.backends.sim import SimBackend
from perfci_agent.errors import RunFailed
from perfci_agent.measure import default_core
from perfci_agent.workspace import compile_tree
from perfci_core.metrics import hazard_sites
from perfci_core.result import BenchConfig

DATAPLANE = Path(__file__).resolve().parents[3] / "dataplane"
CONFIG = BenchConfig()  # as the sim backend runs it: 100 000 packets, 2 000 of warm-up


# Where each lcore enters its poll loop: `late_start` sleeps one lcore there first.
LOOP_START = "\tprev = rte_rdtsc();\n\twhile (!force_quit) {"


def late_start(lcore: str) -> str:
    """A sleep of 30 ms before the poll loop of the main lcore or of the worker: the other starts first."""
    test = {"main": "==", "worker": "!="}[lcore]
    return f"\tif (rte_lcore_id() {test} rte_get_main_lcore())\n\t\trte_delay_us_sleep(30000);\n{LOOP_START}"


def _tree(root: Path, patch: str | None, late: str | None = None) -> Path:
    def top_builds(d, names):
        return [n for n in names if Path(d) == DATAPLANE and n.startswith("build")]
    shutil.copytree(DATAPLANE, root / "dataplane", ignore=top_builds)
    if patch:
        subprocess.run(["git", "apply", str(DATAPLANE / "regressions" / patch)], cwd=root, check=True)
    if late:
        lcore_c = root / "dataplane" / "src" / "lcore.c"
        source = lcore_c.read_text()
        assert source.count(LOOP_START) == 1, "lcore_main's loop start moved: update LOOP_START"
        lcore_c.write_text(source.replace(LOOP_START, late_start(late)).replace(
            "#include <rte_ethdev.h>", "#include <rte_ethdev.h>\n#include <rte_lcore.h>"))
    return compile_tree(root / "dataplane", root / "build")


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> dict[str, Path]:
    return {"base": _tree(tmp_path_factory.mktemp("base"), None),
            "g": _tree(tmp_path_factory.mktemp("g"), "g-shared-counter.patch")}


# Tool bookkeeping, not counts: how many accesses it logged for reordering depends on when valgrind
# switched threads (a thread in a system call leaves the rotation), which is what the lockstep
# ordering makes the counts independent of.
BOOKKEEPING = {"sim.hz_logged_accesses"}


def differences(a, b) -> dict[str, tuple]:
    return {k: (a.get(k), b.get(k)) for k in a.keys() | b.keys() if k not in BOOKKEEPING and a.get(k) != b.get(k)}


def sample(binary: Path, lcores: int, tmp_path: Path):
    backend = SimBackend(cache_sim=False, lcores=lcores)
    return backend.sample(binary, default_core(), backend.config_for(CONFIG), DATAPLANE, rep=0)


def transfer_sites(raw) -> dict[str, float]:
    return {site: v for (kind, site), v in hazard_sites(raw).items() if kind == "line_transfers"}


def test_the_shared_counter_moves_its_line_between_two_lcores_and_not_on_one(trees, tmp_path):
    one = sample(trees["g"], 1, tmp_path)
    assert one.raw["sim.line_transfers"] == 0 and one.raw["sim.read_transfers"] == 0  # one lcore: nothing to share
    two = sample(trees["g"], 2, tmp_path)
    sites = transfer_sites(two.raw)
    counter = {s: v for s, v in sites.items() if s.startswith("forward_one@fwd.c:")}
    assert len(counter) == 1, sites  # the one increment the patch adds
    # lockstep lcores: most increments find the line in the other lcore (see dataplane/README.md)
    assert 0.3 < next(iter(counter.values())) <= 1.0
    again = sample(trees["g"], 2, tmp_path)
    assert differences(again.raw, two.raw) == {}  # every count bit-identical run to run


@pytest.mark.parametrize("late", ["main", "worker"])
def test_the_counts_of_two_lcores_do_not_depend_on_which_starts_first(trees, tmp_path, late):
    """valgrind runs one thread at a time: an lcore that starts 30 ms late (a busy host delays one
    thread's start the same way) forwards the same packets and the tool starts it at the same time."""
    on_time = sample(trees["g"], 2, tmp_path)
    delayed = sample(_tree(tmp_path / "late", "g-shared-counter.patch", late), 2, tmp_path)
    assert delayed.raw["sim.line_transfers"] > 0
    assert differences(delayed.raw, on_time.raw) == {}


def test_the_baseline_moves_no_line_between_lcores(trees, tmp_path):
    two = sample(trees["base"], 2, tmp_path)
    assert two.raw["sim.lcores"] == 2 and two.raw["sim.hz_forwarding_threads"] == 2
    # each lcore has a net_ring port of its own (its packet counters on no line another lcore writes)
    assert (two.raw["sim.line_transfers"], two.raw["sim.read_transfers"]) == (0, 0), transfer_sites(two.raw)


def test_the_baseline_s_whole_poll_loop_shares_nothing_per_packet(trees, tmp_path):
    """RX, forwarding, TX and the harness's refill (memhazard's window widened to lcore_main): on two
    lcores only the measurement window's edges move a line (a handful in all), nothing per packet."""
    backend = SimBackend(cache_sim=False, lcores=2, window_fn="lcore_main")
    two = backend.sample(trees["base"], default_core(), backend.config_for(CONFIG), DATAPLANE, rep=0)
    assert two.raw["sim.hz_forwarding_threads"] == 2 and two.raw["sim.fwd_packets"] > CONFIG.as_run_by("sim").packets
    assert two.raw["sim.line_transfers"] + two.raw["sim.read_transfers"] < 20, transfer_sites(two.raw)
    edges = ("finish@lcore.c", "lcore_main@lcore.c", "window_done@lcore.c", "note_end@lcore.c", "sync_open@lcore.c")
    assert all(site.startswith(edges) for site in transfer_sites(two.raw)), transfer_sites(two.raw)


def test_more_lcores_than_cpus_is_a_clear_error(trees, tmp_path):
    with pytest.raises(RunFailed, match="lcores asked for.*one CPU number per lcore"):
        sample(trees["base"], 64, tmp_path)
