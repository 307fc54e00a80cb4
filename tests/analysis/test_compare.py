import math

import numpy as np
import pytest
from scipy import stats

from perfci_core.analysis.compare import (
    Kind,
    Verdict,
    combined_p,
    compare,
    high_threshold,
    min_attainable_p,
)


def test_p_value_is_the_cauchy_combination_of_ks_and_mann_whitney():
    rng = np.random.default_rng(0)
    a, b = rng.normal(100, 1, 12), rng.normal(101, 1, 9)
    c = compare(a, b, "cpp", backend="tsc")
    ks = stats.ks_2samp(a, b).pvalue
    mwu = stats.mannwhitneyu(a, b, alternative="two-sided").pvalue
    assert c.p_ks == pytest.approx(ks)
    assert c.p_mwu == pytest.approx(mwu)
    t = (math.tan((0.5 - ks) * math.pi) + math.tan((0.5 - mwu) * math.pi)) / 2  # Liu and Xie's form
    assert c.p_value == pytest.approx(0.5 - math.atan(t) / math.pi)
    assert min(ks, mwu) <= c.p_value <= max(ks, mwu)


def test_combined_p_keeps_equal_p_values_and_small_ones_exact():
    assert combined_p([1e-5, 1e-5]) == pytest.approx(1e-5)
    assert combined_p([1e-200, 0.5]) == pytest.approx(2e-200)  # cot keeps the tail: tan(pi (0.5 - p)) would not
    assert combined_p([1.0, 1.0]) == 1.0


def test_combined_p_holds_its_level_where_the_minimum_does_not():
    """Null samples of 12 and 50 vs as many (t3 noise): the minimum of KS and MWU rejects at
    alpha = 0.05 well above 5 %, the combination does not (the full table: null_levels.py)."""
    rng = np.random.default_rng(7)
    for n in (12, 50):
        rej_min = rej_comb = 0
        for _ in range(1500):
            a, b = rng.standard_t(3, n), rng.standard_t(3, n)
            ks = stats.ks_2samp(a, b).pvalue
            mwu = stats.mannwhitneyu(a, b, alternative="two-sided").pvalue
            rej_min += min(ks, mwu) <= 0.05
            rej_comb += combined_p([ks, mwu]) <= 0.05
        assert rej_comb / 1500 <= 0.05 * 1.1
        assert rej_min > rej_comb


def test_fully_separated_five_by_five_is_different_with_exact_p():
    c = compare([10, 10.1, 10.2, 10.3, 10.4], [11, 11.1, 11.2, 11.3, 11.4], "cpp", backend="tsc")
    assert c.p_value == pytest.approx(2 / 252)  # exact: 2 / C(10, 5)
    assert c.verdict is Verdict.DIFFERENT
    assert c.rel_change == pytest.approx(11.2 / 10.2 - 1)
    assert c.kind is Kind.REGRESSION  # cycles per packet up


def test_direction_comes_from_the_catalogue():
    lo, hi = [1.0, 1.01, 1.02, 0.99, 1.0], [1.2, 1.21, 1.22, 1.19, 1.2]
    assert compare(lo, hi, "pps").kind is Kind.IMPROVEMENT
    assert compare(hi, lo, "pps").kind is Kind.REGRESSION
    assert compare(hi, lo, "cpp").kind is Kind.IMPROVEMENT
    assert compare(lo, hi, None).kind is Kind.CHANGE


def test_small_samples_are_never_same_or_different():
    # 3 vs 3 cannot reach p <= 0.01 and cannot justify SAME: UNKNOWN, the caller adds repetitions
    assert min_attainable_p(3, 3) == pytest.approx(0.1)
    c = compare([1, 2, 3], [1.5, 2.5, 3.5], "cpp", min_effect=0.01)
    assert c.verdict is Verdict.UNKNOWN
    assert compare([1.0], [2.0], "cpp", min_effect=0.01).verdict is Verdict.UNKNOWN


