"""Speed of `perfci measure`:

1. wall time of one full ``sim`` measurement of a commit with a warm build cache (target <= 60 s):
   today's method, ``measure(backend="sim")`` — per repetition one memhazard pass (instructions +
   memory hazards) beside one cachegrind pass on another core — against the previous method,
   reproduced here: per repetition a ``callgrind --toggle-collect=fwd_burst`` pass, then a
   cachegrind pass, one after the other on the forwarding core; same repetitions, same packets.
   The two alternate over ``--repeat`` runs (new, old, new, old, ...) so drift hits both alike;
   min/median/max of each and the ratio of the medians new/old (the target: <= 1). Both
   must count the same instructions of the window: checked and printed.
2. overhead of counting on the forwarding loop: tsc cycles/packet of the dataplane alone vs under
   ``perf stat -C CORE -D -1 --control ...`` with software events (target <= 1 %).
   Runs alternate (plain, counted, plain, ...) so drift hits both arms alike; medians compared.

Usage: .venv/bin/python benchmarks/measure/run.py [--repo PATH] [--commit REV] [--pairs N] [--repeat N] [--smoke]

The run fails (exit 1) when a measurement is not ok, when the two methods count different
instructions of the window (they would not be measuring the same thing), or when a run forwarded
no packet. ``--smoke``: one run per method of one repetition of 20 000 packets, 3 pairs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from perfci_agent import runner
from perfci_agent.backends.pmu import run_counted
from perfci_agent.backends.sim import FWD_FUNCTION, SimBackend, parse_cachegrind_function, parse_callgrind_total
from perfci_agent.measure import CONFIGS, default_core, measure
from perfci_agent.workspace import Workspace, repo_root, resolve_commit
from perfci_core.analysis.compare import Kind, Verdict, compare
from perfci_core.result import BenchConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: the benchmarks package
from benchmarks.premise import require


def cpp(report: dict) -> float:
    w = report["window"]
    require(w["packets"]["rx"] > 0, "a run of the dataplane forwarded no packet")
    return w["cycles"]["busy"] / w["packets"]["rx"]


def previous_sim_measurement(sim: SimBackend, binary: Path, core: int, workdir: Path, reps: int, config: BenchConfig) -> list[int]:
    """The ``sim`` measurement before memhazard: per repetition callgrind (instructions of the
    ``fwd_burst`` window), then cachegrind (caches), sequentially. Returns callgrind's counts."""
    cfg = sim.config_for(config)
    counts = []
    for _ in range(reps):
        with tempfile.TemporaryDirectory(prefix="perfci-bench-") as tmp:
            cl_out, cg_out = Path(tmp) / "callgrind.out", Path(tmp) / "cachegrind.out"
            runner.run(runner.RunSpec(binary, core, cfg, workdir=workdir, timeout=sim.timeout, pin_outer=True, wrapper=[
                sim.valgrind, "-q", "--tool=callgrind", f"--toggle-collect={FWD_FUNCTION}", f"--callgrind-out-file={cl_out}"]))
            counts.append(parse_callgrind_total(cl_out.read_text()))
            runner.run(runner.RunSpec(binary, core, cfg, workdir=workdir, timeout=sim.timeout, pin_outer=True, wrapper=[
                sim.valgrind, "-q", "--tool=cachegrind", "--cache-sim=yes", *sim.geometry.args(), f"--cachegrind-out-file={cg_out}"]))
            parse_cachegrind_function(cg_out.read_text())
    return counts


