"""The paired verdict on simulated batch drift: interleaved pairs, the signed-rank test, the
minimum effect learned from a series."""

import functools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from perfci_core.analysis.compare import Kind, Verdict, compare
from perfci_core.analysis.min_effect import MIN_SERIES_POINTS, min_effect_of_series
from perfci_core.analysis.paired import min_attainable_p, paired_compare, paired_high_threshold

from .synth import drifting_host, levels, noisy

BASE_CPP = 80.0
JOB_JUMP = 0.05


def interleaved(rng: np.random.Generator, pairs: int, step: float) -> tuple[np.ndarray, np.ndarray]:
    """A B A B ... on a drifting host, the order inside each pair random, head ``step`` slower."""
    host = drifting_host(2 * pairs, rng)
    head_first = rng.integers(0, 2, pairs).astype(bool)
    first, second = host[0::2], host[1::2]
    base = BASE_CPP * np.where(head_first, second, first)
    head = BASE_CPP * (1 + step) * np.where(head_first, first, second)
    return base, head


def blocks(rng: np.random.Generator, reps: int, step: float) -> tuple[np.ndarray, np.ndarray]:
    """Today's measurement: a job of base repetitions, then a job of head repetitions, the host
    in another state for the second job (a 5 % jump between jobs, as other work comes and goes)."""
    host = drifting_host(2 * reps, rng)
    between = np.exp(JOB_JUMP * rng.standard_normal())
    return BASE_CPP * host[:reps], BASE_CPP * (1 + step) * host[reps:] * between


def test_a_comment_only_pair_under_strong_drift_is_same():
    # the same host state that fools the back-to-back test into DIFFERENT
    fooled = 0
    for seed in range(40):
        a, b = blocks(np.random.default_rng(seed), 8, 0.0)
        fooled += compare(a, b, "cpp", backend="tsc", min_effect=0.002).verdict is Verdict.DIFFERENT
        a, b = interleaved(np.random.default_rng(seed), 16, 0.0)
        c = paired_compare(a, b, "cpp", backend="tsc", min_effect=0.03)
        assert c.verdict is not Verdict.DIFFERENT, (seed, c)
    assert fooled >= 10  # the drift is strong enough to matter for blocks
    a, b = interleaved(np.random.default_rng(7), 30, 0.0)
    assert paired_compare(a, b, "cpp", backend="tsc", min_effect=0.03).verdict is Verdict.SAME


def test_a_real_five_percent_step_is_different_and_a_regression():
    # bursts hit about one pair in five here: a few runs stay UNKNOWN (more pairs decide them)
    verdicts = []
    for seed in range(40):
        a, b = interleaved(np.random.default_rng(100 + seed), 16, 0.05)
        c = paired_compare(a, b, "cpp", backend="tsc", min_effect=0.02)
        verdicts.append(c.verdict)
        assert c.verdict is not Verdict.SAME, (seed, c)
        if c.verdict is Verdict.DIFFERENT:
            assert c.kind is Kind.REGRESSION  # cycles per packet up
            assert c.rel_change == pytest.approx(0.05, abs=0.03)
    assert verdicts.count(Verdict.DIFFERENT) >= 30, verdicts
    c = paired_compare(1 / a, 1 / b, "pps", backend="tsc", min_effect=0.02)  # the same runs as packets per cycle
    assert c.verdict is Verdict.DIFFERENT and c.kind is Kind.REGRESSION and c.rel_change < 0


def test_p_value_is_the_signed_rank_test_on_log_ratios_of_the_pairs_kept():
    from perfci_core.analysis.paired import burst_pairs

    a = 10.0 * np.array([1.0, 1.01, 0.99, 1.005, 1.002, 0.998, 1.001, 1.004, 0.999])
    b = a * np.array([1.01, 1.03, 0.995, 1.02, 1.015, 1.04, 1.005, 1.025, 1.03])
    c = paired_compare(a, b, "cpp", backend="tsc")
    r = np.log(b / a)
    assert c.p_value == pytest.approx(stats.wilcoxon(r).pvalue)
    assert c.rel_change == pytest.approx(math.expm1(np.median(r)))
    assert c.n_before == c.n_after == 9 and math.isnan(c.p_ks)
    slow = np.where(np.arange(a.size) == 2, 1.6, 1.0)  # pair 2's head run, then its base run, slowed by other work
    for base, head in ((a, b * slow), (a * slow, b)):
        c = paired_compare(base, head, "cpp", backend="tsc")
        kept = burst_pairs(base, head, "cpp")
        assert c.n_before == 8 and not kept[2] and c.p_value == pytest.approx(stats.wilcoxon(np.log(head / base)[kept]).pvalue)
    # packets per second: higher is better, so the slower run of a pair is its lower one
    base_pps, head_pps = 1 / a, 1 / b
    head_pps[4] /= 1.6
    assert list(np.flatnonzero(~burst_pairs(base_pps, head_pps, "pps"))) == [4]
    assert burst_pairs(base_pps, head_pps, "cpp")[4]  # read as cycles, its low run would be the faster one


