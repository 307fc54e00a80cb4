#!/usr/bin/env python3
"""The timings the tests do not assert (a busy machine cannot fail a test, only a figure):

1. perf's window gating with the dataplane's --perf-ctl/--perf-ack: task-clock counted by
   ``perf stat -D -1 --control fd:..`` over the dataplane's own TSC window (1.0 when the
   forwarding thread had the core for the whole window; less on a loaded host).
2. Regression (b), prefetch removed: tsc cycles/packet of the baseline and the patched build with
   packet data cold (--cold-data), alternating fresh-process runs, and the analysis core's verdict
   (tests/dataplane/test_regressions.py checks the mechanism exactly: one instruction per packet
   fewer). ``--record FILE`` keeps the samples.
3. Regression (g), a counter shared by all lcores: throughput (Mpps over the shared window) of the
   baseline and the patched build on one lcore and on two, alternating fresh-process runs, and the
   verdict on each (one lcore should not move; two should lose throughput). Needs two CPUs.

    .venv/bin/python benchmarks/dataplane/timed_checks.py [--window-runs 5] [--pairs 20] [--record FILE] [--checks 1,2,3]
        [--smoke]

The run fails (exit 1) when perf counted no task-clock in a window or a run forwarded no packet.
``--smoke``: check 1 alone, two runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from perfci_agent import runner
from perfci_agent.workspace import compile_tree
from perfci_core import metrics
from perfci_core.analysis.compare import compare

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: the benchmarks package
from benchmarks.premise import require

REPO = Path(__file__).resolve().parents[2]
DATAPLANE = REPO / "dataplane"
CORE = max(os.sched_getaffinity(0))


def eal() -> list[str]:
    return ["-l", str(CORE), "--no-pci", f"--file-prefix=b{uuid.uuid4().hex[:12]}", "--log-level=lib.*:error",
            "--no-huge", "-m", "512"]


def window_ratio(binary: Path, tmp: Path) -> tuple[float, float]:
    """(counted task-clock ms, the dataplane's window ms) of one gated run."""
    ctl, ack = tmp / f"ctl-{uuid.uuid4().hex[:6]}", tmp / f"ack-{uuid.uuid4().hex[:6]}"
    os.mkfifo(ctl)
    os.mkfifo(ack)
    ctl_fd, ack_fd = os.open(ctl, os.O_RDWR), os.open(ack, os.O_RDWR)
    try:
        proc = subprocess.run(
            ["perf", "stat", "-x,", "-e", "task-clock", "-D", "-1", "--control", f"fd:{ctl_fd},{ack_fd}", "--",
             str(binary), *eal(), "--", "--packets", str(10**12), "--duration", "0.5", "--warmup", "1000000",
             "--perf-ctl", str(ctl_fd), "--perf-ack", str(ack_fd)],
            capture_output=True, text=True, timeout=120, pass_fds=(ctl_fd, ack_fd), check=True)
    finally:
        os.close(ctl_fd)
        os.close(ack_fd)
    task_ms = float(next(ln for ln in proc.stderr.splitlines() if ",task-clock," in ln).split(",")[0])
    report = json.loads(proc.stdout)
    require(task_ms > 0 and report["window"]["packets"]["rx"] > 0, f"perf counted {task_ms} ms of task-clock over a window "
            f"of {report['window']['packets']['rx']} packets")
    return task_ms, report["window"]["cycles"]["window"] / report["tsc_hz"] * 1e3


def cold_cpp(binary: Path) -> float:
    proc = subprocess.run([str(binary), *eal(), "--", "--packets", "2000000", "--warmup", "200000", "--cold-data"],
                          capture_output=True, text=True, timeout=120, check=True)
    require(json.loads(proc.stdout)["window"]["packets"]["rx"] > 0, f"{binary}: a cold-data run forwarded no packet")
    return metrics.derive_tsc(runner.tsc_raw(json.loads(proc.stdout)))["cpp"]


def mpps(binary: Path, cores: list[int]) -> float:
    """Packets per second over the shared window of all lcores (each lcore forwards its share)."""
    lcores = ",".join(map(str, cores))
    args = eal()
    args[args.index("-l") + 1] = lcores
    proc = subprocess.run(["taskset", "-c", lcores, str(binary), *args, "--", "--packets", "4000000", "--warmup", "200000"],
                          capture_output=True, text=True, timeout=120, check=True)
    report = json.loads(proc.stdout)
    w = report["window"]
    require(w["packets"]["rx"] > 0, f"{binary} on lcores {lcores} forwarded no packet")
    return w["packets"]["rx"] / (w["cycles"]["window"] / report["tsc_hz"]) / 1e6


def build_patched(patch: Path, tmp: Path) -> Path:
    root = tmp / patch.stem
    def top_builds(d, names):
        return [n for n in names if d == str(DATAPLANE) and n.startswith("build")]
    shutil.copytree(DATAPLANE, root / "dataplane", ignore=top_builds)
    subprocess.run(["git", "apply", str(patch)], cwd=root, check=True)
    return compile_tree(root / "dataplane", root / "build")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--window-runs", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--record", type=Path, help="write the prefetch samples here (JSON)")
    ap.add_argument("--checks", default="1,2,3", help="which of the checks to run (comma-separated numbers)")
    ap.add_argument("--smoke", action="store_true", help="check 1 alone, two runs")
    args = ap.parse_args(argv)
    if args.smoke:
        args.checks, args.window_runs = "1", 2
    checks = {int(c) for c in args.checks.split(",")}
    with tempfile.TemporaryDirectory(prefix="perfci-timed-") as tmp_s:
        tmp = Path(tmp_s)
        base = compile_tree(DATAPLANE, tmp / "base-build")
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; forwarding core {CORE}")

        ratios = []
        for _ in range(args.window_runs if 1 in checks else 0):
            task_ms, window_ms = window_ratio(base, tmp)
            ratios.append(task_ms / window_ms)
            print(f"  gated task-clock {task_ms:7.1f} ms over a window of {window_ms:7.1f} ms: {task_ms / window_ms:.3f}")
        if ratios:
            print(f"1. task-clock / window: median {statistics.median(ratios):.3f} "
                  f"(range {min(ratios):.3f}-{max(ratios):.3f}, {len(ratios)} runs)")
        if 2 in checks:
            prefetch_check(base, tmp, args, argv)
        if 3 in checks:
            shared_counter_check(base, tmp, args.pairs)
    return 0