def test_same_when_large_samples_show_no_shift():
    rng = np.random.default_rng(1)
    a, b = rng.normal(100, 1, 30), rng.normal(100, 1, 30)
    c = compare(a, b, "cpp", min_effect=0.02)  # 2 % = 2 sigma
    assert c.verdict is Verdict.SAME
    assert c.p_value > c.high_threshold


def test_unknown_between_thresholds_then_different_with_more_repetitions():
    rng = np.random.default_rng(5)
    base, shifted = rng.normal(100, 2, 200), rng.normal(101.5, 2, 200)
    verdicts = [compare(base[:n], shifted[:n], "cpp", min_effect=0.01).verdict for n in (4, 40)]
    assert verdicts == [Verdict.UNKNOWN, Verdict.DIFFERENT]


def test_significant_but_below_min_effect_is_same():
    rng = np.random.default_rng(2)
    a, b = rng.normal(100, 0.1, 50), rng.normal(100.2, 0.1, 50)  # +0.2 %, very significant
    c = compare(a, b, "cpp", min_effect=0.005)
    assert c.p_value < 1e-6
    assert c.verdict is Verdict.SAME
    assert compare(a, b, "cpp", min_effect=0.001).verdict is Verdict.DIFFERENT


def test_high_threshold_closed_form():
    # d = 1 sigma, 10 vs 10: P(X<Y) = Phi(1/sqrt2); z = (P - .5) 100 / sqrt(100 * 21 / 12)
    p = stats.norm.cdf(1 / math.sqrt(2))
    z = (p - 0.5) * 100 / math.sqrt(100 * 21 / 12)
    assert high_threshold(10, 10, 1.0) == pytest.approx(2 * stats.norm.sf(z))
    assert high_threshold(10, 10, 0.0) == 1.0
    assert high_threshold(40, 40, 1.0) < high_threshold(10, 10, 1.0)


def test_exact_rule_catches_one_instruction_per_burst():
    ipp = 100.0
    one_more = ipp + 1 / 32  # +0.03 %
    c = compare([ipp], [one_more], "ipp", backend="sim")
    assert c.exact and c.verdict is Verdict.DIFFERENT and c.kind is Kind.REGRESSION
    assert c.rel_change == pytest.approx(0.0003125)
    same = compare([ipp], [ipp * (1 + 5e-5)], "ipp", backend="sim")
    assert same.verdict is Verdict.SAME
    assert compare([ipp], [ipp * (1 + 5e-5)], "ipp", backend="sim", tolerance=1e-5).verdict is Verdict.DIFFERENT


def test_exact_rule_notes_non_deterministic_samples():
    c = compare([100.0, 100.5], [100.0], "ipp", backend="sim")
    assert any("deterministic samples differ" in n for n in c.notes)


def test_bad_input():
    c = compare([1.0, math.nan, 2.0, math.inf], [1.5], "cpp")
    assert c.n_before == 2 and any("non-finite" in n for n in c.notes)
    assert compare([], [1.0], "cpp").verdict is Verdict.UNKNOWN
    with pytest.raises(KeyError, match="unknown metric 'nope'; known: .*cpp"):
        compare([1.0], [2.0], "nope")


def test_identical_constant_samples_are_same():
    c = compare([7.0] * 6, [7.0] * 6, "cpp", min_effect=0.01)
    assert c.p_value == 1.0 and c.verdict is Verdict.SAME


def test_exact_rule_has_a_floor_for_rare_hazards():
    tiny = compare([0.0], [0.00005], "sf_blocks_pp", backend="sim")
    assert tiny.verdict is Verdict.SAME and "within the metric's floor" in tiny.notes[0]
    block = compare([0.0], [1.0], "sf_blocks_pp", backend="sim")
    assert block.verdict is Verdict.DIFFERENT and block.kind is Kind.REGRESSION
    # IPP has no floor: one instruction per 32-packet burst still counts
    assert compare([58.94], [58.94 + 1 / 32], "ipp", backend="sim").verdict is Verdict.DIFFERENT
