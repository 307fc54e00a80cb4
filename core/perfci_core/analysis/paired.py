"""Paired verdicts: two commits measured interleaved, decided on the per-pair differences.

Why pairs. The repetitions of one job run back to back and share the host's state at that moment
(load from other work, frequency, cache pressure), so on a busy host a block of ``before`` runs and
a later block of ``after`` runs differ by whatever the host did in between: the independent-samples
test of :mod:`.compare` reads that drift as a change (a comment-only commit called a -54 % PPS
regression). Measuring A B A B ... with the order inside each pair drawn at random makes the two
runs of a pair share the host's state, and the random order makes the sign of any drift inside a
pair a coin toss.

The statistic. Per pair ``r_i = ln(after_i / before_i)`` (log ratios: a +5 % and a -5 % move weigh
the same and the host's multiplicative slow-down cancels; counts that can be zero use the plain
differences ``after_i - before_i`` instead). The test is the **Wilcoxon signed-rank test** on ``r``
(exact over every sign pattern, ties and zeros included, up to :data:`EXACT_MAX_PAIRS` pairs), the
pairs disturbed by a burst of other work left out (:func:`burst_pairs`):

- it is the rank test for paired data, so one burst pair (a run +150 % while a neighbour ran)
  moves one rank, not the mean as it would in a paired t-test;
- under "no change" the randomised order makes each ``r_i`` symmetric about zero whatever the
  host did, which is exactly the signed-rank test's null hypothesis: its p-value is then valid
  without assuming the noise is normal or stationary;
- against a sign test it uses the sizes of the differences, so it needs fewer pairs (asymptotic
  relative efficiency 3/pi = 0.95 vs the t-test under normal noise; the sign test 2/pi = 0.64).
  Its smallest two-sided p is ``2 / 2^n``: 8 pairs are needed to reach alpha = 0.01; with fewer
  the verdict is UNKNOWN and the caller measures more pairs.

The verdict follows :func:`.compare.compare` exactly (DIFFERENT, SAME when significant but below
the minimum effect, SAME when the p-value is weaker than what a minimum-size change would
typically give — and, here, only when the paired effect itself is below the minimum effect: a
weak p-value next to a large estimated change means "measure more pairs", not "no change" —
else UNKNOWN), with the paired effect ``exp(median r) - 1`` in place of the ratio
of medians, and :func:`paired_high_threshold` for the SAME threshold. The deterministic backend
(``sim``) keeps the exact-change rule: pairing adds nothing to bit-identical counts.

The minimum effect comes from the series' own noise, as detection takes it
(:func:`.min_effect.min_effect_of_series`), with the fixed floor and a note saying so when no series is known.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
# scipy (about a second to import) is imported by the functions that use it: the API, the agent and
# the CLI import this module for its types and rules, most of them never for a test.

from perfci_core import metrics as catalogue

from .compare import DEFAULT_ALPHA, DEFAULT_TOLERANCE, Comparison, Kind, Verdict, compare, kind_of
from .noise import MAD_TO_SIGMA, mad_sigma
from .sequential import look_alpha
from .series import relative_change, resolve_metric

# Pitman efficiency of the signed-rank test relative to the t-test under normal noise: its z for a
# shift of d standard deviations over n pairs is about sqrt(n * 3 / pi) * d.
_WILCOXON_ARE = 3.0 / math.pi
BURST_K = 2.0  # normal pairs: the bound sits near 3 sigma of the per-pair noise
BURST_SHARE = 0.5  # at most half the pairs are left out (a quarter of a loaded host's runs are slowed)
EXACT_MAX_PAIRS = 200  # the signed-rank test's exact null up to here (a convolution of n coins, milliseconds)


def min_attainable_p(n: int) -> float:
    """Smallest two-sided exact signed-rank p-value over ``n`` pairs: 2 / 2^n."""
    return 1.0 if n < 1 else min(1.0, 2.0 / 2.0**n)


def pairs_needed(alpha: float) -> int:
    """The fewest pairs whose smallest attainable p reaches ``alpha`` (8 at alpha = 0.01)."""
    return max(1, math.ceil(math.log2(2.0 / alpha)))


def can_reject(before: np.ndarray, after: np.ndarray, alpha: float, metric: str | catalogue.Metric | None = None) -> bool:
    """Whether :func:`paired_compare` on these pairs could reach ``alpha`` at all: the pairs it
    keeps (finite, not bursts) are enough for ``min_attainable_p``. Which pairs are kept never
    depends on which run of a pair came first, so under "no change" asking this first leaves the
    test's level as it is; and a test that cannot reject spends none of its alpha (the caller may
    give it to its other tests)."""
    a, b = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    finite = np.isfinite(a) & np.isfinite(b)
    if not finite.any():
        return False
    return min_attainable_p(int(burst_pairs(a[finite], b[finite], metric).sum())) <= alpha


def least_kept(n: int) -> int:
    """The fewest of ``n`` pairs :func:`burst_pairs` keeps (what a session planned before its values
    exist must allow for)."""
    return n if n < 4 else n - int(BURST_SHARE * n)


def looks(pairs: int, max_pairs: int, step: int) -> int:
    """How many times a loop that starts with ``pairs`` and adds ``step`` pairs while UNKNOWN, up
    to ``max_pairs``, may test."""
    if step < 1 or max_pairs <= pairs:
        return 1
    return 1 + math.ceil((max_pairs - pairs) / step)


def sequential_alpha(alpha: float, pairs: int, max_pairs: int, step: int) -> float:
    """The significance level of each test in such a loop: ``alpha / looks`` (Bonferroni). Testing
    again after every added batch at the full ``alpha`` would call a commit that did not change
    DIFFERENT up to ``looks`` times as often; splitting ``alpha`` over the looks keeps the whole
    loop's false-positive rate at ``alpha`` or below."""
    n = looks(pairs, max_pairs, step)
    return look_alpha(alpha, 1, n, "even")