def test_fewer_than_eight_pairs_cannot_decide():
    assert min_attainable_p(7) > 0.01 >= min_attainable_p(8)
    a = np.linspace(10, 11, 7)
    c = paired_compare(a, a * 1.5, "cpp", backend="tsc", min_effect=0.01)
    assert c.verdict is Verdict.UNKNOWN and any("cannot reach" in n for n in c.notes)
    c = paired_compare(np.linspace(10, 11, 8), np.linspace(10, 11, 8) * 1.5, "cpp", backend="tsc", min_effect=0.01)
    assert c.verdict is Verdict.DIFFERENT and c.p_value == pytest.approx(2 / 2**8)


def test_significant_but_below_the_minimum_effect_is_same():
    rng = np.random.default_rng(3)
    a = rng.normal(100, 1, 30)
    b = a * 1.004 * np.exp(rng.normal(0, 0.0005, 30))
    assert paired_compare(a, b, "cpp", min_effect=0.01).verdict is Verdict.SAME
    assert paired_compare(a, b, "cpp", min_effect=0.001).verdict is Verdict.DIFFERENT


def test_high_threshold_closed_form():
    assert paired_high_threshold(12, 0.5) == pytest.approx(2 * stats.norm.sf(math.sqrt(3 * 12 / math.pi) * 0.5))
    assert paired_high_threshold(12, 0.0) == 1.0


def test_sim_keeps_the_exact_rule():
    c = paired_compare([100.0, 100.0], [100.05, 100.05], "ipp", backend="sim")
    assert c.exact and c.verdict is Verdict.DIFFERENT
    assert paired_compare([100.0], [100.0], "ipp", backend="sim").verdict is Verdict.SAME


def test_bad_input():
    with pytest.raises(ValueError, match="equal lengths"):
        paired_compare([1.0, 2.0], [1.0], "cpp")
    c = paired_compare([1.0, math.nan], [1.0, 2.0], "cpp")
    assert c.n_before == 1 and any("non-finite" in n for n in c.notes)
    assert paired_compare([], [], "cpp").verdict is Verdict.UNKNOWN
    # counts that can be zero: plain differences, the change relative to the base median
    before = np.r_[0.0, np.full(8, 0.2)]
    c = paired_compare(before, before + np.linspace(0.09, 0.11, 9), "sf_blocks_pp")
    assert c.rel_change == pytest.approx(0.5) and c.verdict is Verdict.DIFFERENT
    assert paired_compare(np.zeros(9), np.full(9, 0.5), "sf_blocks_pp").rel_change == math.inf


def test_minimum_effect_learned_from_the_series_noise():
    rng = np.random.default_rng(11)
    quiet = noisy(levels(60, {}), rng, cv=0.002, reps=5)
    loud = noisy(levels(60, {}), rng, cv=0.04, reps=5)
    q, lo = min_effect_of_series(quiet), min_effect_of_series(loud)
    assert q.source == lo.source == "series" and q.points == 60
    assert q.value == pytest.approx(0.002)  # the floor: a quiet series' noise is below it
    assert 0.005 < lo.value < 0.03 and lo.noise is not None and lo.value == pytest.approx(0.5 * lo.noise)


def test_minimum_effect_falls_back_to_the_floor_with_a_note():
    for series in (None, [("c1", [1.0, 1.1]), ("c2", [1.0])]):
        me = min_effect_of_series(series, where="machine x self-64B")
        assert me.source == "floor" and me.value == pytest.approx(0.002) and me.noise is None
        assert "fixed floor" in me.note and "machine x self-64B" in me.note
    assert MIN_SERIES_POINTS == 5


