"""Creeps are not staircases: a level that moves linearly over 200 commits, fed to ``detect()`` with
the server's settings, should give one creep finding over a range and no step alert; a step on top of
a creep should still be found as a step.

    .venv/bin/python benchmarks/detection/creeps.py [--seeds 5] [--seed 1] [--noise 0.01] [--smoke]

Creeps of +2, +5, +10 and +20 % over 200 commits (cycles per packet, a regression), per-run noise
``--noise`` (normal), 1 and 3 repetitions per commit; then steps of +2, +3 and +5 % at commit 130 on
top of a +10 % creep (3 repetitions). Printed per case over the seeds: the step alerts (mean and
range), the seeds with exactly one creep finding, the findings' mean size and span, and for the
stepped cases the seeds whose step was found within one commit. The premise is checked: every
series' last 20 commits sit above its first 20 by the creep's size (within the noise).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1] / "core")]

from perfci_core.analysis import detect  # noqa: E402
from perfci_core.analysis.detect import Settings  # noqa: E402

SERVER = Settings(unknown_metric="report")  # alerts.detection.DETECTION
COMMITS = 200
CREEPS = (0.02, 0.05, 0.10, 0.20)
STEPS = (0.02, 0.03, 0.05)
STEP_AT = 130


def series(rng: np.random.Generator, creep: float, reps: int, noise: float, step: float = 0.0) -> list[tuple[str, list[float]]]:
    level = 100.0 * (1 + creep * np.arange(COMMITS) / (COMMITS - 1)) * np.where(np.arange(COMMITS) >= STEP_AT, 1 + step, 1.0)
    return [(f"c{i:03d}", list(lv * (1 + noise * rng.standard_normal(reps)))) for i, lv in enumerate(level)]


def premise(points: list[tuple[str, list[float]]], creep: float, noise: float) -> bool:
    first = np.median([v for _, vs in points[:20] for v in vs])
    last = np.median([v for _, vs in points[-20:] for v in vs])
    return abs((last / first - 1) - creep * (COMMITS - 20) / (COMMITS - 1)) < 4 * noise


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--noise", type=float, default=0.01, help="per-run relative noise (normal)")
    ap.add_argument("--smoke", action="store_true", help="one seed, one creep, one step: seconds, premise checked")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        ap.error("--seeds must be at least 1")
    seeds = [args.seed] if args.smoke else list(range(args.seed, args.seed + args.seeds))
    cases = [(c, reps, 0.0) for c in ((0.10,) if args.smoke else CREEPS) for reps in ((3,) if args.smoke else (1, 3))]
    cases += [(0.10, 3, s) for s in ((0.03,) if args.smoke else STEPS)]
    print(f"{COMMITS} commits, per-run noise {args.noise:.1%}, seeds {seeds[0]}-{seeds[-1]}, the server's detection settings")
    print(f"{'creep':>6} {'reps':>4} {'step':>5} {'step alerts':>16} {'one creep':>9} {'creep size':>10} {'creep span':>10} "
          f"{'step found':>10}")
    for creep, reps, step in cases:
        alerts, one, sizes, spans, found = [], 0, [], [], 0
        for seed in seeds:
            points = series(np.random.default_rng([seed, int(creep * 100), reps, int(step * 100)]), creep, reps, args.noise, step)
            if not premise(points, creep + step * (COMMITS - STEP_AT > 20), args.noise):
                print(f"premise failed: seed {seed}'s +{creep:.0%} creep did not move the level by that much")
                return 1
            r = detect(points, "cpp", "tsc", SERVER)
            steps = [c.index for c in r.changes]
            hit = step > 0 and any(abs(k - STEP_AT) <= 1 for k in steps)
            found += hit
            alerts.append(len(steps) - hit)
            one += len(r.creeps) == 1
            sizes += [c.rel_change for c in r.creeps]
            spans += [c.end - c.start for c in r.creeps]
        size = f"{np.mean(sizes):+.1%}" if sizes else "-"
        span = f"{np.mean(spans):.0f}" if spans else "-"
        print(f"{creep:>+6.0%} {reps:>4} {step:>+5.0%} {np.mean(alerts):>6.2f} ({min(alerts)}-{max(alerts)}){'':>4} "
              f"{one:>4}/{len(seeds):<4} {size:>10} {span:>10} {f'{found}/{len(seeds)}' if step else '-':>10}", flush=True)
    print("step alerts: changes other than the stepped case's own step (each blames one commit of a creep no commit "
          "caused); one creep: seeds with exactly one creep finding")
    return 0


if __name__ == "__main__":
    sys.exit(main())