def paired_high_threshold(n: int, standardized_effect: float) -> float:
    """The two-sided p-value a signed-rank test typically gives over ``n`` pairs when the true
    shift is ``standardized_effect`` standard deviations of the per-pair difference:
    ``2 (1 - Phi(sqrt(3 n / pi) d))``. 1.0 (never SAME) for no pairs or an unknown effect."""
    if n < 1 or not standardized_effect > 0:
        return 1.0
    if math.isinf(standardized_effect):
        return 0.0
    from scipy import stats
    return float(2.0 * stats.norm.sf(math.sqrt(_WILCOXON_ARE * n) * standardized_effect))


def burst_pairs(before: np.ndarray, after: np.ndarray, metric: str | catalogue.Metric | None = None) -> np.ndarray:
    """Which pairs to keep. A burst of other work slows a run down, so each pair is judged by its
    slower run: the higher value (the lower for a metric where higher is better), in logs when every
    value is positive. A pair whose slower run lies beyond the bulk of the pairs' slower runs (their
    median plus :data:`BURST_K` x their robust spread, 1.4826 x the median distance from that median)
    had a run disturbed; at most half the pairs (the slowest) are left out. Which run of a pair is the
    slower does not depend on which of the two came first, so under "no change", the order in each
    pair drawn at random, the signs of the kept pairs are still fair coin tosses and the signed-rank
    test stays exact. The slower runs gather at the slower commit's level, so the bound moves with a
    real change: a burst on the faster commit's run smaller than the change stays in with the
    change's sign, a larger one is left out, and none takes a top rank with the wrong sign: the
    test's power grows with the change (docs/detection.md, "Bursts in a session")."""
    a, b = np.asarray(before, dtype=float).ravel(), np.asarray(after, dtype=float).ravel()
    keep = np.ones(a.size, dtype=bool)
    if a.size < 4:
        return keep
    m = resolve_metric(metric) if metric is not None else None
    sign = -1.0 if m is not None and m.direction is catalogue.Direction.HIGHER_IS_BETTER else 1.0
    logs = bool((a > 0).all() and (b > 0).all())
    slower = np.maximum(sign * (np.log(a) if logs else a), sign * (np.log(b) if logs else b))
    middle = float(np.median(slower))
    spread = MAD_TO_SIGMA * float(np.median(np.abs(slower - middle)))
    if spread == 0.0:
        return keep
    worst = np.argsort(slower)[::-1][: int(BURST_SHARE * slower.size)]
    keep[worst[slower[worst] > middle + BURST_K * spread]] = False
    return keep