def test_adding_pairs_while_unknown_keeps_the_false_positive_rate_at_alpha():
    from perfci_core.analysis.paired import looks, sequential_alpha

    assert looks(10, 26, 4) == 5 and looks(8, 8, 4) == 1
    assert sequential_alpha(0.01, 10, 26, 4) == pytest.approx(0.002)
    assert min_attainable_p(10) <= sequential_alpha(0.01, 10, 26, 4)  # the first look can decide
    alpha = sequential_alpha(0.01, 10, 26, 4)
    false = 0
    trials = 150
    for seed in range(trials):
        rng = np.random.default_rng(1000 + seed)
        a, b = interleaved(rng, 10, 0.0)
        while True:
            c = paired_compare(a, b, "cpp", backend="tsc", alpha=alpha, min_effect=0.002)
            if c.verdict is not Verdict.UNKNOWN or len(a) >= 26:
                break
            more_a, more_b = interleaved(rng, 4, 0.0)
            a, b = np.r_[a, more_a], np.r_[b, more_b]
        false += c.verdict is Verdict.DIFFERENT
    assert false / trials <= 0.025  # alpha 0.01 over the whole loop (binomial slack for 150 trials)


def test_a_pairs_test_that_cannot_reach_its_alpha_is_known_before_its_signs_are_read():
    from perfci_core.analysis.paired import can_reject

    rng = np.random.default_rng(3)
    # pairs 0.27-0.33 % apart either way around one level: slower runs that close are all kept
    half = rng.choice([-1, 1], 20) * rng.uniform(0.00135, 0.00165, 20)
    before, after = 100 * (1 - half), 100 * (1 + half)
    assert not can_reject(before[:15], after[:15], 5e-5, "cpp") and can_reject(before[:16], after[:16], 5e-5, "cpp")  # 2 / 2^16
    burst = after.copy()
    burst[:3] *= 1.5  # three runs disturbed by other work: left out, 17 pairs kept
    assert can_reject(before, burst, 5e-5, "cpp") and not can_reject(before[:18], burst[:18], 5e-5, "cpp")
    swap = rng.random(20) < 0.5  # the other run of some pairs first: the same answer
    assert can_reject(np.where(swap, burst, before), np.where(swap, before, burst), 2e-6, "cpp") == can_reject(before, burst, 2e-6, "cpp")


@functools.cache
def _quiet_jobs() -> list[np.ndarray]:
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "detection" / "data" / "tsc-noise-quiet.json"
    return [np.asarray(j["cpp"], dtype=float) for j in json.loads(path.read_text())["jobs"]]


