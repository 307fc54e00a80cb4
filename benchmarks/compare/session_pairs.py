"""What one interleaved session of n pairs can decide: a pull request's head against its merge-base,
or a server bisect's two new commits, each measured as one session on one agent.

    .venv/bin/python benchmarks/compare/session_pairs.py [--trials 400] [--seed 1] [--pairs 5,8,11] [--alpha 0.01] [--smoke]
    .venv/bin/python benchmarks/compare/session_pairs.py --recorded [--pairs 20] [--steps 0.02,0.03,0.05,0.08,0.12]

A session measures the two commits A B A B ...; both runs of a pair share the host's moment. Each
pair here runs on a host slower or faster by ``--host`` (lognormal, relative sd; a loaded host
between pairs), each run with its own ``--noise``. The verdict is the one the server gives a pull
request (:func:`perfci_core.analysis.paired.paired_compare`, Wilcoxon signed-rank at ``--alpha``,
minimum effect ``--min-effect``). Printed per number of pairs: the share of trials called SAME /
UNKNOWN / DIFFERENT without a change and with a ``--step`` regression. Below 8 pairs the test's
smallest p (2 / 2^n) is above alpha: such a session can never be DIFFERENT, and a pull request
measured with a config's 5 repetitions was ``neutral`` on every noisy backend. ``--smoke``: a few
trials a cell (seconds). The premise is checked: the host moves between pairs more than the run
noise, which is what a session's pairs cancel.

``--recorded``: each pair two adjacent runs of one job of the quiet ``tsc`` recording instead
(``pull_requests.pairs_of``: runs slowed by bursts of other work among them), the head ``--steps``
slower; printed per number of pairs, the share called DIFFERENT at each step (the burst rule's power,
docs/detection.md, "Bursts in a session"). Its premise: the recording holds such slowed runs.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT / "core"), str(HERE)]

from perfci_core.analysis.compare import Verdict  # noqa: E402
from perfci_core.analysis.paired import paired_compare  # noqa: E402
from pull_requests import QUIET, load, pairs_of  # noqa: E402

SLOWED = 0.10  # a run this much above its job's median was slowed by other work


def shares(rng: np.random.Generator, pairs: int, step: float, args: argparse.Namespace) -> Counter[Verdict]:
    out: Counter[Verdict] = Counter()
    for _ in range(args.trials):
        host = np.exp(args.host * rng.standard_normal(pairs))
        base = 100.0 * host * (1 + args.noise * rng.standard_normal(pairs))
        head = 100.0 * (1 + step) * host * (1 + args.noise * rng.standard_normal(pairs))
        out[paired_compare(base, head, "cpp", alpha=args.alpha, min_effect=args.min_effect).verdict] += 1
    return out


def recorded(args: argparse.Namespace) -> int:
    jobs = load(QUIET)
    slowed = float(np.mean(np.concatenate([j / np.median(j) - 1 > SLOWED for j in jobs])))
    if slowed < 0.05:
        print(f"premise failed: {slowed:.1%} of the recording's runs are more than {SLOWED:.0%} slow (bursts expected)")
        return 1
    steps = [float(x) for x in args.steps.split(",")]
    rng = np.random.default_rng(args.seed)
    print(f"{args.trials} sessions a cell; pairs of adjacent runs of {QUIET.name} ({slowed:.0%} of its runs over "
          f"{SLOWED:.0%} slow), minimum effect {args.min_effect:.1%}, alpha {args.alpha:g}; the share called DIFFERENT")
    print(f"{'pairs':>5}  " + "  ".join(f"{f'+{s:.0%}':>6}" for s in steps))
    for n in (int(x) for x in args.pairs.split(",")):
        draws = [pairs_of(rng, jobs, n) for _ in range(args.trials)]
        found = [np.mean([paired_compare(b, h * (1 + s), "cpp", alpha=args.alpha, min_effect=args.min_effect).verdict
                          is Verdict.DIFFERENT for b, h in draws]) for s in steps]
        print(f"{n:>5}  " + "  ".join(f"{x:>6.3f}" for x in found))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pairs", default="5,8,11", help="comma-separated numbers of pairs per session")
    ap.add_argument("--host", type=float, default=0.10, help="the host's relative speed sd between pairs")
    ap.add_argument("--noise", type=float, default=0.005, help="each run's own relative noise sd")
    ap.add_argument("--step", type=float, default=0.03, help="the head's regression (relative)")
    ap.add_argument("--min-effect", type=float, default=0.01)
    ap.add_argument("--alpha", type=float, default=0.01,
                    help="the test's level (a pull request's first of 3 sessions: 0.0045)")
    ap.add_argument("--recorded", action="store_true", help="pairs from the quiet tsc recording (module doc)")
    ap.add_argument("--steps", default="0.02,0.03,0.05,0.08,0.12", help="--recorded: the head's regressions")
    ap.add_argument("--smoke", action="store_true", help="a few trials a cell: seconds, premise checked")
    args = ap.parse_args(argv)
    if args.smoke:
        args.trials = 10
    if args.recorded:
        return recorded(args)
    if args.host <= args.noise:
        print(f"premise failed: the host's sd between pairs ({args.host:.1%}) is not above the run noise ({args.noise:.1%})")
        return 1
    rng = np.random.default_rng(args.seed)
    print(f"{args.trials} trials a cell; host sd {args.host:.0%} between pairs, run noise {args.noise:.1%}, "
          f"minimum effect {args.min_effect:.1%}, alpha {args.alpha:g}")
    print(f"{'pairs':>5}  {'no change: same / unknown / different':>40}  {f'+{args.step:.0%}: same / unknown / different':>40}")
    for n in (int(x) for x in args.pairs.split(",")):
        row = []
        for step in (0.0, args.step):
            c = shares(rng, n, step, args)
            row.append(" / ".join(f"{c[v] / args.trials:.3f}" for v in (Verdict.SAME, Verdict.UNKNOWN, Verdict.DIFFERENT)))
        print(f"{n:>5}  {row[0]:>40}  {row[1]:>40}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
