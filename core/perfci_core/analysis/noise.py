"""Robust noise estimates: how much a metric moves from commit to commit when nothing changed.

The per-metric noise model is learned from the series itself, never configured per metric:

- :func:`mad_sigma` — the median absolute deviation scaled to a normal standard deviation
  (x 1.4826), which a few outliers (the +19 % run of DESIGN §4) cannot inflate;
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
