"""Pull-request verdicts on recorded ``tsc`` noise, through the server's own decision
(:func:`perfci_core.analysis.pull_verdict.verdicts`, what ``pulls.sessions`` calls).

    .venv/bin/python benchmarks/compare/pull_requests.py [--trials 300] [--seeds 5] [--seed 1] [--metrics 10]
        [--sessions 3] [--drift 0.02] [--equivalence 0.03] [--noise FILE] [--smoke]

A pull request's head and merge-base on one machine x config: every session measures the two
interleaved, each pair two adjacent runs of one recorded job (a quiet host's by default,
benchmarks/detection/data/tsc-noise-quiet.json) in a random order, every session on a host slower
or faster by ``--drift`` (both sides alike). ``--metrics`` alerting metrics are measured (the
``tsc`` backend's alerting metrics in the catalogue: 10), each from its own draws, the head's
first one ``step`` slower; each metric's minimum effect is learned from a base branch of 50
commits of 5 runs drawn from the same recording (``min_effect_of_series``). A session takes the
pairs the server gives it (``pulls.sessions.session_pairs``: Holm's strictest step reachable at the
first look); after each, an alerting regression fails the pull request, every metric unchanged is
a success, otherwise another session up to ``--sessions``, then neutral.

Printed per step (0, +2, +3, +5, +8, +12 %): the share of pull requests that fail, succeed or
end neutral, and the sessions they took, as the mean (min-max) over the seeds. Step 0 is an
unchanged head: its failure share is the pull request's false failure over all its metrics, to be
at most alpha (0.01). The premise is checked: every pull request ends with a verdict, and the
recording is the noisy one the figures speak of (runs slowed by other work among them).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "core")]

from perfci_core.analysis.compare import DEFAULT_ALPHA  # noqa: E402
from perfci_core.analysis.min_effect import min_effect_of_series  # noqa: E402
from perfci_core.analysis.paired import least_kept, min_attainable_p  # noqa: E402
from perfci_core.analysis.pull_verdict import MetricSessions, look_level, verdicts  # noqa: E402

QUIET = ROOT / "benchmarks" / "detection" / "data" / "tsc-noise-quiet.json"
STEPS = (0.0, 0.02, 0.03, 0.05, 0.08, 0.12)
SERIES_COMMITS, SERIES_REPS = 50, 5


def load(path: Path) -> list[np.ndarray]:
    jobs = [np.asarray(j["cpp"], dtype=float) for j in json.loads(path.read_text())["jobs"]]
    median = float(np.median(np.concatenate(jobs)))
    return [j / median for j in jobs]


def session_pairs(family: int, sessions: int, repetitions: int = 5) -> int:
    """``pulls.sessions.session_pairs`` for one config: Holm's strictest step reachable at the first look."""
    strictest = look_level(1, sessions) / max(1, family)
    pairs = repetitions
    while min_attainable_p(least_kept(pairs)) > strictest:
        pairs += 1
    return pairs