def signed_rank_p(r: np.ndarray, alternative: str = "two-sided") -> float:
    """The Wilcoxon signed-rank p-value (exact up to :data:`EXACT_MAX_PAIRS` pairs) of the pairs'
    differences ``r`` (the pairs :func:`burst_pairs` keeps); a difference of zero counts half for each
    side. ``alternative``: "two-sided", or "greater" / "less" (the pairs' centre above / below zero)."""
    r = np.asarray(r, dtype=float).ravel()
    if not r.size or not np.any(r):
        return 1.0  # no pair, or every pair identical: no evidence of a difference
    if r.size > EXACT_MAX_PAIRS:  # the normal approximation is as good as exact here
        from scipy import stats
        return float(stats.wilcoxon(r, zero_method="zsplit", alternative=alternative).pvalue)
    return _exact_signed_rank_p(r, alternative)


def _exact_signed_rank_p(r: np.ndarray, alternative: str) -> float:
    """The signed-rank p-value over all 2^n sign patterns, ties and zeros included. scipy's exact
    distribution assumes neither; with them it runs a permutation test of 2^n resamples up to 13
    pairs (seconds per call) and a normal approximation above. Twice a midrank is an integer, so the
    null distribution of twice ``r_plus`` is one fair coin per nonzero pair, convolved; a zero pair
    adds half its rank whatever the signs (zsplit), the same to every pattern."""
    from scipy import stats
    twice = np.rint(2.0 * stats.rankdata(np.abs(r))).astype(np.int64)
    moves = twice[r != 0]
    null = np.ones(1)
    for rank in moves:
        null = 0.5 * (np.concatenate([null, np.zeros(rank)]) + np.concatenate([np.zeros(rank), null]))
    observed = int(twice[r > 0].sum())  # the zeros' constant share left out on both sides
    greater, less = float(null[observed:].sum()), float(null[:observed + 1].sum())
    if alternative == "greater":
        return min(1.0, greater)
    if alternative == "less":
        return min(1.0, less)
    return min(1.0, 2.0 * min(greater, less))


def equivalent(before: np.ndarray, after: np.ndarray, margin: float, alpha: float,
               metric: str | catalogue.Metric | None = None) -> bool:
    """Two one-sided tests (Schuirmann): the pairs' centre lies between ``ln(1 - margin)`` and
    ``ln(1 + margin)`` (within ``+/- margin x`` the median level for differences), each side at
    ``alpha``: the exact signed-rank test of :func:`signed_rank_p` on the differences of the pairs
    :func:`burst_pairs` keeps, shifted by that bound, whose signs are fair coin tosses when the
    centre sits on it."""
    a, b = np.asarray(before, dtype=float).ravel(), np.asarray(after, dtype=float).ravel()
    finite = np.isfinite(a) & np.isfinite(b)
    a, b = a[finite], b[finite]
    if not a.size or margin <= 0:
        return False
    keep = burst_pairs(a, b, metric)
    a, b = a[keep], b[keep]
    r, logs = pair_differences(a, b)
    if logs:
        high, low = math.log1p(margin), math.log1p(-min(margin, 0.99))
    else:
        high = margin * abs(float(np.median(a)))
        low = -high
    return (signed_rank_p(r - high, "less") <= alpha  # H0: the centre is at or above the upper bound
            and signed_rank_p(r - low, "greater") <= alpha)  # ... at or below the lower one


def pair_differences(before: np.ndarray, after: np.ndarray) -> tuple[np.ndarray, bool]:
    """Per-pair ``ln(after / before)`` when every value is positive (``True``), else the plain
    differences ``after - before`` (``False``: counts that can be zero)."""
    if (before > 0).all() and (after > 0).all():
        return np.log(after / before), True
    return after - before, False


