"""Robust noise estimates: how much a metric moves from commit to commit when nothing changed.

The per-metric noise model is learned from the series itself, never configured per metric:

- :func:`mad_sigma` — the median absolute deviation scaled to a normal standard deviation
  (x 1.4826), which a few outliers (the +19 % run in docs/design.md, "These machines") cannot inflate;
- :func:`diff_sigma` — the noise of a commit-ordered sequence from its *first differences*:
  sigma = MAD-sigma(diff(y)) / sqrt(2). A step or slow drift moves only one difference (or all of
  them by a tiny constant), so the estimate is not inflated by the changes we are looking for,
  unlike the plain standard deviation of the series;
- :func:`learned_min_effect` — the smallest relative change worth an alert for this series:
  ``max(floor, factor x noise)``; ``noise`` is the relative commit-to-commit noise of the
  per-commit medians, so a metric that jitters by 1 % needs a bigger step than one that
  jitters by 0.01 %.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MAD_TO_SIGMA = 1.4826  # 1 / Phi^-1(3/4): MAD of a normal sample -> its standard deviation


def mad_sigma(x: np.ndarray) -> float:
    """Normal-consistent robust scale: 1.4826 x median(|x - median(x)|); 0 for < 2 values."""
    a = np.asarray(x, dtype=float)
    if a.size < 2:
        return 0.0
    return MAD_TO_SIGMA * float(np.median(np.abs(a - np.median(a))))


def diff_sigma(y: np.ndarray) -> float:
    """Noise of a sequence from its first differences, robust to steps, drift and outliers.

    For i.i.d. noise of scale s, diff(y) has scale s x sqrt(2). The MAD of the differences is
    taken around zero (no change is the expected difference), which keeps a single step from
    shifting the centre.
    """
    a = np.asarray(y, dtype=float)
    if a.size < 3:
        return 0.0
    d = np.diff(a)
    return MAD_TO_SIGMA * float(np.median(np.abs(d))) / math.sqrt(2.0)


def learned_min_effect(relative_noise: float, floor: float, factor: float) -> float:
    """Smallest relative change reported for a series of this noise: max(floor, factor x noise)."""
    if not math.isfinite(relative_noise) or relative_noise < 0:
        raise ValueError(f"relative noise must be finite and >= 0, got {relative_noise!r}")
    return max(floor, factor * relative_noise)


# --- noisy runs ----------------------------------------------------------------------------------
#
# A measurement whose repetitions spread far beyond the machine's usual noise says more about the
# host at that moment (other work on the CPUs, steal) than about the commit. The one place that
# decides it:
#
# - spread = MAD-sigma of the repetitions / their median (robust: one +19 % run of a quiet host,
#   docs/design.md "These machines", does not make a run noisy; half the runs at 40-266 % of the median does);
# - "usual" = the machine's usual spread: the median spread of its earlier runs of the same backend
#   and config when at least NOISY_HISTORY of them are known, else unknown;
# - noisy when spread > max(NOISY_FACTOR x usual, NOISY_MIN_SPREAD) with a usual spread, and
#   spread > NOISY_SPREAD without one. NOISY_SPREAD = 10 %: the quiet 2-core VM of docs/design.md ("These machines") has
#   a single-run CV of 3.7 % (MAD-sigma lower still), so 10 % is well clear of a quiet host, while
#   the jobs recorded under load 4-6 (benchmarks/detection/data/tsc-noise.json) spread 19-41 %.
NOISY_SPREAD = 0.10
NOISY_FACTOR = 3.0
NOISY_MIN_SPREAD = 0.03
NOISY_HISTORY = 5
NOISY_MIN_REPS = 3  # fewer repetitions say nothing about their spread


@dataclass(frozen=True)
class Spread:
    """How far one measurement's repetitions spread around their median."""

    relative: float  # MAD-sigma / |median|
    low: float  # min / median
    high: float  # max / median
    n: int


def spread_of(values: np.ndarray) -> Spread | None:
    """The spread of one measurement's repetitions; None with fewer than NOISY_MIN_REPS finite
    values or a zero median (no relative spread exists)."""
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    if a.size < NOISY_MIN_REPS:
        return None
    med = float(np.median(a))
    if med == 0.0:
        return None
    return Spread(mad_sigma(a) / abs(med), float(a.min()) / med, float(a.max()) / med, int(a.size))


def usual_spread(earlier: list[float]) -> float | None:
    """The machine's usual spread from the spreads of its earlier (not noisy) runs."""
    known = [s for s in earlier if math.isfinite(s) and s >= 0]
    return float(np.median(known)) if len(known) >= NOISY_HISTORY else None


def noisy_threshold(usual: float | None) -> tuple[float, str]:
    """The spread above which a run is noisy, and what it is based on (for the result's note)."""
    if usual is None:
        return NOISY_SPREAD, f"the absolute threshold {NOISY_SPREAD:.0%} (this machine's usual spread is not known yet)"
    limit = max(NOISY_FACTOR * usual, NOISY_MIN_SPREAD)
    return limit, f"{NOISY_FACTOR:g} x this machine's usual spread {usual:.2%} (at least {NOISY_MIN_SPREAD:.0%})"
