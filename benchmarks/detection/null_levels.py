"""Null simulation: how often each of perfci's decisions says "changed" when nothing changed,
against the level it states.

    .venv/bin/python benchmarks/detection/null_levels.py [--seed 1] [--quick] [--smoke] [--only compare,pairs,bisect,confirmation] [--sims N]

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
- ``pairs``: :func:`perfci_core.analysis.paired.paired_compare` (the signed-rank test, burst pairs
  left out by their sizes) over 9 and 25 pairs of normal noise, Student t3 noise with a quarter of
  the runs slowed by 8-75 %, and adjacent runs of the recorded quiet jobs in a random order.
- ``confirmation``: detection with its confirmation loop (:mod:`perfci_core.analysis.adaptive`, the
  server's): a flat 120-commit series at 3 repetitions per commit (2 % normal noise, and again with
  every job on a host 2 % slower or faster); suspects (made plentiful: a low penalty and a loose
  suspect alpha) get the sessions of their brackets until the policy asks nothing more; a suspect
  that ends as a change its bracket confirmed was confirmed falsely. The confirmation's alpha is
  raised to 0.05 (the default is 1e-3) so that the rate can be counted per suspect.

``--smoke`` runs a few simulations of each (seconds); every run first checks its premise, the
recorded noise being there.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(ROOT / "core")]

from perfci_core.analysis import Point, detect  # noqa: E402
from perfci_core.analysis.adaptive import Policy, plan  # noqa: E402
from perfci_core.analysis.bisect import Bisection, run as run_bisection  # noqa: E402
from perfci_core.analysis.bisect import Policy as BisectPolicy  # noqa: E402
from perfci_core.analysis.compare import Verdict, compare  # noqa: E402
from perfci_core.analysis.paired import paired_compare  # noqa: E402
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


def confirmation_run(rng: np.random.Generator, settings: Settings, policy: Policy, drift: float, n: int = 120,
                     reps: int = 3) -> tuple[int, int]:
    """One flat series through the confirmation loop: (suspects given sessions, of them ending as a
    change their bracket confirmed, within one commit). Every job (a commit's own, each round, each
    session: both its sides) runs on a host ``drift`` slower or faster."""
    def job(count: int, host: float | None = None) -> list[float]:
        host = 1 + drift * rng.standard_normal() if host is None else host
        return list(100.0 * host * (1 + 0.02 * rng.standard_normal(count)))

    values = [job(reps) for _ in range(n)]
    jobs, keys = [[reps] for _ in range(n)], [[0] for _ in range(n)]
    commits = [f"c{i}" for i in range(n)]
    rounds: dict[str, int] = {}
    suspected: set[int] = set()
    spent = sessions = 0
    for _ in range(policy.looks + 12):
        r = detect(clean([Point.of(commits[i], values[i], jobs[i], keys[i]) for i in range(n)]), "cpp", "tsc", settings)
        p = plan(r.suspects, rounds, spent, n * reps, reps, policy)
        if not p.requests:
            break
        for q in p.requests:
            i = int(q.commit[1:])
            if q.partner is None:
                values[i] += job(reps)
                jobs[i].append(reps)
                keys[i].append(0)
                spent += reps
            elif i < int(q.partner[1:]):  # one session: both sides on one host state
                j, host, sessions = int(q.partner[1:]), 1 + drift * rng.standard_normal(), sessions + 1
                for k in (i, j):
                    values[k] += job(q.repetitions, host)
                    jobs[k].append(q.repetitions)
                    keys[k].append(sessions)
                spent += 2 * q.repetitions
                suspected.add(int(q.suspect.suspect[1:]))
            rounds[q.commit] = q.round
    confirmed = {c.index for c in r.changes if c.confirmed}
    return len(suspected), sum(any(abs(k - j) <= 2 for j in confirmed) for k in suspected)


def confirmation_levels(rng: np.random.Generator, sims: int, drifts: tuple[float, ...] = (0.0, 0.02)) -> list[str]:
    """Per suspect given sessions, the share its bracket confirms, against ``confirm_alpha`` (raised
    to 0.05 so that the rate can be counted; the suspects' own level comes on top of it)."""
    out = []
    settings = Settings(confirm_alpha=0.05, suspect_alpha=0.2, suspect_penalty=0.1)  # many suspects to confirm
    policy = Policy(budget_fraction=2.0)  # no budget cap: every suspect gets all its looks
    for drift in drifts:
        suspects = confirmed = 0
        for _ in range(sims):
            a, b = confirmation_run(rng, settings, policy, drift)
            suspects += a
            confirmed += b
        out.append(row(f"confirmation, job drift {drift:.0%}: confirmed", confirmed, suspects, settings.confirm_alpha))
    return out


def pairs_levels(rng: np.random.Generator, sims: int) -> list[str]:
    """:func:`paired_compare` (the signed-rank test, burst pairs left out by their sizes) on pairs of
    one distribution: normal, Student t3 with a quarter of the runs slowed by 8-75 %, and adjacent
    runs of the recorded quiet jobs in a random order."""
    jobs = [np.asarray(j["cpp"], dtype=float) for j in json.loads(RECORDING.read_text())["jobs"]]

    def recorded(n: int) -> tuple[np.ndarray, np.ndarray]:
        picks = [jobs[int(rng.integers(len(jobs)))] for _ in range(n)]
        ks = [2 * int(rng.integers(j.size // 2)) for j in picks]
        pairs = [(j[k], j[k + 1]) if rng.random() < 0.5 else (j[k + 1], j[k]) for j, k in zip(picks, ks)]
        return np.array([a for a, _ in pairs]), np.array([b for _, b in pairs])

    def slowed(n: int) -> np.ndarray:
        return 1 + 0.02 * rng.standard_t(3, n) / math.sqrt(3) + (rng.random(n) < 0.25) * rng.uniform(0.08, 0.75, n)

    draws = {"normal": lambda n: (1 + 0.02 * rng.standard_normal(n), 1 + 0.02 * rng.standard_normal(n)),
             "t3 + slowed runs": lambda n: (slowed(n), slowed(n)), "recorded tsc": recorded}
    out = []
    for n in (9, 25):
        for alpha in (0.01, 0.05):
            for name, draw in draws.items():
                k = sum(paired_compare(*draw(n), "cpp", alpha=alpha).verdict is Verdict.DIFFERENT for _ in range(sims))
                out.append(row(f"pairs {n}, {name}", k, sims, alpha))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="a tenth of the simulations")
    ap.add_argument("--smoke", action="store_true", help="a few simulations of each procedure: seconds, premise checked")
    ap.add_argument("--only", default="compare,pairs,bisect,confirmation", help="comma-separated procedures")
    ap.add_argument("--sims", type=int, help="simulations per row instead of each procedure's own count")
    args = ap.parse_args(argv)
    if not RECORDING.exists():
        print(f"premise failed: {RECORDING} (the recorded noise every procedure is also run on) is missing")
        return 1
    scale = 0.002 if args.smoke else 0.1 if args.quick else 1.0
    parts = {"compare": (compare_levels, 4000), "pairs": (pairs_levels, 4000), "bisect": (bisect_levels, 1000),
             "confirmation": (confirmation_levels, 150)}
    wanted = args.only.split(",")
    unknown = set(wanted) - set(parts)
    if unknown:
        ap.error(f"unknown procedure(s) {', '.join(sorted(unknown))}; known: {', '.join(parts)}")
    print(f"{'procedure (null: nothing changed)':<44} {'level':>7} {'rate':>8} {'ratio':>7}  95 % interval")
    for i, name in enumerate(wanted):
        fn, sims = parts[name]
        started = time.monotonic()
        for line in fn(np.random.default_rng([args.seed, i]), args.sims or max(2 if args.smoke else 10, int(sims * scale))):
            print(line, flush=True)
        print(f"  ({name}: {time.monotonic() - started:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
