"""Why the adaptive loop misses 2-3 % steps: one line per such step of the synthetic families.

    .venv/bin/python benchmarks/detection/diagnose.py [--seeds 6] [--seed 20240601] [--quick] [--job-drift 0.02]
        [--max-rounds N] [--suspect-commits N] [--all]

Runs run.py's AdaptiveRun (the online walk, then the whole series) on every synthetic series of a seed that holds
a labelled step of 2-3 %, with the same corpus, drift and policy as ``run.py --adaptive``, and prints per step:

- ``found``: exactly at the step, off by N commits (the nearest change the final detection reports), or not;
- ``walk``: the detections of the walk (window ending at commit t) that reported a change within ±1 of the step,
  as ``t=first..last`` and whether the rounds' tests confirmed it (``rounds``) or the search over commits;
- ``suspect``: detections that named a suspect within SUSPECT_SLACK commits of it, the most extra rounds any
  commit within that distance got, and why its suspects stopped getting rounds (``max_rounds``: every commit had
  them; ``budget``: the series' window had no room for a whole round);
- ``closest``: over those detections, the rounds' jobs test (detect.rounds_tests) that came closest to its
  per-look alpha, as p / alpha (<= 1 passes), and at that moment the pin's two tests' p (detect._pin, at
  commit_alpha) and whether it pinned.

``--all`` describes the exact hits too (default: one short line each). The summary counts the outcomes,
and the steps found within ±1 by the series' per-run noise (cv).
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import (REAL_NOISE, SUSPECT_SLACK, TARGET_SIZE, AdaptiveRun, Series, adaptive_corpus,  # noqa: E402
                 load_real_noise)
from perfci_core.analysis.adaptive import Policy  # noqa: E402
from perfci_core.analysis.compare import Verdict  # noqa: E402
from perfci_core.analysis.detect import Settings, _pin, per_look, rounds_tests  # noqa: E402
from perfci_core.analysis.series import resolve_metric  # noqa: E402

SMALL = (TARGET_SIZE, 0.03)


def small_steps(s: Series) -> list[int]:
    return [k for k in s.steps if SMALL[0] <= abs(s.sizes[k]) < SMALL[1]]


def closest_rounds_test(run: AdaptiveRun, k: int, settings: Settings) -> str:
    """The rounds' test, over the walk's detections with a suspect near ``k``, nearest to passing."""
    m = resolve_metric(run.s.metric)
    best: tuple[float, str] | None = None
    for points, r, _, _ in run.trace:
        local = {c: i for i, c in enumerate(points.commits)}
        for sus in r.suspects:
            if sus.why != "unconfirmed" or abs(run.position[sus.suspect] - k) > SUSPECT_SLACK:
                continue
            j = local[sus.suspect]
            around = range(local[sus.commits[0]], local[sus.commits[-1]] + 1)
            look = per_look(settings.search.alpha, settings)
            tests = rounds_tests(points, j, around, m, r.min_effect, settings, look)
            if not tests:
                continue
            alpha = look / len(tests)
            t = min(tests, key=lambda x: x.p_value)
            ratio = t.p_value / alpha
            if best is None or ratio < best[0]:
                check, pinned = _pin(points, 0, j, len(points), m, r.min_effect, settings)
                pin = ("pinned" if pinned else "not pinned: the commit before it vs the commits after it"
                       if check.verdict is Verdict.DIFFERENT else
                       f"not pinned: the commit vs the commits before it p {check.p_value:.1g}")
                jobs = (len(points.run_medians(around.start, j)), len(points.run_medians(j, around.stop)))
                where = (f"p/alpha {ratio:.2g} at t={points.positions[-1] + 1} (jobs {jobs[0]} vs {jobs[1]}, "
                         f"suspect at {run.position[sus.suspect] - k:+d}, {t.rel_change:+.1%}); {pin}")
                best = (ratio, where)
    return best[1] if best else "no rounds' test (no unconfirmed suspect near it)"


def diagnose_series(s: Series, real_noise, policy: Policy, settings: Settings,
                    show_all: bool) -> list[tuple[str, bool, str]]:
    """Per 2-3 % step of ``s``: (its outcome, found within ±1, the line that describes it)."""
    run = AdaptiveRun(s, real_noise, policy, settings)
    run.trace = []
    final = run.walk()
    lines = []
    for k in small_steps(s):
        off = min((j - k for j in final), key=abs, default=None)
        found = "not found" if off is None or abs(off) > 1 else "exact" if off == 0 else f"off by {off:+d}"
        within = off is not None and abs(off) <= 1
        if found == "exact" and not show_all:
            lines.append((found, within, f"{s.name} step {k} {s.sizes[k]:+.1%} cv {s.cv:g}: exact"))
            continue
        seen = [(pts.positions[-1] + 1, ch.by_rounds) for pts, r, _, _ in run.trace for ch in r.changes
                if abs(ch.index - k) <= 1]
        walk = (f"t={seen[0][0]}..{seen[-1][0]} ({'rounds' if any(b for _, b in seen) else 'search'})"
                if seen else "never")
        near = [sus for _, r, _, _ in run.trace for sus in r.suspects
                if abs(run.position[sus.suspect] - k) <= SUSPECT_SLACK]
        nearby = range(max(0, k - SUSPECT_SLACK), min(len(s.points), k + SUSPECT_SLACK + 1))
        rounds = max(run.rounds.get(s.commits[i], 0) for i in nearby)
        why = set()
        for _, _, p, had in run.trace:
            for sus in p.exhausted:
                if abs(run.position[sus.suspect] - k) <= SUSPECT_SLACK:
                    full = all(had.get(c, 0) >= policy.max_rounds for c in sus.commits)
                    why.add("max_rounds" if full else "budget")
        lines.append((found, within,
                      f"{s.name} step {k} {s.sizes[k]:+.1%} cv {s.cv:g}: {found}; walk {walk}; suspect in {len(near)} "
                      f"detections, {rounds} rounds, stopped by {'/'.join(sorted(why)) or '-'}; closest "
                      f"{closest_rounds_test(run, k, settings)}"))
    return lines


def diagnose_seed(seed: int, per_family: int, lengths: tuple[int, int], real_noise, job_drift: float,
                  policy: Policy, settings: Settings, show_all: bool) -> list[tuple[str, float, bool, str]]:
    """(outcome, the series' per-run noise, found within ±1, line) per 2-3 % step of the seed's synthetic series."""
    corpus = [s for s in adaptive_corpus(seed, per_family, lengths, real_noise, job_drift)
              if s.family != "real" and small_steps(s)]
    return [(found, s.cv, within, f"seed {seed}: {line}") for s in corpus
            for found, within, line in diagnose_series(s, real_noise, policy, settings, show_all)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--quick", action="store_true", help="run.py's --quick corpus (2 series per family, 200-600)")
    ap.add_argument("--job-drift", type=float, default=0.0)
    ap.add_argument("--real-noise", type=Path, default=REAL_NOISE)
    ap.add_argument("--max-rounds", type=int, default=Policy().max_rounds,
                    help="Policy.max_rounds; Settings.confirm_looks follows it (the alpha is spent over the looks)")
    ap.add_argument("--suspect-commits", type=int, default=Settings().suspect_commits)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--all", action="store_true", help="describe the exact hits too")
    args = ap.parse_args(argv)
    per_family, lengths = (2, (200, 600)) if args.quick else (4, (200, 1000))
    policy = Policy(max_rounds=args.max_rounds)
    settings = replace(Settings(), suspect_commits=args.suspect_commits, confirm_looks=args.max_rounds)
    seeds = [args.seed + i for i in range(args.seeds)]
    counts: dict[str, int] = {}
    by_cv: dict[float, list[int]] = {}  # per-run noise -> [within ±1, steps]
    work = partial(diagnose_seed, per_family=per_family, lengths=lengths, real_noise=load_real_noise(args.real_noise),
                   job_drift=args.job_drift, policy=policy, settings=settings, show_all=args.all)
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        for steps in pool.map(work, seeds):
            for outcome, noise, within, line in steps:
                print(line, flush=True)
                key = "off by" if outcome.startswith("off by") else outcome
                counts[key] = counts.get(key, 0) + 1
                cv = by_cv.setdefault(noise, [0, 0])
                cv[0] += within
                cv[1] += 1
    print("2-3 % steps of the synthetic families: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print("within ±1 by the series' per-run noise (cv): "
          + ", ".join(f"{cv:g} {hit}/{n}" for cv, (hit, n) in sorted(by_cv.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