def pairs_of(rng: np.random.Generator, jobs: list[np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
    base, head = np.empty(n), np.empty(n)
    for i in range(n):
        job = jobs[int(rng.integers(len(jobs)))]
        k = 2 * int(rng.integers(job.size // 2))
        first, second = job[k], job[k + 1]
        base[i], head[i] = (first, second) if rng.random() < 0.5 else (second, first)
    return base, head


def min_effect(rng: np.random.Generator, jobs: list[np.ndarray]) -> float:
    series = [(f"c{i}", list(rng.choice(jobs[int(rng.integers(len(jobs)))], SERIES_REPS))) for i in range(SERIES_COMMITS)]
    return min_effect_of_series(series).value


def pull_request(rng: np.random.Generator, jobs: list[np.ndarray], step: float, args: argparse.Namespace,
                 pairs: int) -> tuple[str, int]:
    """One pull request: (its verdict, the sessions it took)."""
    effects = [min_effect(rng, jobs) for _ in range(args.metrics)]
    base = [np.empty(0) for _ in range(args.metrics)]
    head = [np.empty(0) for _ in range(args.metrics)]
    for look in range(1, args.sessions + 1):
        host = 1.0 + args.drift * rng.standard_normal()
        for i in range(args.metrics):
            b, h = pairs_of(rng, jobs, pairs)
            base[i] = np.r_[base[i], 80.0 * host * b]
            head[i] = np.r_[head[i], 80.0 * host * h * (1.0 + (step if i == 0 else 0.0))]
        evidence = [MetricSessions("self-64B", "cpp", "tsc", base[i], head[i], True, effects[i]) for i in range(args.metrics)]
        calls = [v.call for v in verdicts(evidence, look, args.sessions, 1.0, args.equivalence)]
        if "regression" in calls:
            return "failure", look
        if all(c == "unchanged" for c in calls):
            return "success", look
        if look == args.sessions:
            return "neutral", look
    raise AssertionError("unreachable")


def cell(values: list[float]) -> str:
    return f"{np.mean(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=300, help="pull requests per seed and step")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--metrics", type=int, default=10, help="alerting metrics measured (the tsc catalogue's: 10)")
    ap.add_argument("--sessions", type=int, default=3, help="sessions a head may take (PERFCI_PULL_SESSIONS)")
    ap.add_argument("--drift", type=float, default=0.02, help="the host's relative speed sd between sessions")
    ap.add_argument("--equivalence", type=float, default=0.03, help="the smallest margin shown (PERFCI_PULL_EQUIVALENCE)")
    ap.add_argument("--noise", type=Path, default=QUIET, help="recorded tsc runs")
    ap.add_argument("--smoke", action="store_true", help="a few pull requests per step, one seed: seconds, premise checked")
    args = ap.parse_args(argv)
    if args.smoke:
        args.trials, args.seeds = 4, 1
    if args.trials < 1 or args.seeds < 1 or args.metrics < 1 or args.sessions < 1:
        ap.error("--trials, --seeds, --metrics and --sessions must be at least 1")
    jobs = load(args.noise)
    runs = np.concatenate(jobs)
    if not (runs > 1.08).any():
        print(f"premise failed: {args.noise} has no run slowed by other work (8 % or more over the median)")
        return 1
    pairs = session_pairs(args.metrics, args.sessions)
    seeds = list(range(args.seed, args.seed + args.seeds))
    print(f"{args.noise.name}: {args.metrics} alerting metric(s), up to {args.sessions} session(s) of {pairs} pairs, "
          f"host drift {args.drift:.0%} between sessions, equivalence at least ±{args.equivalence:.0%}; {args.trials} pull "
          f"requests per step and seed, seeds {seeds[0]}-{seeds[-1]}; mean (min-max) over the seeds")
    print(f"{'step':>6} {'failure':>22} {'success':>22} {'neutral':>22} {'sessions':>8}")
    started = time.monotonic()
    for step in STEPS:
        shares: dict[str, list[float]] = {"failure": [], "success": [], "neutral": []}
        taken = []
        for seed in seeds:
            rng = np.random.default_rng([seed, int(round(step * 1000))])
            ends = [pull_request(rng, jobs, step, args, pairs) for _ in range(args.trials)]
            for verdict in shares:
                shares[verdict].append(sum(v == verdict for v, _ in ends) / len(ends))
            taken += [n for _, n in ends]
            if any(v not in shares for v, _ in ends):
                print("premise failed: a pull request ended without a verdict")
                return 1
        print(f"{step:>+6.0%} {cell(shares['failure']):>22} {cell(shares['success']):>22} {cell(shares['neutral']):>22} "
              f"{np.mean(taken):>8.2f}", flush=True)
    print(f"step 0: an unchanged head (its failure share is the false failure over all {args.metrics} metrics; alpha "
          f"{DEFAULT_ALPHA:g}); {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
