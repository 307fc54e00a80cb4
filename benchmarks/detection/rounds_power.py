"""How many rounds the rounds' test needs to confirm a 2-3 % step on a drifting host.

    .venv/bin/python benchmarks/detection/rounds_power.py [--trials 200] [--seed 1] [--job-drift 0.02]

The adaptive loop confirms a suspect on the jobs of its 7 commits (3 before it, 4 from it on: Settings.suspect_commits),
one value per job, at the per-look alpha (detect.rounds_tests, per_look). This draws those jobs from run.py's
``normal`` family (3 repetitions per job, per-run noise cv, every job on a host slower or faster by --job-drift)
and prints how often the test passes, for a few per-run noises, step sizes and jobs per commit (the commit's own
job plus its rounds; the policy allows 12 rounds, and a window's budget of 30 % of 200 commits x 3 repetitions
pays 60 jobs, about 8 rounds of one suspect's 7 commits). The minimum effect is the one detection learns from a
series of such commits (half the relative noise of the commit medians, ``learned_min_effect``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1] / "core"), str(HERE)]

from perfci_core import metrics  # noqa: E402
from perfci_core.analysis import Point, Settings, clean  # noqa: E402
from perfci_core.analysis.compare import Verdict  # noqa: E402
from perfci_core.analysis.detect import per_look, rounds_tests  # noqa: E402
from perfci_core.analysis.noise import learned_min_effect  # noqa: E402
from run import ADAPTIVE_REPS, draw  # noqa: E402

BEFORE, AFTER = 3, 4  # the suspect's commits each side (Settings.suspect_commits = 7)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--job-drift", type=float, default=0.02)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    settings, cpp = Settings(), metrics.get("cpp")
    alpha = per_look(settings.search.alpha, settings)

    def job(cv: float, level: float) -> list[float]:
        factor = 1.0 + args.job_drift * float(rng.standard_normal())
        return [v * factor for v in draw(rng, "normal", cv, level, ADAPTIVE_REPS, None)]

    print(f"share of {args.trials} trials where the rounds' test passes at {alpha:g} per look (job drift "
          f"{args.job_drift:.0%}, {ADAPTIVE_REPS} repetitions per job, {BEFORE} + {AFTER} commits)")
    steps = (0.0, 0.02, 0.025, 0.03)
    print(f"{'cv':>6} {'min effect':>10} {'jobs/commit':>11} " + " ".join(f"{s:>6.1%}" for s in steps))
    for cv in (0.02, 0.037):
        medians = [np.median(job(cv, 1.0)) for _ in range(400)]
        min_effect = learned_min_effect(float(np.std(medians)), settings.min_change, settings.noise_factor)
        for jobs in (9, 13, 21, 33):
            row = []
            for step in steps:
                passed = 0
                for _ in range(args.trials):
                    levels = [100.0 * (1 + step * (i >= BEFORE)) for i in range(BEFORE + AFTER)]
                    points = [Point.of(f"c{i}", [v for _ in range(jobs) for v in job(cv, level)], [ADAPTIVE_REPS] * jobs)
                              for i, level in enumerate(levels)]
                    tests = rounds_tests(clean(points), BEFORE, range(BEFORE + AFTER), cpp, min_effect, settings, alpha)
                    passed += any(t.verdict is Verdict.DIFFERENT for t in tests)
                row.append(passed / args.trials)
            print(f"{cv:>6.1%} {min_effect:>10.2%} {jobs:>11} " + " ".join(f"{x:>6.2f}" for x in row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
