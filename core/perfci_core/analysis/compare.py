"""Two-sample verdicts: is ``after`` SAME as, DIFFERENT from, or not yet distinguishable (UNKNOWN)
from ``before``? The one implementation used by detection (per-commit check, change-point
validation) and by ``perfci bisect`` (each step; the caller adds repetitions while UNKNOWN).

Noisy backends (``pmu``, ``tsc``) — Chromium Pinpoint's rule over the repetitions:

- ``p``: the Cauchy combination (:func:`combined_p`) of the two-sided Kolmogorov-Smirnov and
  Mann-Whitney U p-values (scipy; exact distributions for small samples). Rank tests: the heavy
  upper tail of a fresh-process run (docs/design.md, "These machines": one run +19 %) cannot drag them the way it drags
  a t-test; KS also sees a change of shape, MWU is the stronger for a shift. Pinpoint takes
  ``min(p_KS, p_MWU)``, which rejects more often than its alpha (1.2-1.3 x at 12-50 repetitions,
  ``benchmarks/detection/null_levels.py``); the combination stays within it and costs at most a
  factor 2 in ``p`` when one test alone sees the change.
- DIFFERENT when ``p <= alpha`` and the relative change of the medians is at least
  ``min_effect`` (the series' learned noise floor, :func:`noise.learned_min_effect`).
- SAME when ``p <= alpha`` but the change is below ``min_effect`` (real but not worth acting on),
  or when ``p`` exceeds the *high threshold*: the p-value a true shift of exactly ``min_effect``
  would typically produce at these sample sizes (:func:`high_threshold`). Seeing a weaker signal
  than a minimum-size change would give is evidence of no change of that size. Pinpoint tabulates
  this threshold by simulation; we use the Mann-Whitney normal approximation in closed form.
  SAME is only ever decided when the samples are large enough for the test to reach ``alpha``
  at all (5 vs 5 for alpha = 0.01): with 1 vs 1 nothing but UNKNOWN is honest.
- Otherwise UNKNOWN: the caller measures more repetitions and asks again.

Deterministic backend (``sim``, valgrind instruction counts and simulated caches): the
*exact-change rule*, no statistics. DIFFERENT when ``|median(after) / median(before) - 1| >
tolerance``, else SAME; one sample per side suffices. The default tolerance, 1e-4, sits below
the smallest code change that matters: one extra instruction per 32-packet burst on a ~100
instructions/packet forwarding path is 1/32/100 = +0.03 % IPP, three times the tolerance, while
callgrind counts of the forwarding function are bit-identical run to run (docs/design.md, "These machines"). Counts
that can be near zero (memory hazards per packet) also need an absolute move above their
catalogue ``exact_floor``: 0 -> 0.0001 blocks per packet is one event in 10 000 packets (a drop
landing differently), not a stall the forwarding path acquired.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Sequence

import numpy as np
# scipy (about a second to import) is imported by the functions that use it: the API, the agent and
# the CLI import this module for its types and rules, most of them never for a test.

from perfci_core import metrics as catalogue

from .noise import mad_sigma
from .series import relative_change, resolve_metric

DEFAULT_ALPHA = 0.01
DEFAULT_TOLERANCE = 1e-4


class Verdict(str, Enum):
    SAME = "same"
    DIFFERENT = "different"
    UNKNOWN = "unknown"


class Kind(str, Enum):
    """What a change means for the metric's better-direction (CHANGE: direction unknown)."""

    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    CHANGE = "change"
    NONE = "none"


@dataclass(frozen=True)
class Comparison:
    verdict: Verdict
    p_value: float  # KS and MWU combined (combined_p) for noisy backends; 0.0 / 1.0 for the exact rule
    before_median: float
    after_median: float
    rel_change: float  # (after - before) / |before| of the medians
    min_effect: float  # the relative change below which nothing is DIFFERENT
    kind: Kind  # regression / improvement of the metric (NONE when not DIFFERENT)
    n_before: int
    n_after: int
    exact: bool  # decided by the exact-change rule
    p_ks: float = 1.0
    p_mwu: float = 1.0
    high_threshold: float = 1.0
    notes: tuple[str, ...] = field(default=())
    paired: bool = False  # decided on pairs measured interleaved (n_before = n_after = pairs)

    @property
    def confidence(self) -> float:
        """``1 - p_value``. Not a probability that the change is real: after a search chose the
        boundary, or after several looks, ``p`` is not even a valid p-value on its own."""
        return 1.0 - self.p_value


