"""Simulated memory hazards per packet of the dataplane and of each known regression
(dataplane/regressions/*.patch): the table in dataplane/README.md.

Each tree is the current dataplane/ with one patch applied, built like the agent builds it, and
measured by the ``sim`` backend (one memhazard pass; deterministic, so one run each), on each
lcore count of ``--lcores`` (cache-line transfers between lcores need two or more).

Usage: .venv/bin/python benchmarks/hazards/run.py [--family intel-icx|intel-spr|intel-skx|amd-zen4]
       [--lcores 1,2] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from perfci_agent.backends.sim import SimBackend
from perfci_agent.measure import default_core
from perfci_agent.workspace import compile_tree
from perfci_core.result import BenchConfig

DATAPLANE = Path(__file__).resolve().parents[2] / "dataplane"
COLUMNS = ("ipp", "sf_blocks_pp", "split_loads_pp", "split_stores_pp", "alias_4k_pp", "line_transfers_pp", "read_transfers_pp")


def build_tree(patch: Path | None, scratch: Path) -> tuple[Path, Path]:
    root = scratch / (patch.stem if patch else "baseline")
    top_builds = lambda d, names: [n for n in names if Path(d) == DATAPLANE and n.startswith("build")]  # noqa: E731
    shutil.copytree(DATAPLANE, root / "dataplane", ignore=top_builds)
    if patch:
        subprocess.run(["git", "apply", str(patch)], cwd=root, check=True)
    return compile_tree(root / "dataplane", root / "build"), root / "dataplane"


def measure(binary: Path, workdir: Path, backend: SimBackend) -> tuple[dict[str, float], dict[str, float]]:
    sample = backend.sample(binary, default_core(), backend.config_for(BenchConfig()), workdir, rep=0)
    sites = {k: v for k, v in sample.raw.items() if k.startswith("sim.site.")}
    return {m.metric: m.value for m in sample.metrics}, sites


def top_site(sites: dict[str, float], hazard: str) -> str:
    """``function@file:line`` with the most events of ``hazard`` ("" when none)."""
    mine = {k.split(".", 3)[3]: v for k, v in sites.items() if k.split(".")[2] == hazard}
    return max(mine, key=mine.get) if mine else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default=None)
    ap.add_argument("--lcores", default="1,2", help="lcore counts to run each tree on, comma-separated")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    counts = [int(n) for n in args.lcores.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="perfci-hazards-") as tmp:
        for patch in [None, *sorted((DATAPLANE / "regressions").glob("*.patch"))]:
            binary, workdir = build_tree(patch, Path(tmp))
            for n in counts:
                backend = SimBackend(cache_sim=False, family=args.family, lcores=n)
                print(f"{patch.stem if patch else 'baseline'} on {n} lcore(s)...", file=sys.stderr, flush=True)
                values, sites = measure(binary, workdir, backend)
                rows.append({"tree": patch.stem if patch else "baseline", "lcores": n, **{c: values.get(c) for c in COLUMNS},
                             "sf_blocks_at": top_site(sites, "sf_blocks"), "line_transfers_at": top_site(sites, "line_transfers")})
    family = SimBackend(cache_sim=False, family=args.family).family
    if args.json:
        print(json.dumps({"family": family.name, "rows": rows}, indent=2))
        return
    print(f"store-buffer model: {family.name} ({family.reason}); self-64B, sim packet counts")
    print("| tree | lcores | IPP | sf blocks/pkt | split loads/pkt | split stores/pkt | 4K aliases/pkt | line transfers/pkt "
          "| read transfers/pkt | blocks mostly at | transfers mostly at |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['tree']} | {r['lcores']} | {r['ipp']:.2f} | {r['sf_blocks_pp']:.3f} | {r['split_loads_pp']:.3f} | "
              f"{r['split_stores_pp']:.3f} | {r['alias_4k_pp']:.3f} | {r['line_transfers_pp']:.3f} | {r['read_transfers_pp']:.3f} | "
              f"{r['sf_blocks_at'] or '—'} | {r['line_transfers_at'] or '—'} |")


if __name__ == "__main__":
    main()
