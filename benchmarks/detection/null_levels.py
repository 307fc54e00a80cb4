"""Null simulation: how often each of perfci's decisions says "changed" when nothing changed,
against the level it states.

    .venv/bin/python benchmarks/detection/null_levels.py [--seed 1] [--quick] [--only compare,bisect,rounds] [--sims N]

Every sample is drawn from one distribution (no step anywhere), so every DIFFERENT / culprit /
confirmation is a false positive; the table prints its rate, the stated level, their ratio and a
95 % Wilson interval of the rate. The levels are set large enough (0.01-0.05) for the rate to be
counted in minutes; each procedure's level is a property of the procedure at any alpha.

- ``compare``: :func:`perfci_core.analysis.compare.compare` (KS and Mann-Whitney combined) at n
  against n repetitions, next to the rule it replaced (``min(p_KS, p_MWU)``), on normal noise,
  Student t3 noise with rare +19 % runs, and the recorded ``tsc`` runs (data/tsc-noise-quiet.json,
  values drawn independently from all 192: the test's null is exchangeable values).
- ``bisect``: :class:`perfci_core.analysis.bisect.Bisection` over 8 flat commits with the default
  noisy policy (5 repetitions, +5 while undecided, up to 40; alpha 0.01 spent over the 8 looks,
  ``Policy.spending``): the share of searches that report a culprit, and the share whose endpoints
  alone are called DIFFERENT (the test that adds repetitions and looks again). Then the server's
  policy (``Policy.measured_once``: one job of 5 repetitions per commit, nothing added, each
  comparison one look at the whole alpha), its rows after the others so that those draw as before.
- ``rounds``: detection with confirmation rounds (:mod:`perfci_core.analysis.adaptive`, the
  server's loop): a flat 120-commit series at 3 repetitions per commit (2 % normal noise, and
  again with every job on a host 2 % slower or faster); its suspects get rounds until the policy
  asks nothing more; a suspect that ends as a change (within one commit) was confirmed falsely.
  The search's alpha is raised to 0.01 (the default is 1e-4) so that the rate can be counted;
  ``looks 1`` is the rule before alpha spending (every round at the full alpha). ``--search-own-jobs``:
  the search over commits on each commit's own job only (``Settings.search_own_jobs``).
  The main search then validates at 0.01 too, so a suspect it turns into a change counts as well:
  this row measures the whole loop, not the rounds' tests alone. (The main search selects and
  validates on each commit's own job only, so rounds cannot turn a suspect into one of its changes.)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(ROOT / "core")]

from perfci_core.analysis import Point, detect  # noqa: E402
from perfci_core.analysis.adaptive import Policy, plan  # noqa: E402
from perfci_core.analysis.bisect import Bisection, run as run_bisection  # noqa: E402
from perfci_core.analysis.bisect import Policy as BisectPolicy  # noqa: E402
from perfci_core.analysis.changepoints import SearchSettings  # noqa: E402
from perfci_core.analysis.compare import Verdict, compare  # noqa: E402
from perfci_core.analysis.detect import Settings  # noqa: E402
from perfci_core.analysis.series import clean  # noqa: E402

RECORDING = HERE / "data" / "tsc-noise-quiet.json"


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return math.nan, math.nan
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def row(name: str, k: int, n: int, level: float) -> str:
    lo, hi = wilson(k, n)
    rate = k / n if n else math.nan
    return (f"{name:<44} {level:>7.3f} {rate:>8.4f} {rate / level:>6.2f}x  "
            f"[{lo:.4f}, {hi:.4f}]  {k}/{n}")


def noise_draw(kind: str, recorded: np.ndarray):
    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        if kind == "normal":
            return 100.0 * (1 + 0.02 * rng.standard_normal(n))
        if kind == "t3 + bursts":
            return 100.0 * (1 + 0.02 * rng.standard_t(3, n) / math.sqrt(3.0) + 0.19 * (rng.random(n) < 0.02))
        return rng.choice(recorded, n)
    return draw


def recorded_values() -> np.ndarray:
    return np.concatenate([np.asarray(j["cpp"], float) for j in json.loads(RECORDING.read_text())["jobs"]])


def compare_levels(rng: np.random.Generator, sims: int) -> list[str]:
    out = []
    recorded = recorded_values()
    for kind in ("normal", "t3 + bursts", "recorded tsc"):
        draw = noise_draw(kind, recorded)
        for n in (5, 12, 20, 50):
            hits = {a: [0, 0] for a in (0.01, 0.05)}  # alpha -> [compare, min rule]
            for _ in range(sims):
                a, b = draw(rng, n), draw(rng, n)
                c = compare(a, b, "cpp", backend="tsc", alpha=0.05)
                for alpha, h in hits.items():
                    h[0] += c.p_value <= alpha
                    h[1] += min(c.p_ks, c.p_mwu) <= alpha
            for alpha, (combined, old) in hits.items():
                out.append(row(f"compare {kind}, {n} vs {n}", combined, sims, alpha))
                out.append(row("  min(p_KS, p_MWU), the rule before", old, sims, alpha))
    return out


def bisect_levels(rng: np.random.Generator, sims: int) -> list[str]:
    out = []
    recorded = recorded_values()
    for kind in ("normal", "t3 + bursts", "recorded tsc"):
        draw = noise_draw(kind, recorded)
        culprits = endpoints = 0
        for _ in range(sims):
            b = Bisection(8, BisectPolicy.for_backend("tsc", "cpp"))
            outcome = run_bisection(b, lambda i, k, fresh: list(draw(rng, k)))
            culprits += outcome.found
            endpoints += any(s["phase"] == "endpoints" and s["why"] == Verdict.DIFFERENT.value for s in b.state.steps)
        alpha = b.policy.alpha
        out.append(row(f"bisect {kind}: culprit reported", culprits, sims, alpha))
        out.append(row("  endpoints DIFFERENT (up to 8 looks)", endpoints, sims, alpha))
    for kind in ("normal", "t3 + bursts", "recorded tsc"):
        draw = noise_draw(kind, recorded)
        culprits = endpoints = 0
        for _ in range(sims):
            b = Bisection(8, BisectPolicy.measured_once("tsc", "cpp", 5))
            outcome = run_bisection(b, lambda i, k, fresh: list(draw(rng, k)))
            culprits += outcome.found
            endpoints += any(s["phase"] == "endpoints" and s["why"] == Verdict.DIFFERENT.value for s in b.state.steps)
        out.append(row(f"server bisect {kind}: culprit reported", culprits, sims, b.policy.alpha))
        out.append(row("  endpoints DIFFERENT (one look)", endpoints, sims, b.policy.alpha))
    return out


def rounds_run(rng: np.random.Generator, settings: Settings, policy: Policy, drift: float, n: int = 120,
               reps: int = 3) -> tuple[int, int, int]:
    """One flat series through the confirmation loop: (suspects given rounds, of them ending as a
    change, of them confirmed by the rounds' own tests). Every job (a commit's own and each round) runs on a host
    ``drift`` slower or faster. Only unconfirmed suspects count: an unpinned one was a change before any round."""
    def job() -> list[float]:
        host = 1 + drift * rng.standard_normal()
        return list(100.0 * host * (1 + 0.02 * rng.standard_normal(reps)))

    values = [job() for _ in range(n)]
    jobs = [[reps] for _ in range(n)]
    commits = [f"c{i}" for i in range(n)]
    rounds: dict[str, int] = {}
    suspected: set[int] = set()
    spent = 0
    for _ in range(policy.max_rounds + 2):
        s = clean([Point.of(commits[i], values[i], jobs[i]) for i in range(n)])
        r = detect(s, "cpp", "tsc", settings)
        p = plan(r.suspects, rounds, spent, n * reps, reps, policy)
        if not p.requests:
            break
        for q in p.requests:
            i = int(q.commit[1:])
            values[i] += job()
            jobs[i].append(reps)
            rounds[q.commit] = q.round
            spent += reps
            if q.suspect.why == "unconfirmed":  # an unpinned one is a change of the search already, before any round
                suspected.add(int(q.suspect.suspect[1:]))
    found = {c.index for c in r.changes}
    by_rounds = {c.index for c in r.changes if c.by_rounds}
    return (len(suspected), sum(any(abs(k - j) <= 1 for j in found) for k in suspected),
            sum(any(abs(k - j) <= 1 for j in by_rounds) for k in suspected))


def rounds_levels(rng: np.random.Generator, sims: int, drifts: tuple[float, ...] = (0.0, 0.02),
                  own_jobs: bool = False) -> list[str]:
    out = []
    alpha = 0.01
    # A low suspect penalty and a loose suspect alpha give a flat series suspects to confirm.
    base = Settings(search=SearchSettings(alpha=alpha), suspect_alpha=0.2, suspect_penalty=0.1,
                    search_own_jobs=own_jobs)
    policy = Policy(budget_fraction=1.0)  # no budget cap: every suspect gets all its rounds
    for drift in drifts:
        for looks in (base.confirm_looks, 1):
            settings = replace(base, confirm_looks=looks)
            suspects = confirmed = by_rounds = 0
            for _ in range(sims):
                a, b, c = rounds_run(rng, settings, policy, drift)
                suspects += a
                confirmed += b
                by_rounds += c
            out.append(row(f"rounds, job drift {drift:.0%}, looks {looks}: a change", confirmed, suspects, alpha))
            out.append(row("  of them by the rounds' own tests", by_rounds, suspects, alpha))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="a tenth of the simulations")
    ap.add_argument("--only", default="compare,bisect,rounds", help="comma-separated procedures")
    ap.add_argument("--sims", type=int, help="simulations per row instead of each procedure's own count")
    ap.add_argument("--search-own-jobs", action="store_true",
                    help="rounds: the search over commits on each commit's own job only (Settings.search_own_jobs)")
    args = ap.parse_args(argv)
    scale = 0.1 if args.quick else 1.0
    rounds = partial(rounds_levels, own_jobs=args.search_own_jobs)
    parts = {"compare": (compare_levels, 4000), "bisect": (bisect_levels, 1000), "rounds": (rounds, 150)}
    wanted = args.only.split(",")
    unknown = set(wanted) - set(parts)
    if unknown:
        ap.error(f"unknown procedure(s) {', '.join(sorted(unknown))}; known: {', '.join(parts)}")
    print(f"{'procedure (null: nothing changed)':<44} {'level':>7} {'rate':>8} {'ratio':>7}  95 % interval")
    for i, name in enumerate(wanted):
        fn, sims = parts[name]
        started = time.monotonic()
        for line in fn(np.random.default_rng([args.seed, i]), args.sims or max(10, int(sims * scale))):
            print(line, flush=True)
        print(f"  ({name}: {time.monotonic() - started:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
