"""Why the adaptive loop misses 2-3 % steps: one line per such step of the synthetic families.

    .venv/bin/python benchmarks/detection/diagnose.py [--seeds 6] [--seed 20240601] [--quick] [--smoke]
        [--job-drift 0.02] [--all]

Runs run.py's AdaptiveRun (the online walk, then the whole series) on every synthetic series of a seed that holds
a labelled step of 2-3 %, with the same corpus, drift and policy as ``run.py --adaptive``, and prints per step:

- ``found``: exactly at the step, off by N commits (the nearest change the final detection reports), or not;
- ``walk``: the detections of the walk (window ending at commit t) that reported a change within ±1 of the step,
  as ``t=first..last`` and whether its bracket's sessions confirmed it (``sessions``) or the search over commits;
- ``suspect``: detections that named an unconfirmed suspect within SUSPECT_SLACK commits of it, the most sessions
  its brackets got, and why they stopped (``looks``: its bracket had all its sessions; ``budget``: the series'
  window had no room for a session);
- ``bracket``: the last judgement of the sessions of a bracket holding the step, as p / the look's level and the
  paired change.

``--all`` describes the exact hits too (default: one short line each). The summary counts the outcomes, and the
steps found within ±1 by the series' per-run noise (cv). ``--smoke``: one seed of run.py's smoke corpus, in
seconds; it fails when no synthetic series of it holds a 2-3 % step (nothing to diagnose).
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import (REAL_NOISE, SUSPECT_SLACK, TARGET_SIZE, AdaptiveRun, Series, adaptive_corpus,  # noqa: E402
                 load_real_noise)
from perfci_core.analysis.adaptive import Policy  # noqa: E402
from perfci_core.analysis.detect import Settings, confirmation  # noqa: E402
from perfci_core.analysis.series import resolve_metric  # noqa: E402

SMALL = (TARGET_SIZE, 0.03)


def small_steps(s: Series) -> list[int]:
    return [k for k in s.steps if SMALL[0] <= abs(s.sizes[k]) < SMALL[1]]


def bracket_verdict(run: AdaptiveRun, k: int, settings: Settings) -> str:
    """The last judgement of a bracket holding ``k`` (its sessions' own pairs, the look's level)."""
    points = run.trace[-1][0] if run.trace else None
    if points is None:
        return "no detection"
    own = points.own()
    m = resolve_metric(run.s.metric)
    held = [((a, b), pairs) for (a, b), pairs in confirmation.own_sessions(points, own).items()
            if run.position[own.commits[a]] < k <= run.position[own.commits[b]]]
    if not held:
        return "no session of a bracket holding it"
    (a, b), pairs = max(held, key=lambda x: len(x[1]))
    brackets = confirmation.judge({(a, b): pairs}, own, [], m, run.trace[-1][1].min_effect, settings)
    if not brackets:
        return "no session of a bracket holding it"
    br = brackets[0]
    level = confirmation.look_level(br.looks, settings)
    return (f"{run.position[own.commits[a]] - k:+d}..{run.position[own.commits[b]] - k:+d}: {br.state} after {br.looks} "
            f"session(s), p/level {br.test.p_value / level:.2g}, {br.test.rel_change:+.1%}")


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
        seen = [(pts.positions[-1] + 1, ch.confirmed) for pts, r, _, _ in run.trace for ch in r.changes
                if abs(ch.index - k) <= 1]
        walk = (f"t={seen[0][0]}..{seen[-1][0]} ({'sessions' if any(b for _, b in seen) else 'search'})"
                if seen else "never")
        near = [sus for _, r, _, _ in run.trace for sus in r.suspects
                if sus.why == "unconfirmed" and abs(run.position[sus.suspect] - k) <= SUSPECT_SLACK]
        looks = max((sus.looks for sus in near), default=0)
        why = {"looks" if sus.looks >= policy.looks else "budget" for _, _, p, _ in run.trace for sus in p.exhausted
               if sus.why == "unconfirmed" and abs(run.position[sus.suspect] - k) <= SUSPECT_SLACK}
        lines.append((found, within,
                      f"{s.name} step {k} {s.sizes[k]:+.1%} cv {s.cv:g}: {found}; walk {walk}; suspect in {len(near)} "
                      f"detections, {looks} session(s), stopped by {'/'.join(sorted(why)) or '-'}; bracket "
                      f"{bracket_verdict(run, k, settings)}"))
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
    ap.add_argument("--smoke", action="store_true", help="one seed of run.py's smoke corpus: seconds")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--all", action="store_true", help="describe the exact hits too")
    args = ap.parse_args(argv)
    per_family, lengths = (1, (200, 200)) if args.smoke else (2, (200, 600)) if args.quick else (4, (200, 1000))
    policy, settings = Policy(), Settings()
    seeds = [args.seed + i for i in range(1 if args.smoke else args.seeds)]
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
    if not counts:
        print("premise failed: no synthetic series of these seeds holds a 2-3 % step: nothing to diagnose")
        return 1
    print("2-3 % steps of the synthetic families: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print("within ±1 by the series' per-run noise (cv): "
          + ", ".join(f"{cv:g} {hit}/{n}" for cv, (hit, n) in sorted(by_cv.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
