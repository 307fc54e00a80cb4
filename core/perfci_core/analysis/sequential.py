"""Alpha spending over the looks of a test that adds repetitions and tests again.

A comparison that is UNKNOWN gets more repetitions and is tested again (bisect: +5 per commit,
up to 8 looks). Each look at the full ``alpha`` rejects a null more often than ``alpha``: the
endpoints of flat ranges were called DIFFERENT 2.2-2.7x as often as alpha = 0.01
(docs/detection.md). A spending function (Lan and DeMets 1983) says how much of ``alpha`` may be
spent by information fraction ``t`` (0..1); look ``k`` of ``looks`` equally spaced ones tests at
the increment ``spent(k / looks) - spent((k - 1) / looks)``. The increments sum to ``alpha``, so by
the union bound a null is rejected at most ``alpha`` of the time over all the looks, whatever
the dependence between them (the exact group-sequential boundaries would assume the test
statistics' joint normality, which rank tests at 5 vs 5 repetitions are far from).

Shapes (:data:`SPENDING`):

- ``pocock`` (``alpha ln(1 + (e - 1) t)``): about even over the looks, so a clear step is decided
  at the second look (10 vs 10: 0.0016 of alpha = 0.01). The first look's share (0.0020) is below
  anything 5 vs 5 repetitions can reach (2 / 252 = 0.008), so a first look never rejects.
- ``obrien-fleming`` (``2 - 2 Phi(z_{alpha/2} / sqrt t)``): almost nothing early, most at the last
  looks; more repetitions before any decision, more power at the cap.
- ``even`` (``alpha t``): ``alpha / looks`` at every look (Bonferroni), for loops whose looks are
  alike (``compare --measure``'s batches of pairs, detection's confirmation rounds).
"""

from __future__ import annotations

import math
from typing import Literal

# scipy (about a second to import) is imported by the functions that use it: the API, the agent and
# the CLI import this module for its types and rules, most of them never for a test.

Spending = Literal["pocock", "obrien-fleming", "even"]
SPENDING: tuple[str, ...] = ("pocock", "obrien-fleming", "even")


def spent(alpha: float, t: float, shape: Spending = "pocock") -> float:
    """The share of ``alpha`` a spending function of ``shape`` allows by information fraction ``t``."""
    if shape not in SPENDING:
        raise ValueError(f"spending must be one of {', '.join(SPENDING)}, got {shape!r}")
    t = min(max(t, 0.0), 1.0)
    if t == 0.0:
        return 0.0
    if shape == "pocock":
        return alpha * math.log(1.0 + (math.e - 1.0) * t)
    if shape == "even":
        return alpha * t
    from scipy import stats
    return float(2.0 * stats.norm.sf(stats.norm.isf(alpha / 2.0) / math.sqrt(t)))


def look_alpha(alpha: float, look: int, looks: int, shape: Spending = "pocock") -> float:
    """The level of look ``look`` (1-based) of at most ``looks`` equally spaced ones."""
    if looks < 1 or not 1 <= look <= looks:
        raise ValueError(f"need 1 <= look <= looks, got look {look} of {looks}")
    return spent(alpha, look / looks, shape) - spent(alpha, (look - 1) / looks, shape)
