"""Simulated memory hazards per packet of the dataplane and of each known regression
(dataplane/regressions/*.patch): the table in dataplane/README.md.

Each tree is the current dataplane/ with one patch applied, built like the agent builds it, and
measured by the ``sim`` backend (one memhazard pass; deterministic, so one run each).

Usage: .venv/bin/python benchmarks/hazards/run.py [--family intel-icx|intel-spr|intel-skx|amd-zen4] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from perfci_agent.backends.sim import SimBackend
from perfci_agent.measure import default_core
from perfci_agent.workspace import compile_tree
from perfci_core.result import BenchConfig

DATAPLANE = Path(__file__).resolve().parents[2] / "dataplane"
COLUMNS = ("ipp", "sf_blocks_pp", "split_loads_pp", "split_stores_pp", "alias_4k_pp")


def measure_tree(patch: Path | None, scratch: Path, backend: SimBackend) -> tuple[dict[str, float], dict[str, float]]:
    root = scratch / (patch.stem if patch else "baseline")
    top_builds = lambda d, names: [n for n in names if Path(d) == DATAPLANE and n.startswith("build")]  # noqa: E731
    shutil.copytree(DATAPLANE, root / "dataplane", ignore=top_builds)
    if patch:
        subprocess.run(["git", "apply", str(patch)], cwd=root, check=True)
    binary = compile_tree(root / "dataplane", root / "build")
    sample = backend.sample(binary, default_core(), backend.config_for(BenchConfig()), root / "dataplane", rep=0)
    sites = {k: v for k, v in sample.raw.items() if k.startswith("sim.site.sf_blocks.")}
    return {m.metric: m.value for m in sample.metrics}, sites


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    backend = SimBackend(cache_sim=False, family=args.family)
    rows = []
    with tempfile.TemporaryDirectory(prefix="perfci-hazards-") as tmp:
        for patch in [None, *sorted((DATAPLANE / "regressions").glob("*.patch"))]:
            values, sites = measure_tree(patch, Path(tmp), backend)
            where = max(sites, key=sites.get).split(".", 3)[3] if sites else ""
            rows.append({"tree": patch.stem if patch else "baseline", **{c: values.get(c) for c in COLUMNS}, "sf_blocks_at": where})
    if args.json:
        print(json.dumps({"family": backend.family.name, "rows": rows}, indent=2))
        return
    print(f"store-buffer model: {backend.family.name} ({backend.family.reason}); self-64B, sim packet counts")
    print("| tree | IPP | sf blocks/pkt | split loads/pkt | split stores/pkt | 4K aliases/pkt | blocks mostly at |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['tree']} | {r['ipp']:.2f} | {r['sf_blocks_pp']:.3f} | {r['split_loads_pp']:.3f} | "
              f"{r['split_stores_pp']:.3f} | {r['alias_4k_pp']:.3f} | {r['sf_blocks_at'] or '—'} |")


if __name__ == "__main__":
    main()
