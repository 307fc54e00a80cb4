"""The explanation of real regressions of the dataplane, measured by the sim backend: regression (d) (the
ttl_decrement helper forced out of line) by the functions whose instructions moved, a head with two
store-forward blocks ((f), then (a) on top of it) by both sites, and the shared counter of (g) on two
lcores by its line-sharing site. Each tree is built as the agent builds a commit."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from perfci_agent.backends.sim import SimBackend
from perfci_agent.measure import default_core
from perfci_agent.workspace import compile_tree
from perfci_core.analysis.explain import explain, function_moves, sharing_text, why
from perfci_core.metrics import derive_sim, function_instructions, hazard_sites
from perfci_core.result import BenchConfig

pytestmark = pytest.mark.dataplane
DATAPLANE = Path(__file__).resolve().parents[3] / "dataplane"
PATCHES = DATAPLANE / "regressions"
CONFIG = BenchConfig()  # as the sim backend runs it: 100 000 packets, 2 000 of warm-up


def _tree(root: Path, *patches: tuple[str, ...]) -> Path:
    """dataplane/ with ``patches`` applied in order, each ``(patch, *git apply options)``, built."""
    top_builds = lambda d, names: [n for n in names if Path(d) == DATAPLANE and n.startswith("build")]  # noqa: E731
    shutil.copytree(DATAPLANE, root / "dataplane", ignore=top_builds)
    for patch, *options in patches:
        subprocess.run(["git", "apply", *options, str(PATCHES / patch)], cwd=root, check=True, capture_output=True)
    return compile_tree(root / "dataplane", root / "build")


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> dict[str, Path]:
    return {"base": _tree(tmp_path_factory.mktemp("base")),
            "d": _tree(tmp_path_factory.mktemp("d"), ("d-helper-out-of-line.patch",)),
            # (a)'s context overlaps (f)'s changed line: applied with one line of context
            "f+a": _tree(tmp_path_factory.mktemp("fa"), ("f-ttl-word-over-checksum.patch",), ("a-store-forward-block.patch", "-C1")),
            "g": _tree(tmp_path_factory.mktemp("g"), ("g-shared-counter.patch",))}


def measured(binary: Path, lcores: int = 1) -> dict:
    backend = SimBackend(cache_sim=False, lcores=lcores)
    raw = backend.sample(binary, default_core(), backend.config_for(CONFIG), DATAPLANE, rep=0).raw
    return {"raw": raw, "values": derive_sim(raw), "sites": hazard_sites(raw), "functions": function_instructions(raw)}


def where(before: dict, after: dict) -> dict:
    return {"sites_before": before["sites"], "sites_after": after["sites"],
            "functions_before": before["functions"], "functions_after": after["functions"]}


@pytest.fixture(scope="module")
def base(trees) -> dict:
    return measured(trees["base"])


def test_the_functions_cover_the_window_and_repeat_bit_for_bit(trees, base):
    functions = {k: v for k, v in base["raw"].items() if k.startswith("sim.fn")}
    assert sum(functions.values()) == base["raw"]["sim.fwd_instructions"]  # every instruction, once
    assert "sim.fn.fwd_burst" in functions and "sim.fn_other" not in functions
    again = measured(trees["base"])
    assert {k: v for k, v in again["raw"].items() if k.startswith("sim.fn")} == functions


def test_regression_d_is_explained_by_its_out_of_line_helper(trees, base):
    d = measured(trees["d"])
    moves = {m.function: m for m in function_moves(base["functions"], d["functions"])}
    assert set(moves) == {"ttl_decrement", "fwd_burst"}
    assert moves["ttl_decrement"].before == 0 and moves["ttl_decrement"].delta > 0  # now a function of its own
    assert moves["fwd_burst"].delta < 0  # its body left fwd_burst; the call and return stayed
    ipp_move = d["values"]["ipp"] - base["values"]["ipp"]
    assert moves["ttl_decrement"].delta + moves["fwd_burst"].delta == pytest.approx(ipp_move, abs=1e-9)
    text = why("ipp", base["values"], d["values"], **where(base, d))
    assert f"in ttl_decrement (new), \u2212{abs(moves['fwd_burst'].delta):.1f} in fwd_burst)" in text, text
    sentence = explain(base["values"], d["values"], **where(base, d)).sentence
    assert sentence.startswith(text) and "4K" not in sentence, sentence


def test_two_store_forward_blocks_name_both_sites(trees, base):
    two = measured(trees["f+a"])
    assert (base["values"]["sf_blocks_pp"], two["values"]["sf_blocks_pp"]) == (0.0, 2.0)
    text = why("sf_blocks_pp", base["values"], two["values"], **where(base, two))
    assert text.startswith("store-forward blocks per packet from zero (0 \u2192 2): +1.0 in "), text
    assert "in mac_rewrite (fwd.c:" in text and "in ttl_decrement (fwd.c:" in text
    assert "mac_rewrite" in explain(base["values"], two["values"], **where(base, two)).sentence
    assert "ttl_decrement" in explain(base["values"], two["values"], **where(base, two)).sentence


def test_the_shared_counter_is_named_where_its_line_moves_between_lcores(trees):
    before, after = measured(trees["base"], lcores=2), measured(trees["g"], lcores=2)
    text = sharing_text(before["values"], after["values"], before["sites"], after["sites"])
    assert text is not None and text.startswith("sim: line transfers per packet "), text
    assert text.count(" in ") == 1 and " in forward_one (fwd.c:" in text  # the one increment the patch adds
