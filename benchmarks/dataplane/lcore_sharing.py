#!/usr/bin/env python3
"""What the lcores of the dataplane share, counted and timed: the current dataplane/ against its
tree at another revision (``--peer``), two lcores of the self harness.

1. Counted (``sim``, memhazard with the whole poll loop as its window, ``lcore_main``: RX, the
   forwarding, TX and the harness's refill): cache-line transfers between the two lcores per
   packet, and the lines they happen at. Deterministic: one run per tree.
2. Timed (``tsc``): busy TSC cycles per packet at 1 and 2 lcores, both trees in alternating fresh
   processes, with the calibration loop (perfci_agent.clockcal) on the same cores right before each
   run; per tree the medians and ranges of the raw figure and of the calibrated one (busy cycles
   per packet / the throughput loop's cycles per iteration), and the analysis core's verdict on
   the 2-lcore calibrated figure between the trees.

The premise is checked: both lcores forwarded in every run, and a tree whose lcores share a line
per burst shows it in the counted pass (the timed figures are printed whatever the host's load).

    .venv/bin/python benchmarks/dataplane/lcore_sharing.py --peer REV [--pairs 10] [--packets 4000000]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import uuid
from pathlib import Path

from perfci_agent import clockcal
from perfci_agent.backends.sim import SimBackend
from perfci_agent.workspace import compile_tree
from perfci_core.analysis.compare import compare
from perfci_core.metrics import hazard_sites
from perfci_core.result import BenchConfig

REPO = Path(__file__).resolve().parents[2]
DATAPLANE = REPO / "dataplane"


def tree_at(rev: str, dest: Path) -> Path:
    """dataplane/ at ``rev`` (git archive), built like the agent builds it; returns the binary."""
    archive = subprocess.run(["git", "archive", rev, "dataplane"], cwd=REPO, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return compile_tree(dest / "dataplane", dest / "build")


def counted(binary: Path, workdir: Path, cores: list[int]) -> tuple[float, dict[str, float]]:
    """Line transfers per packet over the whole poll loop at two lcores, and per site."""
    backend = SimBackend(cache_sim=False, lcores=2, window_fn="lcore_main")
    sample = backend.sample(binary, cores[0], backend.config_for(BenchConfig()), workdir, rep=0)
    if sample.raw.get("sim.hz_forwarding_threads") != 2:
        raise SystemExit(f"premise: memhazard saw {sample.raw.get('sim.hz_forwarding_threads')} forwarding threads, not 2")
    sites = {site: v for (kind, site), v in hazard_sites(sample.raw).items() if kind == "line_transfers"}
    return sample.raw["sim.line_transfers"] / sample.raw["sim.fwd_packets"], sites


def timed(binary: Path, cores: list[int], packets: int, loop: Path) -> tuple[float, float]:
    """(busy TSC cycles per packet, the same / the throughput loop's cycles per iteration) of one run."""
    cal = clockcal.run(loop, cores)
    lcores = ",".join(map(str, cores))
    proc = subprocess.run(["taskset", "-c", lcores, str(binary), "-l", lcores, "--no-pci", "--no-huge", "-m", "512",
                           f"--file-prefix=s{uuid.uuid4().hex[:12]}", "--log-level=lib.*:error", "--",
                           "--packets", str(packets), "--warmup", "200000"],
                          capture_output=True, text=True, timeout=300, check=True, cwd=DATAPLANE)
    report = json.loads(proc.stdout)
    if any(lc["packets"]["rx"] == 0 for lc in report["lcores"]) or report["window"]["polls"]["empty"]:
        raise SystemExit(f"premise: a run where an lcore did not forward or polled empty: {report['lcores']}")
    w = report["window"]
    cpp = w["cycles"]["busy"] / w["packets"]["rx"]
    return cpp, cpp / cal.throughput


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} ({min(values):.2f}-{max(values):.2f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer", required=True, help="the revision whose dataplane/ is the peer")
    ap.add_argument("--pairs", type=int, default=10, help="alternating runs of each tree per lcore count")
    ap.add_argument("--packets", type=int, default=4_000_000, help="packets per run (the total over the lcores)")
    args = ap.parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0), reverse=True)
    if len(cpus) < 2:
        print("needs two CPUs for two lcores; this process has one: not measured")
        return 2
    cores = cpus[:2]
    with tempfile.TemporaryDirectory(prefix="perfci-sharing-") as tmp_s:
        tmp = Path(tmp_s)
        trees = {"current": compile_tree(DATAPLANE, tmp / "current-build"), args.peer: tree_at(args.peer, tmp / "peer")}
        loop = clockcal.binary(tmp / "tools")
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; lcores on CPUs {cores}; peer {args.peer}")
        print("1. counted (sim, memhazard over lcore_main, 2 lcores, 100 000 packets): line transfers per packet")
        transfers = {}
        for name, binary in trees.items():
            transfers[name], sites = counted(binary, DATAPLANE, cores)
            top = ", ".join(f"{s} {v:.4f}" for s, v in sorted(sites.items(), key=lambda kv: -kv[1])[:3]) or "none"
            print(f"   {name:>12}: {transfers[name]:.4f} (at {top})")
        print(f"2. timed (tsc, {args.pairs} alternating pairs, {args.packets} packets a run): busy cycles per packet, "
              "median (range); calibrated: / the throughput loop's cycles per iteration")
        runs: dict[tuple[str, int], list[tuple[float, float]]] = {(t, n): [] for t in trees for n in (1, 2)}
        for _ in range(args.pairs):
            for n in (1, 2):
                for name, binary in trees.items():
                    runs[(name, n)].append(timed(binary, cores[:n], args.packets, loop))
        for (name, n), values in runs.items():
            print(f"   {name:>12} {n} lcore{'s' if n > 1 else ' '}: cycles/packet {summary([v[0] for v in values])}, "
                  f"calibrated {summary([v[1] for v in values])}")
        peer2, cur2 = [v[1] for v in runs[(args.peer, 2)]], [v[1] for v in runs[("current", 2)]]
        v = compare(peer2, cur2, "cpp", backend="tsc")
        print(f"   2 lcores, calibrated, {args.peer} -> current: {100 * (statistics.median(cur2) / statistics.median(peer2) - 1):+.1f} %: "
              f"{v.verdict.value} {v.kind.value if v.kind else ''}")
        if transfers[args.peer] > 0.01 and transfers["current"] >= transfers[args.peer]:
            print("premise: the peer's lcores share lines and the current dataplane's share as many: nothing to compare")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
