"""Non-temporal stores in memhazard: nothing forwards from MOVNTI, MOVNTQ, MOVNTDQ, MOVNTPS, MOVNTPD
or their VEX forms, and a load of a line one wrote is counted as a non-temporal reload (its own
metric, named with its site in explanations), on every modelled family.

Each pattern of ``nontemporal.c`` is one function called 1000 times, run with that function as the
tool's window, so every count is exact per call. The disassembly is checked first: each pattern
holds the instruction it is named after (with the encoding the tool must decode)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from perfci_agent.backends.sim import hazard_raw
from perfci_agent.hazards import FamilyChoice
from perfci_core.analysis.explain import explain
from perfci_core.metrics import derive_sim, hazard_sites

HERE = Path(__file__).resolve().parent
CALLS = 1000
FAMILIES = ("intel-icx", "amd-zen4")
# pattern -> the instruction's bytes (prefixes, opcode) and mnemonic as objdump shows them
NT_STORES = {
    "movnti_then_load": ("48 0f c3", "movnti %rax"),
    "movnti32_then_load": ("0f c3", "movnti %eax"),
    "movntq_then_load": ("0f e7", "movntq %mm0"),
    "movntdq_then_load": ("66 0f e7", "movntdq %xmm0"),
    "movntps_then_load": ("0f 2b", "movntps %xmm0"),
    "movntpd_then_load": ("66 0f 2b", "movntpd %xmm0"),
    "vmovntdq_then_load": ("c5 fd e7", "vmovntdq %ymm0"),
    "vmovntps_then_load": ("c5 f8 2b", "vmovntps %xmm0"),
    "vmovntpd_then_load": ("c5 fd 2b", "vmovntpd %ymm0"),
    "vmovntpd_c4_then_load": ("c4 c1 79 2b", "vmovntpd %xmm0"),  # three-byte VEX
}


@pytest.fixture(scope="module")
def nontemporal(tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("nontemporal") / "nontemporal"
    subprocess.run(["cc", "-O2", "-g", "-o", str(exe), str(HERE / "nontemporal.c")], check=True)
    return exe


@pytest.fixture(scope="module")
def disassembly(nontemporal) -> dict[str, str]:
    text = subprocess.run(["objdump", "-d", str(nontemporal)], capture_output=True, text=True, check=True).stdout
    return {m.group(1): m.group(2) for m in re.finditer(r"<(\w+)>:\n(.*?)(?:\n\n|\Z)", text, re.S)}


def per_call(report) -> dict[str, float]:
    return {k: v / CALLS for k, v in {**report.counts, **report.nontemporal}.items()}


def line_of(function: str, needle: str) -> int:
    lines = (HERE / "nontemporal.c").read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"{function}("))
    return next(i for i in range(start, len(lines)) if needle in lines[i]) + 1


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("pattern", NT_STORES)
def test_a_load_of_a_non_temporal_store_is_a_reload_never_forwarded(run_window, nontemporal, disassembly, tmp_path, pattern, family):
    encoding, mnemonic = NT_STORES[pattern]
    assert re.search(rf":\s+{encoding} [0-9a-f ]*\s+{re.escape(mnemonic)},", disassembly[pattern]), disassembly[pattern]
    report = run_window(nontemporal, tmp_path, pattern, f"--family={family}")
    assert report.windows == CALLS and report.family == family
    c = per_call(report)
    assert (c["nt_stores"], c["nt_reloads"], c["sf_forwarded"], c["sf_blocked"], c["nt_untracked"]) == (1, 1, 0, 0, 0), c
    (site,) = report.top_sites("nt_reloads", 5)
    assert (site.function, site.where, site.count) == (pattern, f"nontemporal.c:{line_of(pattern, '(void)')}", CALLS)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_line_left_the_caches_and_one_load_brings_it_back(run_window, nontemporal, tmp_path, family):
    report = run_window(nontemporal, tmp_path, "movnti_then_line", f"--family={family}")
    c = per_call(report)
    # other bytes of the line: one reload; the same line again: none; the next line: none (and ret's load)
    assert (c["nt_reloads"], c["sf_forwarded"], c["sf_blocked"], report.loads / CALLS) == (1, 0, 0, 3 + 1)
    assert report.top_sites("nt_reloads", 5)[0].where == f"nontemporal.c:{line_of('movnti_then_line', 'b + 32')}"


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("pattern, forwarded, blocked", [
    ("movnti_then_store_then_load", 1, 0),  # the ordinary store brought the line back and forwards
    ("plain_store_then_load", 1, 0),
    ("store_then_movntdqa", 0, 1),  # MOVNTDQA: an ordinary 16-byte load over an 8-byte store
])
def test_ordinary_stores_and_loads_keep_their_rules(run_window, nontemporal, tmp_path, pattern, forwarded, blocked, family):
    c = per_call(run_window(nontemporal, tmp_path, pattern, f"--family={family}"))
    assert (c["nt_reloads"], c["sf_forwarded"], c["sf_blocked"]) == (0, forwarded, blocked), c
    assert c["nt_stores"] == (1 if pattern.startswith("movnti") else 0)


def test_the_sim_metric_and_the_explanation_name_the_reload(run_window, nontemporal, tmp_path):
    report = run_window(nontemporal, tmp_path, "movnti_then_load")
    raw = {**hazard_raw(report, FamilyChoice("intel-icx", False, "set in the config")), "sim.fwd_packets": float(CALLS),
           "sim.fwd_instructions": float(report.instructions)}
    assert raw["sim.nt_stores"] == raw["sim.nt_reloads"] == CALLS
    assert derive_sim(raw)["nt_reloads_pp"] == 1.0
    where = f"movnti_then_load@nontemporal.c:{line_of('movnti_then_load', '(void)')}"
    after_sites = hazard_sites(raw)
    assert after_sites[("nt_reloads", where)] == 1.0
    before = {"ipp": derive_sim(raw)["ipp"], "nt_reloads_pp": 0.0}
    sentence = explain(before, {**before, "nt_reloads_pp": 1.0}, sites_before={}, sites_after=after_sites).sentence
    assert "non-temporal reloads per packet from zero (0 \u2192 1)" in sentence and "movnti_then_load (nontemporal.c:" in sentence, sentence