def kind_of(metric: catalogue.Metric | None, before: float, after: float) -> Kind:
    """Regression or improvement by the metric's better-direction (CHANGE when it is unknown)."""
    if before == after:
        return Kind.NONE
    if metric is None:
        return Kind.CHANGE
    return Kind.REGRESSION if metric.is_regression(before, after) else Kind.IMPROVEMENT


def combined_p(p_values: Sequence[float]) -> float:
    """One p-value from tests of the same data (Cauchy combination, Liu and Xie 2020):
    ``T = mean(cot(pi p_i))``, ``p = atan2(1, T) / pi``. Each ``cot(pi p_i)`` is standard Cauchy
    under the null whatever the dependence between the tests, and so (in the tail that matters)
    is their mean: the combined test keeps its level for tests as correlated as KS and MWU on one
    pair of samples, where ``min`` does not. Equal p-values give that p back; one strong test and
    one indifferent (p = 0.5) give about twice the strong one. ``cot`` and ``atan2`` rather than
    ``tan(pi (0.5 - p))`` keep p-values down to 1e-300 exact."""
    ps = np.clip(np.asarray(p_values, dtype=float), 1e-300, 1.0)
    t = float(np.mean(1.0 / np.tan(np.pi * ps)))
    return float(min(1.0, math.atan2(1.0, t) / math.pi))


def min_attainable_p(n_a: int, n_b: int) -> float:
    """Smallest two-sided Mann-Whitney p-value possible for these sizes: 2 / C(n_a + n_b, n_a)."""
    if n_a < 1 or n_b < 1:
        return 1.0
    return min(1.0, 2.0 / math.comb(n_a + n_b, n_a))


def high_threshold(n_a: int, n_b: int, standardized_effect: float) -> float:
    """The two-sided p-value expected from a Mann-Whitney test when the true shift is
    ``standardized_effect`` noise standard deviations (normal noise):

        P(X < Y) = Phi(d / sqrt 2);  z = (P - 1/2) n_a n_b / sqrt(n_a n_b (n_a + n_b + 1) / 12)
        threshold = 2 (1 - Phi(z))

    1.0 (never SAME) when the effect is 0/unknown or the sizes cannot reach any small p.
    """
    if n_a < 1 or n_b < 1 or not standardized_effect > 0:
        return 1.0
    if math.isinf(standardized_effect):
        return 0.0
    from scipy import stats
    p_order = stats.norm.cdf(standardized_effect / math.sqrt(2.0))
    nn = n_a * n_b
    z = (p_order - 0.5) * nn / math.sqrt(nn * (n_a + n_b + 1) / 12.0)
    return float(2.0 * stats.norm.sf(z))


def _as_array(x: Sequence[float] | np.ndarray, side: str, notes: list[str]) -> np.ndarray:
    a = np.asarray(x, dtype=float).ravel()
    finite = np.isfinite(a)
    if not finite.all():
        notes.append(f"{side}: dropped {int((~finite).sum())} non-finite value(s)")
        a = a[finite]
    return a


