"""Which value of a job confirms a step: its median or its best run, on recorded ``tsc`` noise.

    .venv/bin/python benchmarks/detection/job_values.py [--trials 1000] [--seed 1]

Confirmation rounds are tested one value per job (perfci_core.analysis.detect, ``_rounds_test``):
the jobs of the commits before a suspect against the jobs from it on, each side's values put
through the same rank test as detection (``compare``) at the alert's alpha, which detection
shares between the two values (Bonferroni). This prints, for a few job counts and step sizes,
how often that test passes on each value: the power at a step, the false-positive rate at none.
A job is 3 repetitions resampled from one recorded job of data/tsc-noise-quiet.json (the
``real`` family of run.py), times its level.
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
from run import REAL_NOISE, load_real_noise  # noqa: E402

REPS = 3
VALUES = {"median": np.median, "best run": np.min}  # cycles per packet: lower is better


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--real-noise", type=Path, default=REAL_NOISE)
    args = ap.parse_args(argv)
    jobs = load_real_noise(args.real_noise)
    rng = np.random.default_rng(args.seed)
    alpha = Settings().search.alpha / len(VALUES)

    def draw(n: int, level: float) -> list[np.ndarray]:
        return [level * rng.choice(jobs[int(rng.integers(len(jobs)))], REPS) for _ in range(n)]

    print(f"share of {args.trials} trials where the jobs' test passes at alpha {alpha:g} "
          f"({REPS} repetitions per job, {args.real_noise.name})")
    print(f"{'jobs before/after':>18} {'step':>6} " + " ".join(f"{v:>9}" for v in VALUES))
    for before, after in ((12, 18), (20, 28), (30, 42)):
        for step in (0.0, 0.02, 0.03, 0.05):
            passed = dict.fromkeys(VALUES, 0)
            for _ in range(args.trials):
                a, b = draw(before, 1.0), draw(after, 1.0 + step)
                for name, value in VALUES.items():
                    test = compare([value(x) for x in a], [value(x) for x in b], alpha=alpha)
                    passed[name] += test.verdict is Verdict.DIFFERENT
            print(f"{f'{before}/{after}':>18} {step:>6.0%} " + " ".join(
                f"{passed[v] / args.trials:9.3f}" for v in VALUES), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