def _tsc_pairs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Two adjacent runs of one recorded quiet-host job per pair, the order drawn at random (a quarter of
    these runs are 10-75 % slow: bursts of other work)."""
    jobs = _quiet_jobs()
    base, head = np.empty(n), np.empty(n)
    for i in range(n):
        job = jobs[int(rng.integers(len(jobs)))]
        k = 2 * int(rng.integers(job.size // 2))
        pair = job[k:k + 2] if rng.random() < 0.5 else job[k:k + 2][::-1]
        base[i], head[i] = pair
    return base, head


def test_the_test_is_exact_under_no_change_whichever_pairs_the_burst_rule_leaves_out():
    """Which pairs are left out never depends on which run of a pair came first: over all 2^11 orders
    of one set of pairs with bursts among them (every order equally likely under "no change", the
    order drawn at random), the rule keeps the same pairs, and p <= alpha happens at most alpha of
    the time at every alpha."""
    from perfci_core.analysis.paired import burst_pairs, paired_compare

    rng = np.random.default_rng(5)
    orders = ((np.arange(2**11)[:, None] >> np.arange(11)) & 1).astype(bool)  # True: the pair's runs swapped
    for trial in range(3):
        runs = 7.65 * np.exp(0.01 * rng.standard_normal((2, 11)))
        runs[0] *= np.where(rng.random(11) < 0.3, rng.uniform(1.1, 1.75, 11), 1.0)  # bursts: 10-75 % slower
        kept, ps = set(), []
        for swap in orders:
            before, after = np.where(swap, runs[1], runs[0]), np.where(swap, runs[0], runs[1])
            kept.add(tuple(burst_pairs(before, after, "cpp")))
            ps.append(paired_compare(before, after, "cpp", backend="tsc").p_value)
        assert len(kept) == 1 and not all(next(iter(kept)))
        for alpha in (0.005, 0.01, 0.05, 0.1, 0.25):
            assert np.mean(np.array(ps) <= alpha) <= alpha + 1e-12, (trial, alpha)
    # and on recorded noise with its bursts, 20 pairs at a time
    rejected = [paired_compare(b, h, "cpp", backend="tsc").p_value <= 0.05 for b, h in (_tsc_pairs(rng, 20) for _ in range(400))]
    assert np.mean(rejected) <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 400)


def test_the_tests_power_grows_with_the_change():
    """On recorded tsc noise (a quarter of its runs slowed by bursts of other work), 20 pairs a
    session: a larger slow-down is found at least as often, step after step (0.51, 0.74, 0.87, 0.92,
    0.97 here). A rule that judged the pairs by the size of their difference would keep base-side
    bursts in as the change grew, where they take the top ranks with the wrong sign."""
    rng = np.random.default_rng(1)
    draws = [_tsc_pairs(rng, 20) for _ in range(300)]
    found = [np.mean([paired_compare(b, h * (1 + step), "cpp", backend="tsc", min_effect=0.01).verdict is Verdict.DIFFERENT
                      for b, h in draws]) for step in (0.02, 0.03, 0.05, 0.08, 0.12)]
    assert all(later >= earlier for earlier, later in zip(found, found[1:])), found
    assert found[-1] >= 0.9, found


def test_two_one_sided_tests_show_an_unchanged_head_within_its_margin_and_never_a_moved_one():
    from perfci_core.analysis.paired import equivalent

    rng = np.random.default_rng(2)
    shown = [equivalent(b, h, 0.03, 0.0045) for b, h in (_tsc_pairs(rng, 50) for _ in range(40))]
    assert np.mean(shown) >= 0.8  # 50 pairs of quiet-host noise mostly bound an unchanged head within +/- 3 %
    moved = [equivalent(b, h * 1.04, 0.03, 0.0045) for b, h in (_tsc_pairs(rng, 50) for _ in range(40))]
    assert not any(moved)  # a head 4 % slower is not shown within +/- 3 % (at the margin: at most alpha of the time)
    assert not equivalent(np.ones(27), np.ones(27), 0.0, 0.01)


def test_the_signed_rank_p_is_exact_with_ties_and_zeros_at_any_size():
    """Every sign pattern of the nonzero pairs counted by brute force (16 pairs: 2^14 patterns here),
    and scipy's own answers where they are exact (no ties: its distribution; with ties, at up to 13
    pairs: its permutation test over all 2^n patterns)."""
    from scipy import stats

    from perfci_core.analysis.paired import _exact_signed_rank_p

    r = np.array([0.0, 0.0, 1, -1, 1, 2, 2, -2, 3, 3, 3, -4, 5, 6, -6, 7]) / 100
    ranks = stats.rankdata(np.abs(r))
    nonzero = np.flatnonzero(r)
    patterns = 1 - 2 * ((np.arange(2 ** nonzero.size)[:, None] >> np.arange(nonzero.size)) & 1)
    r_plus = (patterns > 0) @ ranks[nonzero] + ranks[r == 0].sum() / 2
    seen = float(ranks[r > 0].sum() + ranks[r == 0].sum() / 2)
    greater, less = np.mean(r_plus >= seen - 1e-9), np.mean(r_plus <= seen + 1e-9)
    assert _exact_signed_rank_p(r, "greater") == pytest.approx(greater, rel=1e-12)
    assert _exact_signed_rank_p(r, "less") == pytest.approx(less, rel=1e-12)
    assert _exact_signed_rank_p(r, "two-sided") == pytest.approx(min(1.0, 2 * min(greater, less)), rel=1e-12)

    rng = np.random.default_rng(11)
    for trial in range(60):  # scipy's permutation test is slow: ties at up to 8 pairs
        n = int(rng.integers(3, 14 if trial % 2 else 9))
        x = rng.standard_normal(n) if trial % 2 else np.round(3 * rng.standard_normal(n)) / 3
        if not x.any():
            continue
        for alternative in ("two-sided", "greater", "less"):
            want = stats.wilcoxon(x, zero_method="zsplit", alternative=alternative).pvalue
            assert _exact_signed_rank_p(x, alternative) == pytest.approx(want, rel=1e-9), (x, alternative)
