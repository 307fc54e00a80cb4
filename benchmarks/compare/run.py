"""Verdicts between two commits on a drifting host: ``perfci compare`` before and after pairing.

    .venv/bin/python benchmarks/compare/run.py [--seeds 10] [--seed 20261124] [--trials 60] [--json FILE] [--smoke]

Three ways to decide "did HEAD regress against BASE", each on the same simulated comparisons:

- **before** -- today's stored-results path: a job of 5 base repetitions, later a job of 5 head
  repetitions, the independent-samples verdict (:func:`perfci_core.analysis.compare.compare`,
  min(KS, Mann-Whitney), alpha 0.01) with the fixed 0.2 % minimum effect;
- **paired, floor** -- ``perfci compare --measure``'s measurement (10 interleaved pairs, the order
  inside each pair random, +4 pairs while the verdict is UNKNOWN, at most 26) and its paired
  verdict (:func:`perfci_core.analysis.paired.paired_compare`, Wilcoxon signed-rank, each of the
  5 looks at alpha 0.01 / 5), with the fixed 0.2 % floor;
- **paired, learned** -- the same with the minimum effect learned from the series' own noise
  (:func:`perfci_core.analysis.min_effect.min_effect_of_series` on a 30-commit history of 5-repetition
  jobs measured on the same host): what ``perfci compare --measure`` does when the series is known.

Two noise sources:

- ``simulated`` batch drift: the host's slow-down factor per run is a random walk (1 % per run)
  plus a jump between jobs (lognormal, 8 %: another moment, other work), bursts of other work
  (start with probability 6 % per run, last 1-4 runs, each run 1.4-2.7x slower: 40-266 % slower,
  as seen on a loaded host), and the run's own noise (2 %);
- ``recorded``: cycles per packet of one build of perfci-fwd, 8 jobs x 8 runs on a loaded 2-CPU
  host (benchmarks/detection/data/tsc-noise.json). Before: 5 runs of one job against 5 of another
  job. Paired: two adjacent runs of one job form a pair (drawn from random jobs, one side chosen
  by a coin toss), as many pairs as the adaptive loop asks for. The history: commits resampled
  from random jobs.

A comparison of a commit with itself (a comment-only change) that comes out DIFFERENT is a false
positive ("FP", any direction; "FP exit 1" counts only those that would fail CI: worse). Power is
the share of DIFFERENT-and-worse verdicts for a head that is 1 %, 2 % or 5 % slower (cycles per
packet up). Every figure is the mean over the seeds with the range (min-max) across seeds;
"runs" is the mean number of dataplane runs one comparison cost. ``--smoke``: one seed of a few
comparisons (seconds). The premise is checked: the simulated host's drift makes the two jobs of a
commit with itself differ (their medians apart by more than the 0.2 % floor in most trials), or the
comparison would measure nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "core")]

from perfci_core.analysis.compare import Verdict, compare  # noqa: E402
from perfci_core.analysis.detect import Settings  # noqa: E402
from perfci_core.analysis.compare import DEFAULT_ALPHA  # noqa: E402
from perfci_core.analysis.min_effect import min_effect_of_series  # noqa: E402
from perfci_core.analysis.paired import paired_compare, sequential_alpha  # noqa: E402

RECORDED = ROOT / "benchmarks" / "detection" / "data" / "tsc-noise.json"
BASE_CPP = 80.0
BLOCK_REPS = 5  # repetitions per job today (the agent's default)
PAIRS, PAIRS_STEP, MAX_PAIRS = 10, 4, 26  # perfci compare --measure's defaults
LOOK_ALPHA = sequential_alpha(DEFAULT_ALPHA, PAIRS, MAX_PAIRS, PAIRS_STEP)
HISTORY_COMMITS = 30
STEPS = (0.01, 0.02, 0.05)
FLOOR = Settings().min_change
METHODS = ("before", "paired, floor", "paired, learned")

# the simulated host
WALK, JOB_JUMP, RUN_CV = 0.01, 0.08, 0.02
BURST_START, BURST_LEN, BURST_LO, BURST_HI = 0.06, (1, 4), 1.4, 2.7


class SimulatedHost:
    """The host's slow-down factor, run after run; a new job starts at another moment."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.level = 0.0
        self.burst_left = 0
        self.burst = 1.0

    def new_job(self) -> None:
        self.level = JOB_JUMP * self.rng.standard_normal()

    def run(self) -> float:
        rng = self.rng
        self.level += WALK * rng.standard_normal()
        if self.burst_left == 0 and rng.random() < BURST_START:
            self.burst_left = int(rng.integers(BURST_LEN[0], BURST_LEN[1] + 1))
        factor = 1.0
        if self.burst_left:
            factor = rng.uniform(BURST_LO, BURST_HI)
            self.burst_left -= 1
        return float(np.exp(self.level + RUN_CV * rng.standard_normal()) * factor)

    def job(self, reps: int) -> np.ndarray:
        self.new_job()
        return np.array([self.run() for _ in range(reps)])

    def pairs(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """n interleaved pairs in one job: (base factors, head factors), order random per pair."""
        first = np.array([self.run() for _ in range(2 * n)]).reshape(n, 2)
        head_first = self.rng.integers(0, 2, n).astype(bool)
        return np.where(head_first, first[:, 1], first[:, 0]), np.where(head_first, first[:, 0], first[:, 1])


class RecordedHost:
    """Runs resampled from the recorded loaded-host jobs (one build: any difference is noise)."""

    def __init__(self, rng: np.random.Generator, jobs: list[np.ndarray]) -> None:
        self.rng, self.jobs = rng, [j / np.median(np.concatenate(jobs)) for j in jobs]

    def job(self, reps: int) -> np.ndarray:
        j = self.jobs[int(self.rng.integers(len(self.jobs)))]
        return self.rng.choice(j, size=reps, replace=False)

    def two_jobs(self, reps: int) -> tuple[np.ndarray, np.ndarray]:
        i, k = self.rng.choice(len(self.jobs), size=2, replace=False)
        return (self.rng.choice(self.jobs[i], size=reps, replace=False),
                self.rng.choice(self.jobs[k], size=reps, replace=False))

    def pairs(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        base, head = np.empty(n), np.empty(n)
        for p in range(n):
            j = self.jobs[int(self.rng.integers(len(self.jobs)))]
            k = 2 * int(self.rng.integers(len(j) // 2))
            a, b = (j[k], j[k + 1]) if self.rng.random() < 0.5 else (j[k + 1], j[k])
            base[p], head[p] = a, b
        return base, head


def history_min_effect(host) -> float:
    series = [(f"c{i}", BASE_CPP * host.job(BLOCK_REPS)) for i in range(HISTORY_COMMITS)]
    return min_effect_of_series(series).value


def before(host, step: float) -> tuple[bool, bool, int]:
    if isinstance(host, RecordedHost):
        a, b = host.two_jobs(BLOCK_REPS)
    else:
        a, b = host.job(BLOCK_REPS), host.job(BLOCK_REPS)
    c = compare(BASE_CPP * a, BASE_CPP * (1 + step) * b, "cpp", backend="tsc", min_effect=FLOOR)
    different = c.verdict is Verdict.DIFFERENT
    return different, different and c.rel_change > 0, 2 * BLOCK_REPS


def paired(host, step: float, min_effect: float) -> tuple[bool, bool, int]:
    """perfci compare --measure's loop: 10 pairs, +4 while UNKNOWN, at most 26 (one job)."""
    if isinstance(host, SimulatedHost):
        host.new_job()
    base, head = host.pairs(PAIRS)
    while True:
        c = paired_compare(BASE_CPP * base, BASE_CPP * (1 + step) * head, "cpp", backend="tsc", alpha=LOOK_ALPHA,
                           min_effect=min_effect)
        if c.verdict is not Verdict.UNKNOWN or len(base) >= MAX_PAIRS:
            break
        more_base, more_head = host.pairs(min(PAIRS_STEP, MAX_PAIRS - len(base)))
        base, head = np.r_[base, more_base], np.r_[head, more_head]
    different = c.verdict is Verdict.DIFFERENT
    return different, different and c.rel_change > 0, 2 * len(base)


@dataclass
class Tally:
    fp: float = 0.0
    fp_exit1: float = 0.0
    runs: float = 0.0
    power: dict | None = None
    min_effect: float = 0.0


def one_seed(source: str, seed: int, trials: int, recorded: list[np.ndarray] | None) -> dict[str, Tally]:
    rng = np.random.default_rng(seed)
    host = SimulatedHost(rng) if source == "simulated" else RecordedHost(rng, recorded or [])
    learned = history_min_effect(host)
    out = {}
    for method in METHODS:
        def decide(step: float):
            if method == "before":
                return before(host, step)
            return paired(host, step, FLOOR if method == "paired, floor" else learned)

        nulls = [decide(0.0) for _ in range(trials)]
        power = {}
        for step in STEPS:
            power[step] = float(np.mean([decide(step)[1] for _ in range(trials // 2)]))
        out[method] = Tally(fp=float(np.mean([d for d, _, _ in nulls])), fp_exit1=float(np.mean([w for _, w, _ in nulls])),
                            runs=float(np.mean([r for _, _, r in nulls])), power=power,
                            min_effect=FLOOR if method != "paired, learned" else learned)
    return out


def summary(values: list[float], pct: bool = True) -> str:
    a = np.array(values) * (100.0 if pct else 1.0)
    unit = " %" if pct else ""
    return f"{a.mean():5.1f}{unit} ({a.min():.1f}-{a.max():.1f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--seed", type=int, default=20261124, help="first seed")
    ap.add_argument("--trials", type=int, default=60, help="comparisons of a commit with itself per seed (half that per step)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--smoke", action="store_true", help="one seed of a few comparisons: seconds, premise checked")
    args = ap.parse_args(argv)
    if args.smoke:
        args.seeds, args.trials = 1, 4
    # ks_2samp falls back to its asymptotic p-value on tied samples and says so on every call
    warnings.filterwarnings("ignore", message="ks_2samp: Exact calculation unsuccessful")
    if args.seeds < 1 or args.trials < 2:
        ap.error("--seeds >= 1 and --trials >= 2")
    recorded = None
    if RECORDED.exists():
        recorded = [np.array(j["cpp"], dtype=float) for j in json.loads(RECORDED.read_text())["jobs"]]
    sources = ["simulated"] + (["recorded"] if recorded else [])
    host = SimulatedHost(np.random.default_rng(args.seed))
    apart = np.mean([abs(np.median(host.job(BLOCK_REPS)) / np.median(host.job(BLOCK_REPS)) - 1) > FLOOR for _ in range(50)])
    if apart < 0.5:
        print(f"premise failed: the simulated host's jobs of one commit differ by more than the floor in {apart:.0%} of "
              "trials; the drift the comparison is about did not happen")
        return 1
    started = time.monotonic()
    report: dict = {"seeds": list(range(args.seed, args.seed + args.seeds)), "trials": args.trials, "sources": {}}
    for source in sources:
        per_seed = [one_seed(source, s, args.trials, recorded) for s in report["seeds"]]
        print(f"\n{source}: {args.seeds} seeds x {args.trials} comparisons of a commit with itself "
              f"(+{args.trials // 2} per step); mean (min-max over seeds)")
        header = f"{'method':<17} {'FP':>18} {'FP exit 1':>18} {'min effect':>18} {'runs':>18}" + "".join(
            f" {'power ' + format(s, '.0%'):>18}" for s in STEPS)
        print(header)
        print("-" * len(header))
        rows = {}
        for method in METHODS:
            tallies = [t[method] for t in per_seed]
            row = {"fp": [t.fp for t in tallies], "fp_exit1": [t.fp_exit1 for t in tallies],
                   "min_effect": [t.min_effect for t in tallies], "runs": [t.runs for t in tallies],
                   "power": {f"{s:.2f}": [t.power[s] for t in tallies] for s in STEPS}}
            rows[method] = row
            print(f"{method:<17} {summary(row['fp']):>18} {summary(row['fp_exit1']):>18} {summary(row['min_effect']):>18} "
                  f"{summary(row['runs'], pct=False):>18}" + "".join(f" {summary(row['power'][f'{s:.2f}']):>18}" for s in STEPS))
        report["sources"][source] = rows
    if recorded is None:
        print(f"\nrecorded: {RECORDED} not found, skipped")
    print(f"\n{time.monotonic() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