def compare(
    before: Sequence[float] | np.ndarray,
    after: Sequence[float] | np.ndarray,
    metric: str | catalogue.Metric | None = None,
    *,
    backend: catalogue.Backend | str | None = None,
    alpha: float = DEFAULT_ALPHA,
    min_effect: float = 0.0,
    noise: float | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> Comparison:
    """SAME / DIFFERENT / UNKNOWN between two sets of repetitions of one metric.

    ``metric`` (catalogue name or Metric; None = direction unknown) only labels the change as
    regression or improvement. ``backend="sim"`` selects the exact-change rule with ``tolerance``.
    ``min_effect`` is a relative change (0.01 = 1 %). ``noise`` is the relative per-repetition
    noise (standard deviation / level) used for the SAME threshold; when omitted it is estimated
    from the two samples (robust MAD, pooled), which needs at least two values per side.
    Non-finite values are dropped with a note; an empty side gives UNKNOWN.
    """
    m = resolve_metric(metric) if metric is not None else None
    notes: list[str] = []
    a = _as_array(before, "before", notes)
    b = _as_array(after, "after", notes)
    exact = backend is not None and catalogue.Backend(backend) is catalogue.Backend.SIM
    if a.size == 0 or b.size == 0:
        notes.append("an empty sample: no verdict")
        return Comparison(Verdict.UNKNOWN, 1.0, math.nan, math.nan, math.nan, min_effect, Kind.NONE,
                          int(a.size), int(b.size), exact, notes=tuple(notes))
    med_a, med_b = float(np.median(a)), float(np.median(b))
    rel = relative_change(med_a, med_b)
    if exact:
        return _compare_exact(a, b, med_a, med_b, rel, m, tolerance, notes)

    from scipy import stats
    p_ks = float(stats.ks_2samp(a, b).pvalue)
    if np.ptp(np.concatenate([a, b])) == 0.0:
        p_mwu = 1.0  # every value identical: no evidence of a difference
    else:
        p_mwu = float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)
    p = combined_p((p_ks, p_mwu))

    if noise is None:
        if a.size >= 2 and b.size >= 2:
            level = abs(med_a) if med_a != 0 else max(abs(med_b), 1e-300)
            noise = mad_sigma(np.concatenate([a - med_a, b - med_b])) / level
        else:
            noise = math.nan
    if not math.isfinite(noise) or min_attainable_p(a.size, b.size) > alpha:
        high = 1.0
    elif noise == 0.0:
        high = 0.0 if min_effect > 0 else 1.0
    else:
        high = high_threshold(a.size, b.size, min_effect / noise)

    big_enough = abs(rel) >= min_effect
    if p <= alpha and big_enough and rel != 0.0:
        verdict = Verdict.DIFFERENT
    elif p <= alpha:
        verdict = Verdict.SAME
        notes.append(f"significant but {rel:+.3%} is below the minimum effect {min_effect:.3%}")
    elif p > high:
        verdict = Verdict.SAME
    else:
        verdict = Verdict.UNKNOWN
    kind = kind_of(m, med_a, med_b) if verdict is Verdict.DIFFERENT else Kind.NONE
    return Comparison(verdict, p, med_a, med_b, rel, min_effect, kind, int(a.size), int(b.size), False,
                      p_ks=p_ks, p_mwu=p_mwu, high_threshold=high, notes=tuple(notes))


def _compare_exact(a: np.ndarray, b: np.ndarray, med_a: float, med_b: float, rel: float,
                   m: catalogue.Metric | None, tolerance: float, notes: list[str]) -> Comparison:
    for side, x, med in (("before", a, med_a), ("after", b, med_b)):
        spread = float(np.ptp(x))
        if spread > tolerance * max(abs(med), 1e-300):
            notes.append(f"{side}: deterministic samples differ by {spread:g} (median used)")
    floor = m.exact_floor if m is not None else 0.0
    different = abs(rel) > tolerance and abs(med_b - med_a) > floor
    if abs(rel) > tolerance and not different:
        notes.append(f"moved by {med_b - med_a:+g}, within the metric's floor of {floor:g}: not a change")
    verdict = Verdict.DIFFERENT if different else Verdict.SAME
    kind = kind_of(m, med_a, med_b) if different else Kind.NONE
    return Comparison(verdict, 0.0 if different else 1.0, med_a, med_b, rel, tolerance, kind,
                      int(a.size), int(b.size), True, p_ks=math.nan, p_mwu=math.nan,
                      high_threshold=math.nan, notes=tuple(notes))
