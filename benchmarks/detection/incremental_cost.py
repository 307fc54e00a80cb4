"""What the incremental search buys: detect()'s CPU per upload as the server runs it, with the
incremental search (``Settings.block`` 25, the default) and without it (block 0), on the same series.

    .venv/bin/python benchmarks/detection/incremental_cost.py [--reps 1] [--seeds 3] [--seed 20240601]
        [--commits 600] [--blocks 25,0] [--smoke]

Each seed draws one series of each synthetic noisy family of run.py (``--commits`` commits,
``--reps`` repetitions each). Each series is walked as the server detects it: after every upload,
detection over the newest 200 commits (from a block edge once the window slid:
``detect.window_start``), with the series' :class:`SearchMemo` kept between detections, as the
worker keeps it. Block 0 moves the window and re-learns the frame at every upload, so its memo
keeps nothing: the search runs from scratch. Printed: CPU ms per detection (this process's clock,
``time.process_time``), mean (min-max) over seeds, and the ratio to the first block, seed by seed.
The absolute figures move with the host's load; the ratio is what holds. The premise is checked:
with a block above 0 the kept search was reused (else there is nothing incremental to measure).
``--smoke``: one seed of 220-commit series (seconds).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace


from run import NOISY_FAMILIES, SERVER_WINDOW, Series, build_corpus, load_real_noise
from scoring import cell

from perfci_core.analysis import Point, detect
from perfci_core.analysis.changepoints import SearchMemo
from perfci_core.analysis.detect import Settings, window_start
from perfci_core.analysis.series import clean


def walk_cpu(s: Series, settings: Settings) -> tuple[float, int, int]:
    """(CPU seconds, detections, points whose search was reused) of detection after every upload of
    ``s`` over the server's window."""
    memo, spent = SearchMemo(), 0.0
    n = len(s.points)
    for t in range(2, n + 1):
        start = window_start(t - SERVER_WINDOW, settings.block) if t > SERVER_WINDOW else 0
        points = clean([Point.of(s.commits[i], s.points[i]) for i in range(start, t)])
        points = replace(points, positions=tuple(start + p for p in points.positions))  # the branch's positions
        t0 = time.process_time()
        detect(points, s.metric, s.backend, settings, memo)
        spent += time.process_time() - t0
    return spent, n - 1, memo.reused


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=1, help="repetitions of every commit")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=20240601, help="the first seed; the others follow it")
    ap.add_argument("--commits", type=int, default=600, help="commits of every series")
    ap.add_argument("--blocks", default="25,0", help="Settings.block values, comma-separated (the first: the base)")
    ap.add_argument("--smoke", action="store_true", help="one seed of 220-commit series: seconds, premise checked")
    args = ap.parse_args(argv)
    if args.smoke:
        args.seeds, args.commits = 1, 220
    blocks = [int(b) for b in args.blocks.split(",")]
    if args.reps < 1 or args.seeds < 1 or args.commits <= SERVER_WINDOW or any(b < 0 for b in blocks):
        ap.error(f"--reps and --seeds must be at least 1, --commits above {SERVER_WINDOW}, blocks 0 or more")
    real_noise = load_real_noise()
    per_block: dict[int, list[float]] = {b: [] for b in blocks}
    for seed in [args.seed + i for i in range(args.seeds)]:
        corpus = [s for s in build_corpus(seed, 1, (args.commits, args.commits), [], real_noise, args.reps)
                  if s.family in NOISY_FAMILIES]
        line = []
        for b in blocks:
            spent, count, reused = map(sum, zip(*(walk_cpu(s, Settings(block=b)) for s in corpus)))
            if b > 0 and reused == 0:
                print(f"premise failed: with block {b} no detection reused the kept search")
                return 1
            per_block[b].append(1000 * spent / count)
            line.append(f"block {b} {per_block[b][-1]:.2f} ms")
        print(f"seed {seed}: {len(corpus)} series x {args.commits} commits x {args.reps} reps: " + ", ".join(line),
              flush=True)
    base = blocks[0]
    print(f"\nCPU ms per detection, mean (min-max) over {args.seeds} seeds; ratio to block {base} seed by seed")
    for b in blocks:
        ratios = [x / y for x, y in zip(per_block[b], per_block[base])]
        print(f"block {b:>3}: {cell(per_block[b], '.2f')} ms, x{cell(ratios, '.2f')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
