"""Simulated memory hazards per packet of the dataplane and of each known regression
(dataplane/regressions/*.patch): the table in dataplane/README.md.

Each tree is the current dataplane/ with one patch applied, built like the agent builds it, and
measured by the ``sim`` backend (one memhazard pass; deterministic, so one run each), on each
lcore count of ``--lcores`` (cache-line transfers between lcores need two or more), with the
default store-commit rule. A second table sets the two store-commit rules (``rob`` and ``time``,
memhazard's "Store commit") side by side, one row per tree on one lcore: the store-buffer hazards
(blocks, 4K aliases) and, at the site with the most blocks, the distances in instructions from the
blocked load back to its store (min/median/max). Line transfers do not depend on the rule.

Usage: .venv/bin/python benchmarks/hazards/run.py [--family intel-icx|intel-spr|intel-skx|amd-zen4]
       [--lcores 1,2] [--json] [--smoke]

The run fails (exit 1) when a sample lacks a column or counts no instruction, or when no tree shows a
store-forward block (regression (a) makes one per packet): a simulator that counts nothing would
print a table of zeros. ``--smoke``: the baseline tree alone on one lcore, both commit rules.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from perfci_agent.backends.sim import DISTANCE_PREFIX, SimBackend, block_distances
from perfci_agent.hazards import COMMIT_RULES, DEFAULT_COMMIT_RULE
from perfci_agent.measure import default_core
from perfci_agent.workspace import compile_tree
from perfci_core.result import BenchConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: the benchmarks package
from benchmarks.premise import require

DATAPLANE = Path(__file__).resolve().parents[2] / "dataplane"
COLUMNS = ("ipp", "sf_blocks_pp", "split_loads_pp", "split_stores_pp", "alias_4k_pp", "line_transfers_pp", "read_transfers_pp")
RULE_COLUMNS = ("sf_blocks_pp", "alias_4k_pp")  # the store-buffer hazards, which the commit rule moves


def build_tree(patch: Path | None, scratch: Path) -> tuple[Path, Path]:
    root = scratch / (patch.stem if patch else "baseline")
    def top_builds(d, names):
        return [n for n in names if Path(d) == DATAPLANE and n.startswith("build")]
    shutil.copytree(DATAPLANE, root / "dataplane", ignore=top_builds)
    if patch:
        subprocess.run(["git", "apply", str(patch)], cwd=root, check=True)
    return compile_tree(root / "dataplane", root / "build"), root / "dataplane"


def measure(binary: Path, workdir: Path, backend: SimBackend) -> tuple[dict[str, float], dict[str, float]]:
    """(metrics, raw keys of the sites and their block distances) of one sim sample."""
    sample = backend.sample(binary, default_core(), backend.config_for(BenchConfig()), workdir, rep=0)
    sites = {k: v for k, v in sample.raw.items() if k.startswith(("sim.site.", DISTANCE_PREFIX)) and v is not None}
    return {m.metric: m.value for m in sample.metrics}, sites


def top_site(sites: dict[str, float], hazard: str) -> str:
    """``function@file:line`` with the most events of ``hazard`` ("" when none)."""
    mine = {k.split(".", 3)[3]: v for k, v in sites.items() if k.startswith("sim.site.") and k.split(".")[2] == hazard}
    return max(mine, key=mine.get) if mine else ""


def rule_row(tree: str, by_rule: dict[str, tuple[dict[str, float], dict[str, float]]]) -> dict:
    row: dict = {"tree": tree}
    for rule, (values, sites) in by_rule.items():
        at = top_site(sites, "sf_blocks")
        row.update({f"{c}@{rule}": values.get(c) for c in RULE_COLUMNS})
        row.update({f"sf_blocks_at@{rule}": at, f"distance@{rule}": block_distances(sites).get(at, "")})
    return row


def print_rule_table(rows: list[dict], family: str) -> None:
    print(f"\nstore-commit rules side by side ({family}, 1 lcore); distance: instructions from the blocked load "
          "back to its store at the top site, min/median/max")
    rules = COMMIT_RULES[::-1]  # rob, then time
    head = " | ".join(f"{c} {r}" for c in ("sf blocks/pkt", "4K aliases/pkt") for r in rules)
    print(f"| tree | {head} | blocks mostly at ({' / '.join(rules)}) | distance {rules[0]} | distance {rules[1]} |")
    print("|---|" + "---|" * (2 * len(rules) + 3))
    for r in rows:
        cells = " | ".join(f"{r[f'{c}@{rule}']:.3f}" for c in RULE_COLUMNS for rule in rules)
        sites = " / ".join(r[f"sf_blocks_at@{rule}"] or "—" for rule in rules)
        dists = " | ".join(r[f"distance@{rule}"] or "—" for rule in rules)
        print(f"| {r['tree']} | {cells} | {sites} | {dists} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default=None)
    ap.add_argument("--lcores", default="1,2", help="lcore counts to run each tree on, comma-separated")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="the baseline tree alone on one lcore")
    args = ap.parse_args()
    if args.smoke:
        args.lcores = "1"
    counts = [int(n) for n in args.lcores.split(",")]
    patches = [] if args.smoke else sorted((DATAPLANE / "regressions").glob("*.patch"))
    rows, rule_rows = [], []
    with tempfile.TemporaryDirectory(prefix="perfci-hazards-") as tmp:
        for patch in [None, *patches]:
            tree = patch.stem if patch else "baseline"
            binary, workdir = build_tree(patch, Path(tmp))
            by_rule = {}
            for n in counts:
                backend = SimBackend(cache_sim=False, family=args.family, lcores=n)
                print(f"{tree} on {n} lcore(s)...", file=sys.stderr, flush=True)
                values, sites = measure(binary, workdir, backend)
                missing = [c for c in COLUMNS if values.get(c) is None]
                require(not missing and values["ipp"] > 0, f"{tree} on {n} lcore(s): ipp {values.get('ipp')}, no value for {missing}")
                if n == 1:
                    by_rule[DEFAULT_COMMIT_RULE] = (values, sites)
                rows.append({"tree": tree, "lcores": n, **{c: values.get(c) for c in COLUMNS},
                             "sf_blocks_at": top_site(sites, "sf_blocks"), "line_transfers_at": top_site(sites, "line_transfers")})
            for rule in COMMIT_RULES:
                if rule not in by_rule:
                    print(f"{tree} on 1 lcore, commit rule {rule}...", file=sys.stderr, flush=True)
                    by_rule[rule] = measure(binary, workdir, SimBackend(cache_sim=False, family=args.family, commit_rule=rule))
            rule_rows.append(rule_row(tree, by_rule))
    if patches:
        require(any(r["sf_blocks_pp"] > 0 for r in rows), "no tree shows a store-forward block: the simulator counted none")
    family = SimBackend(cache_sim=False, family=args.family).family
    if args.json:
        print(json.dumps({"family": family.name, "commit_rule": DEFAULT_COMMIT_RULE, "rows": rows, "rules": rule_rows}, indent=2))
        return
    print(f"store-buffer model: {family.name} ({family.reason}), store-commit rule {DEFAULT_COMMIT_RULE}; "
          "self-64B, sim packet counts")
    print("| tree | lcores | IPP | sf blocks/pkt | split loads/pkt | split stores/pkt | 4K aliases/pkt | line transfers/pkt "
          "| read transfers/pkt | blocks mostly at | transfers mostly at |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['tree']} | {r['lcores']} | {r['ipp']:.2f} | {r['sf_blocks_pp']:.3f} | {r['split_loads_pp']:.3f} | "
              f"{r['split_stores_pp']:.3f} | {r['alias_4k_pp']:.3f} | {r['line_transfers_pp']:.3f} | {r['read_transfers_pp']:.3f} | "
              f"{r['sf_blocks_at'] or '—'} | {r['line_transfers_at'] or '—'} |")
    print_rule_table(rule_rows, family.name)


if __name__ == "__main__":
    main()