def prefetch_check(base: Path, tmp: Path, args: argparse.Namespace, argv: list[str] | None) -> None:
    patched = build_patched(DATAPLANE / "regressions" / "b-prefetch-removed.patch", tmp)
    before, after = [], []
    t0 = time.monotonic()
    for _ in range(args.pairs):
        before.append(cold_cpp(base))
        after.append(cold_cpp(patched))
    v = compare(before, after, "cpp", backend="tsc")
    med_b, med_a = statistics.median(before), statistics.median(after)
    print(f"2. prefetch removed, cold data: cpp {med_b:.2f} -> {med_a:.2f} ({100 * (med_a / med_b - 1):+.1f} %), "
          f"{args.pairs} alternating pairs in {time.monotonic() - t0:.0f} s: {v.verdict.value} {v.kind.value if v.kind else ''}")
    if args.record:
        args.record.write_text(json.dumps({
            "what": "tsc cycles/packet with --cold-data, baseline and regression (b), alternating fresh-process runs",
            "command": "benchmarks/dataplane/timed_checks.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "loadavg_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
            "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "base": [round(x, 4) for x in before], "prefetch_removed": [round(x, 4) for x in after],
        }, indent=1) + "\n")
        print(f"wrote {args.record}")


def shared_counter_check(base: Path, tmp: Path, pairs: int) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("3. shared counter: needs two CPUs, this process has one: not measured")
        return
    shared = build_patched(DATAPLANE / "regressions" / "g-shared-counter.patch", tmp)
    for cores in ([CORE], cpus[-2:]):
        before, after = [], []
        for _ in range(pairs):
            before.append(mpps(base, cores))
            after.append(mpps(shared, cores))
        v = compare(before, after, "pps", backend="tsc")
        med_b, med_a = statistics.median(before), statistics.median(after)
        print(f"3. shared counter on {len(cores)} lcore(s) {cores}: {med_b:.2f} -> {med_a:.2f} Mpps "
              f"({100 * (med_a / med_b - 1):+.1f} %; ranges {min(before):.2f}-{max(before):.2f} and "
              f"{min(after):.2f}-{max(after):.2f}), {pairs} alternating pairs: {v.verdict.value} {v.kind.value if v.kind else ''}")


if __name__ == "__main__":
    sys.exit(main())
