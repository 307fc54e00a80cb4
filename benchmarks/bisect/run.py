"""Bisection benchmark: builds and repetitions against range length, and how often the culprit is right.

    .venv/bin/python benchmarks/bisect/run.py [--trials 200] [--lengths 8,32,128,512] [--seed N] [--json FILE]
                                              [--opposed-only] [--smoke]

Each trial draws a range of N commits with one step (the culprit) at a uniformly random commit
1..N-1 and runs the real search (:mod:`perfci_core.analysis.bisect`, its default policies:
``sim`` one repetition per commit, noisy backends 5 repetitions, +5 while UNKNOWN, up to 40;
confirmation with fresh repetitions) against a measurement function:

- deterministic: the exact value of the commit's level (callgrind instruction counts);
- noisy: level x (1 + noise x N(0, 1)), and with probability 3 % a heavy upper-tail run
  (+5 to +20 %), the shape of fresh-process runs on these VMs (docs/design.md, "These machines": one run +19 %);
- "10 % unbuildable": one commit in ten (never good or bad) fails to build and is skipped.

A trial is correct when the search ends with a confirmed culprit and it is the stepped commit
(an ambiguous or unconfirmed answer counts as not correct). Builds = distinct commits the search
measured (failed builds included); repetitions = every measurement, confirmation included.

A second table ("opposed ranges") puts two steps in each range at distinct random commits: a small
regression and a bigger improvement, so good -> bad look better overall. For each ``--direction``
hunted (any: the endpoints' kind, the improvement; regression: the regression inside), a trial is
correct when the hunted step is the confirmed culprit AND the other step is isolated at its commit
(the search reports it as a move against the hunted kind and finds it with its own search).

The run fails (exit 1) when a target is missed, and, whatever the targets, when a search measured
nothing (no build, no repetition) or the deterministic searches found no culprit at all: a table of
such trials would describe no search. ``--smoke``: 6 trials at N = 8 and 32, targets printed, not
gated (6 trials cannot show 99 %), the premises checked.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfci_core.analysis.bisect import Bisection, Policy, run

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: the benchmarks package
from benchmarks.premise import require

TAIL_P, TAIL_LO, TAIL_HI = 0.03, 0.05, 0.20


@dataclass(frozen=True)
class Model:
    name: str
    backend: str  # "sim": exact rule; "tsc": statistics
    metric: str
    step: float  # relative step at the culprit (a regression: the metric rises)
    noise: float = 0.0
    unbuildable: float = 0.0
    target: float | None = None  # required share of correct culprits


MODELS = [
    Model("deterministic, 2 % step", "sim", "ipp", 0.02, target=0.99),
    Model("deterministic, 0.05 % step", "sim", "ipp", 0.0005, target=0.99),
    Model("deterministic, 2 % step, 10 % unbuildable", "sim", "ipp", 0.02, unbuildable=0.10),
    Model("noisy 1 %, 2 % step", "tsc", "cpp", 0.02, 0.01),
    Model("noisy 1 %, 3 % step", "tsc", "cpp", 0.03, 0.01, target=0.95),
    Model("noisy 1 %, 5 % step", "tsc", "cpp", 0.05, 0.01),
    Model("noisy 3 %, 2 % step", "tsc", "cpp", 0.02, 0.03),
    Model("noisy 3 %, 5 % step", "tsc", "cpp", 0.05, 0.03),
]


@dataclass(frozen=True)
class Opposed:
    name: str
    backend: str
    metric: str
    regression: float  # the small step (the metric rises)
    improvement: float  # the bigger step the other way (negative)
    noise: float = 0.0
    target: float | None = None


OPPOSED = [
    Opposed("deterministic, +1.6 % then -6.4 % (either order)", "sim", "ipp", 0.016, -0.064, target=0.99),
    Opposed("noisy 0.5 %, +2 % and -6 %", "tsc", "cpp", 0.02, -0.06, 0.005),
    Opposed("noisy 1 %, +3 % and -8 %", "tsc", "cpp", 0.03, -0.08, 0.01),
]


def _sampler(level: np.ndarray, noise: float, rng: np.random.Generator, broken: set[int] = frozenset()):
    counted = {"built": set(), "reps": 0}

    def sample(index: int, count: int, fresh: bool) -> list[float] | None:
        counted["built"].add(index)
        if index in broken:
            return None
        counted["reps"] += count
        if noise == 0:
            return [float(level[index])] * count
        x = level[index] * (1 + noise * rng.standard_normal(count))
        tail = rng.random(count) < TAIL_P
        x[tail] *= 1 + rng.uniform(TAIL_LO, TAIL_HI, tail.sum())
        return [float(v) for v in x]

    return sample, counted


def opposed_trial(model: Opposed, n: int, direction: str, rng: np.random.Generator) -> dict:
    reg, imp = (int(x) for x in rng.choice(np.arange(1, n), 2, replace=False))
    idx = np.arange(n)
    level = 100.0 * np.where(idx >= reg, 1 + model.regression, 1.0) * np.where(idx >= imp, 1 + model.improvement, 1.0)
    sample, counted = _sampler(level, model.noise, rng)
    outcome = run(Bisection(n, Policy.for_backend(model.backend, model.metric, direction=direction)), sample)
    hunted, other = (reg, imp) if direction == "regression" else (imp, reg)
    isolated = [m["culprit"] for m in outcome.opposing_moves if m.get("status") == "culprit"]
    return {"correct": outcome.found and outcome.culprit == hunted and other in isolated, "hunted": outcome.found
            and outcome.culprit == hunted, "seen": bool(outcome.opposing_moves), "status": outcome.status,
            "builds": len(counted["built"]), "reps": counted["reps"]}


def opposed_case(model: Opposed, n: int, direction: str, trials: int, seed: int) -> dict:
    rng = np.random.default_rng([seed, n, OPPOSED.index(model), ("any", "regression").index(direction), 7])
    rows = [opposed_trial(model, n, direction, rng) for _ in range(trials)]
    require(min(r["builds"] for r in rows) > 0 and min(r["reps"] for r in rows) > 0,
            f"{model.name} ({direction}), N = {n}: a search measured no commit")
    correct = sum(r["correct"] for r in rows) / trials
    return {"model": model.name, "direction": direction, "n": n, "trials": trials, "correct": correct,
            "hunted": sum(r["hunted"] for r in rows) / trials, "seen": sum(r["seen"] for r in rows) / trials,
            "target": model.target, "met": None if model.target is None else correct >= model.target,
            "builds_mean": float(np.mean([r["builds"] for r in rows])), "reps_mean": float(np.mean([r["reps"] for r in rows]))}


def trial(model: Model, n: int, rng: np.random.Generator) -> dict:
    culprit = int(rng.integers(1, n))
    level = np.where(np.arange(n) >= culprit, 100.0 * (1 + model.step), 100.0)
    broken = {i for i in range(1, n - 1) if i != culprit and rng.random() < model.unbuildable}
    built: set[int] = set()
    reps = 0

    def sample(index: int, count: int, fresh: bool) -> list[float] | None:
        nonlocal reps
        built.add(index)
        if index in broken:
            return None
        reps += count
        if model.noise == 0:
            return [float(level[index])] * count
        x = level[index] * (1 + model.noise * rng.standard_normal(count))
        tail = rng.random(count) < TAIL_P
        x[tail] *= 1 + rng.uniform(TAIL_LO, TAIL_HI, tail.sum())
        return [float(v) for v in x]

    outcome = run(Bisection(n, Policy.for_backend(model.backend, model.metric)), sample)
    return {"correct": outcome.found and outcome.culprit == culprit, "status": outcome.status,
            "builds": len(built), "reps": reps}


def case(model: Model, n: int, trials: int, seed: int) -> dict:
    rng = np.random.default_rng([seed, n, MODELS.index(model)])
    started = time.perf_counter()
    rows = [trial(model, n, rng) for _ in range(trials)]
    builds = np.array([r["builds"] for r in rows])
    reps = np.array([r["reps"] for r in rows])
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    correct = sum(r["correct"] for r in rows) / trials
    require(builds.min() > 0 and reps.min() > 0, f"{model.name}, N = {n}: a search measured no commit")
    if model.noise == 0 and not model.unbuildable:
        require(correct > 0, f"{model.name}, N = {n}: no trial of an exact measurement found its culprit")
    return {"model": model.name, "n": n, "log2": math.ceil(math.log2(n)), "trials": trials, "correct": correct,
            "target": model.target, "met": None if model.target is None else correct >= model.target,
            "builds_mean": float(builds.mean()), "builds_max": int(builds.max()), "reps_mean": float(reps.mean()),
            "reps_max": int(reps.max()), "statuses": statuses, "seconds": time.perf_counter() - started}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--lengths", default="8,32,128,512")
    parser.add_argument("--seed", type=int, default=20261121)
    parser.add_argument("--json", type=Path, help="also write every row here")
    parser.add_argument("--opposed-only", action="store_true", help="only the opposed-ranges table")
    parser.add_argument("--smoke", action="store_true", help="6 trials at N = 8, 32; targets not gated, premises checked")
    args = parser.parse_args()
    if args.smoke:
        args.trials, args.lengths = 6, "8,32"
    lengths = [int(x) for x in args.lengths.split(",")]
    warnings.filterwarnings("ignore", message="ks_2samp: Exact calculation unsuccessful")

    rows = []
    print(f"| model | N | ceil(log2 N) | builds mean / max | repetitions mean / max | correct ({args.trials} trials) | target |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for model in [] if args.opposed_only else MODELS:
        for n in lengths:
            r = case(model, n, args.trials, args.seed)
            rows.append(r)
            target = "" if r["target"] is None else f"≥ {r['target']:.0%} {'met' if r['met'] else 'MISSED'}"
            print(f"| {model.name} | {n} | {r['log2']} | {r['builds_mean']:.1f} / {r['builds_max']} | "
                  f"{r['reps_mean']:.1f} / {r['reps_max']} | {r['correct']:.1%} | {target} |", flush=True)
    print()
    print(f"opposed ranges: | model | hunted | N | builds mean | repetitions mean | hunted culprit right | other move seen "
          f"| both right ({args.trials} trials) | target |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for opposed in OPPOSED:
        for direction in ("any", "regression"):
            for n in lengths:
                r = opposed_case(opposed, n, direction, args.trials, args.seed)
                rows.append(r)
                target = "" if r["target"] is None else f"≥ {r['target']:.0%} {'met' if r['met'] else 'MISSED'}"
                print(f"| {opposed.name} | {direction} | {n} | {r['builds_mean']:.1f} | {r['reps_mean']:.1f} | "
                      f"{r['hunted']:.1%} | {r['seen']:.1%} | {r['correct']:.1%} | {target} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    missed = [r for r in rows if r["met"] is False]
    for r in missed:
        print(f"target missed: {r['model']} at N = {r['n']}: {r['correct']:.1%} < {r['target']:.0%} ({r.get('statuses', '')})")
    return 1 if missed and not args.smoke else 0


if __name__ == "__main__":
    sys.exit(main())