def spread(xs: list[float]) -> str:
    return f"median {statistics.median(xs):.1f} s [min {min(xs):.1f}, max {max(xs):.1f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=str(Path(__file__).resolve().parents[2]))
    ap.add_argument("--commit", default="HEAD")
    ap.add_argument("--pairs", type=int, default=15)
    ap.add_argument("--repeat", type=int, default=3, help="full sim measurements per method")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--smoke", action="store_true", help="one run per method, one repetition of 20 000 packets, 3 pairs")
    args = ap.parse_args()
    config = CONFIGS["self-64B"]
    if args.smoke:
        args.repeat, args.pairs = 1, 3
        config = config.model_copy(update={"packets": 20_000, "warmup": 2_000})

    root = repo_root(args.repo)
    sha = resolve_commit(root, args.commit)
    ws = Workspace(root, Path(args.cache_dir) if args.cache_dir else None)
    build = ws.build(sha)  # warm the cache (not timed)
    core = default_core()

    sim = SimBackend()
    sim.tool_lib()  # build memhazard now (first use), not inside a timed run
    workdir = build.source
    new_wall, old_wall, new_counts, old_counts = [], [], set(), set()
    reps = 1 if args.smoke else sim.default_reps
    packets = sim.config_for(config).packets

    def today() -> None:
        t0 = time.monotonic()
        doc = measure(root, sha, backend="sim", reps=reps, config=config, cache_dir=ws.cache_dir, core=core,
                      reuse=False)  # simulated, never kept counts
        new_wall.append(time.monotonic() - t0)
        require(doc.status == "ok" and len(doc.samples) == reps and doc.config.packets == packets,
                f"sim measurement: {doc.status} {doc.reason or ''}, {len(doc.samples)} reps of {doc.config.packets} packets")
        new_counts.update(int(s.raw["sim.fwd_instructions"]) for s in doc.samples)

    def previous() -> None:
        t0 = time.monotonic()
        old_counts.update(previous_sim_measurement(sim, build.binary, core, workdir, reps, config))
        old_wall.append(time.monotonic() - t0)

    for i in range(args.repeat):  # alternate which method goes first
        for method in ((today, previous) if i % 2 == 0 else (previous, today)):
            method()
    ratio = statistics.median(new_wall) / statistics.median(old_wall)
    print(f"full sim measurement, warm build cache, {args.repeat} run(s) each, {reps} reps x {packets} packets, core {core}:")
    print(f"  today    (memhazard beside cachegrind, via measure()):          {spread(new_wall)}")
    print(f"  previous (callgrind --toggle-collect={FWD_FUNCTION} then cachegrind): {spread(old_wall)}")
    print(f"  new/old (medians) {ratio:.2f}  target <= 1: {'PASS' if ratio <= 1 else 'FAIL'};  "
          f"today's median <= 60 s: {'PASS' if statistics.median(new_wall) <= 60 else 'FAIL'}")
    same = len(new_counts) == 1 and new_counts == old_counts
    print(f"  instructions of the {FWD_FUNCTION} window: memhazard {sorted(new_counts)}, callgrind {sorted(old_counts)} -> "
          f"{'identical' if same else 'DIFFERENT'}")
    require(same and min(new_counts) > 0, "the two methods did not count the same instructions of the window")

    cfg = CONFIGS["self-64B"]
    plain, counted = [], []
    for _ in range(args.pairs):
        plain.append(cpp(runner.run(runner.RunSpec(build.binary, core, cfg, workdir=workdir)).report))
        run = run_counted(runner.RunSpec(build.binary, core, cfg, workdir=workdir), "task-clock,context-switches,page-faults")
        counted.append(cpp(run.result.report))
    mp, mc = statistics.median(plain), statistics.median(counted)
    overhead = (mc - mp) / mp * 100
    print(f"counting overhead ({args.pairs} alternating pairs, {cfg.packets} packets each, core {core}): "
          f"plain median {mp:.3f} cyc/pkt [{min(plain):.3f}-{max(plain):.3f}], "
          f"perf stat (task-clock,context-switches,page-faults; -C {core} -D -1 --control) median {mc:.3f} cyc/pkt "
          f"[{min(counted):.3f}-{max(counted):.3f}] -> {overhead:+.2f} %")
    # A median difference alone is not a verdict: on a noisy host it can be any sign. The analysis
    # core's two-sample test with a 1 % minimum effect says whether the target is shown met.
    v = compare(plain, counted, "cpp", backend="tsc", min_effect=0.01)
    if v.verdict is Verdict.SAME:
        verdict = "PASS (no change of 1 % or more; p=%.3g)" % v.p_value
    elif v.verdict is Verdict.DIFFERENT and v.kind is Kind.REGRESSION:
        verdict = "FAIL (counting costs >= 1 %%; p=%.3g)" % v.p_value
    elif v.verdict is Verdict.DIFFERENT:
        verdict = "PASS (counted runs faster: noise, no overhead visible; p=%.3g)" % v.p_value
    else:
        verdict = "UNDECIDED (noise too large to resolve 1 %%; p=%.3g): rerun with more --pairs or on a quiet host" % v.p_value
    print(f"counting overhead target <= 1 %: {verdict}")


if __name__ == "__main__":
    main()