def paired_compare(
    before: Sequence[float] | np.ndarray,
    after: Sequence[float] | np.ndarray,
    metric: str | catalogue.Metric | None = None,
    *,
    backend: catalogue.Backend | str | None = None,
    alpha: float = DEFAULT_ALPHA,
    min_effect: float = 0.0,
    tolerance: float = DEFAULT_TOLERANCE,
) -> Comparison:
    """SAME / DIFFERENT / UNKNOWN from paired repetitions: ``before[i]`` and ``after[i]`` were
    measured next to each other. ``rel_change`` is the paired effect ``exp(median ln ratio) - 1``;
    ``p_value`` the signed-rank p (:func:`signed_rank_p`; ``p_ks``/``p_mwu`` are NaN). A pair with
    a non-finite value is dropped with a note; unequal lengths are bad input (ValueError)."""
    a = np.asarray(before, dtype=float).ravel()
    b = np.asarray(after, dtype=float).ravel()
    if a.size != b.size:
        raise ValueError(f"paired samples need equal lengths, got {a.size} before and {b.size} after")
    if backend is not None and catalogue.Backend(backend) is catalogue.Backend.SIM:
        return compare(a, b, metric, backend=backend, tolerance=tolerance)  # the exact-change rule
    m = resolve_metric(metric) if metric is not None else None
    notes: list[str] = []
    finite = np.isfinite(a) & np.isfinite(b)
    if not finite.all():
        notes.append(f"dropped {int((~finite).sum())} pair(s) with a non-finite value")
        a, b = a[finite], b[finite]
    n = int(a.size)
    if n == 0:
        notes.append("no pair: no verdict")
        return Comparison(Verdict.UNKNOWN, 1.0, math.nan, math.nan, math.nan, min_effect, Kind.NONE, 0, 0, False,
                          p_ks=math.nan, p_mwu=math.nan, notes=tuple(notes))
    r, logs = pair_differences(a, b)
    keep = burst_pairs(a, b, m)
    if not keep.all():
        notes.append(f"{int((~keep).sum())} of {n} pair(s) left out: their slower run is beyond "
                     f"the bulk of the pairs' slower runs (a run disturbed by other work on the host)")
        a, b, r = a[keep], b[keep], r[keep]
        n = int(r.size)
    effect = float(np.median(r))
    level = float(np.median(a))
    rel = math.expm1(effect) if logs else relative_change(level, level + effect)
    p = signed_rank_p(r)

    spread = mad_sigma(r)
    threshold = math.log1p(min_effect) if logs else min_effect * abs(level)
    if min_attainable_p(n) > alpha:
        high = 1.0
        notes.append(f"{n} pair(s) cannot reach p <= {alpha:g} (the signed-rank test needs "
                     f"{math.ceil(math.log2(2.0 / alpha))})")
    elif spread == 0.0:
        high = 0.0 if min_effect > 0 else 1.0
    else:
        high = paired_high_threshold(n, threshold / spread)

    before_median, after_median = float(np.median(a)), float(np.median(b))
    if p <= alpha and abs(rel) >= min_effect and rel != 0.0:
        verdict = Verdict.DIFFERENT
    elif p <= alpha:
        verdict = Verdict.SAME
        notes.append(f"significant but {rel:+.3%} is below the minimum effect {min_effect:.3%}")
    elif p > high and abs(rel) < min_effect:
        verdict = Verdict.SAME
    else:
        verdict = Verdict.UNKNOWN
    kind = Kind.NONE
    if verdict is Verdict.DIFFERENT:
        kind = kind_of(m, 1.0, 1.0 + rel) if m is not None else Kind.CHANGE
    return Comparison(verdict, p, before_median, after_median, rel, min_effect, kind, n, n, False,
                      p_ks=math.nan, p_mwu=math.nan, high_threshold=high, notes=tuple(notes), paired=True)
