"""How many confirmation rounds a step needs, by each of the two tests detection makes on them:
rounds of separate jobs, and interleaved A/B pairs of k - 1 and k (a server round measures the
suspect's other commits as separate jobs and those two as one interleaved session, and detection
tests both ways: perfci_core.analysis.detect), on recorded ``tsc`` noise, in isolation.

    .venv/bin/python benchmarks/detection/confirm_designs.py [--seeds 3] [--trials 40] [--drift 0.03 ...]

A suspect at commit k with a step of ``d`` between k-1 and k. Two designs of a round:

- ``jobs``: one more job (3 repetitions) of each of k-2 .. k+2, as ``alerts/confirm.py`` queued
  them before the pairs; decided as ``detect._rounds_test`` decides: the jobs of k-2, k-1 against
  those of k .. k+2, one value per job — the jobs' medians and the jobs' best runs, each through
  ``compare`` at half the alert's alpha. 15 runs per round.
- ``pairs``: one job measuring k-1 and k interleaved, 3 pairs (both sides of a pair in the same
  recorded job, sharing its host state); decided by ``paired_compare`` (Wilcoxon signed rank on
  the pairs' log ratios, burst pairs left out) over every pair so far, at the alert's alpha.
  6 runs per round.

Both at the alert's alpha (1e-4) and a 1 % minimum effect, up to ``--max-rounds`` rounds, the
commits' own first jobs included for ``jobs``. Neither pins the change here (``pairs`` tests one
edge, so it would pin it by construction; ``jobs`` still needs ``_pin``). ``--drift`` gives every
job a host factor of that relative standard deviation (a loaded host's batch drift; the pairs of
one job share it). Each seed draws its own trials; figures are the mean (min-max) over seeds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1] / "core"), str(HERE)]

from perfci_core.analysis import Settings  # noqa: E402
from perfci_core.analysis.compare import Verdict, compare  # noqa: E402
from perfci_core.analysis.paired import paired_compare  # noqa: E402
from run import REAL_NOISE, load_real_noise  # noqa: E402

REPS = 3
ALPHA = Settings().search.alpha
MIN_EFFECT = 0.01


class Host:
    def __init__(self, jobs: list[np.ndarray], drift: float, rng: np.random.Generator):
        self.jobs, self.drift, self.rng = jobs, drift, rng

    def job(self) -> tuple[np.ndarray, float]:
        """One recorded job to draw runs from, and this job's host factor."""
        return self.jobs[int(self.rng.integers(len(self.jobs)))], 1.0 + self.drift * self.rng.standard_normal()

    def runs(self, level: float) -> np.ndarray:
        job, factor = self.job()
        return level * factor * self.rng.choice(job, REPS)


def by_jobs(host: Host, step: float, max_rounds: int) -> int | None:
    before = [host.runs(1.0) for _ in range(2)]
    after = [host.runs(1.0 + step) for _ in range(3)]
    for r in range(1, max_rounds + 1):
        before += [host.runs(1.0) for _ in range(2)]
        after += [host.runs(1.0 + step) for _ in range(3)]
        for value in (np.median, np.min):  # cycles per packet: lower is better
            t = compare([value(x) for x in before], [value(x) for x in after], "cpp", alpha=ALPHA / 2,
                        min_effect=MIN_EFFECT)
            if t.verdict is Verdict.DIFFERENT and t.rel_change * (step or 1.0) > 0:
                return r
    return None


def by_pairs(host: Host, step: float, max_rounds: int) -> int | None:
    base: list[float] = []
    head: list[float] = []
    for r in range(1, max_rounds + 1):
        job, factor = host.job()
        base += list(factor * host.rng.choice(job, REPS))
        head += list((1.0 + step) * factor * host.rng.choice(job, REPS))
        t = paired_compare(base, head, "cpp", alpha=ALPHA, min_effect=MIN_EFFECT)
        if t.verdict is Verdict.DIFFERENT and t.rel_change * (step or 1.0) > 0:
            return r
    return None


DESIGNS = {"jobs (15 runs/round)": (by_jobs, 5 * REPS), "pairs (6 runs/round)": (by_pairs, 2 * REPS)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--trials", type=int, default=40, help="suspects per seed, step size and design")
    ap.add_argument("--max-rounds", type=int, default=24)
    ap.add_argument("--drift", type=float, action="append", help="host factor sd per job (default: 0 and 0.03)")
    ap.add_argument("--real-noise", type=Path, default=REAL_NOISE)
    args = ap.parse_args(argv)
    jobs = load_real_noise(args.real_noise)
    seeds = [args.seed + i for i in range(args.seeds)]
    print(f"{args.trials} suspects per seed, seeds {seeds[0]}-{seeds[-1]}, up to {args.max_rounds} rounds, "
          f"{args.real_noise.name}; mean (min-max) over the seeds")
    print(f"{'drift':>6} {'step':>5} {'design':<22} {'confirmed':>18} {'median rounds':>14} {'median runs':>12}")
    for drift in args.drift or [0.0, 0.03]:
        for step in (0.0, 0.02, 0.03, 0.05):
            for name, (decide, runs_per_round) in DESIGNS.items():
                shares, rounds = [], []
                for seed in seeds:
                    host = Host(jobs, drift, np.random.default_rng([seed, int(step * 1000), int(drift * 1000)]))
                    got = [decide(host, step, args.max_rounds) for _ in range(args.trials)]
                    shares.append(sum(g is not None for g in got) / len(got))
                    rounds += [g for g in got if g is not None]
                med = float(np.median(rounds)) if rounds else float("nan")
                print(f"{drift:>6.0%} {step:>+5.0%} {name:<22} {np.mean(shares):>6.2f} ({min(shares):.2f}-{max(shares):.2f})"
                      f" {med:>14.1f} {med * runs_per_round:>12.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
