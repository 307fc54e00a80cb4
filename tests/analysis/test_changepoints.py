import numpy as np
import pytest

from perfci_core.analysis.changepoints import (
    _Costs,
    _neighbour_medians,
    find_change_points,
    hampel_clip,
    location_range,
    mdl_penalty,
    segment,
)

from .synth import search_case


def test_segment_finds_clean_steps_exactly():
    y = np.concatenate([np.zeros(40), np.full(25, 5.0), np.full(35, -3.0)])
    y += np.random.default_rng(0).normal(0, 1, y.size)
    w = np.ones(y.size)
    assert segment(y, w, mdl_penalty(y.size, np.ptp(y)), 3) == [40, 65]


def test_segment_respects_min_segment_and_no_change():
    rng = np.random.default_rng(1)
    y = rng.normal(0, 1, 300)
    assert segment(y, np.ones(300), mdl_penalty(300, np.ptp(y)), 3) == []
    y2 = np.concatenate([np.zeros(50), np.full(2, 20.0)])  # a 2-point tail cannot be a group alone
    assert segment(y2, np.ones(52), mdl_penalty(52, 20.0), 3) == [49]  # it takes one old point
    assert segment(y2, np.ones(52), mdl_penalty(52, 20.0), 1) == [50]
    y3 = np.concatenate([np.zeros(50), np.full(3, 20.0)])
    assert segment(y3, np.ones(53), mdl_penalty(53, 20.0), 3) == [50]


def test_segment_matches_brute_force_single_split():
    rng = np.random.default_rng(2)
    y = np.concatenate([rng.normal(0, 1, 30), rng.normal(3, 1, 30)])
    w = np.ones(60)
    pen = mdl_penalty(60, np.ptp(y))
    cost = _Costs(y, w)
    total = [cost(0, k) + cost(k, 60) for k in range(3, 58)]
    best_k = 3 + int(np.argmin(total))
    assert segment(y, w, pen, 3) == [best_k]


def _optimal_partition(y: np.ndarray, w: np.ndarray, penalty: float, L: int) -> tuple[float, list[int]]:
    """The definition, without pruning: minimum total code length over every grouping."""
    n, cost = y.size, _Costs(y, w)
    best, last = [-penalty] + [np.inf] * n, [0] * (n + 1)
    for t in range(L, n + 1):
        for e in range(0, t - L + 1):
            if best[e] < np.inf and best[e] + float(cost(e, t)) + penalty < best[t]:
                best[t], last[t] = best[e] + float(cost(e, t)) + penalty, e
    out, t = [], n
    while t > 0:
        t = last[t]
        if t > 0:
            out.append(t)
    return best[n], sorted(out)


def test_segment_is_the_optimal_partition_on_random_series():
    rng = np.random.default_rng(3)
    for _ in range(150):
        y, w, L, pen = search_case(rng, 120)
        n = y.size
        got = segment(y, w, pen, L)
        if n < 2 * L:
            assert got == []
            continue
        total, bounds = _optimal_partition(y, w, pen, L)
        cost = _Costs(y, w)
        edges = [0, *got, n]
        assert all(b - a >= L for a, b in zip(edges, edges[1:]))
        assert sum(float(cost(a, b)) for a, b in zip(edges, edges[1:])) + pen * len(got) == pytest.approx(total, abs=1e-9)
        assert got == bounds


def test_a_start_beaten_at_t_stays_a_candidate_until_a_group_can_start_at_t():
    # Pruning it at t (the textbook PELT rule) gave [3, 6, 9, 12, 15, 18] here, 0.35 nats worse
    y = np.array([0.4, -0.7, -1.6, 0.9, 2.8, -0.0, -3.5, 1.2, -1.4, 3.0, -1.0, 2.1, -3.5, 5.1, -2.4, -1.7,
                  1.1, 7.0, -0.2, 0.6, -6.7])
    w = np.ones(y.size)
    assert segment(y, w, 1.7, 3) == _optimal_partition(y, w, 1.7, 3)[1] == [3, 6, 13, 18]


def test_neighbour_medians_are_the_medians_of_the_points_either_side():
    rng = np.random.default_rng(4)
    for n in [*range(1, 10), 57]:
        y = rng.normal(0, 1, n)
        left, right = _neighbour_medians(y, 3)
        for i in range(n):
            before, after = y[max(0, i - 3):i], y[i + 1:i + 4]
            assert (np.isnan(left[i]) and before.size == 0) or left[i] == np.median(before)
            assert (np.isnan(right[i]) and after.size == 0) or right[i] == np.median(after)


def test_costs_are_weighted_squared_error_in_nats():
    y, w = np.array([1.0, 2.0, 4.0]), np.array([1.0, 2.0, 1.0])
    mean = (1 + 4 + 4) / 4
    expected = (1 * (1 - mean) ** 2 + 2 * (2 - mean) ** 2 + 1 * (4 - mean) ** 2) / 2
    assert float(_Costs(y, w)(0, 3)) == pytest.approx(expected)


def test_hampel_clips_outliers_but_not_steps():
    y = np.array([0, 0.1, -0.1, 0, 9.0, 0, 0.1, 0, 5, 5.1, 4.9, 5, 5.0])
    out = hampel_clip(y, np.ones(y.size), 3.0)
    assert out[4] == pytest.approx(3.0)  # clipped to nearer median + 3 sigma
    np.testing.assert_array_equal(out[8:], y[8:])  # the step survives
    np.testing.assert_array_equal(np.delete(out, 4), np.delete(y, 4))


def test_location_range_widens_when_the_step_is_ambiguous():
    sharp = np.concatenate([np.zeros(30), np.full(30, 10.0)])
    c = _Costs(sharp, np.ones(60))
    assert location_range(c, 0, 30, 60, 3, 2.0) == (30, 30)
    soft = np.concatenate([np.zeros(30), [0.5, 0.5, 0.5], np.full(27, 1.0)])
    c = _Costs(soft, np.ones(60))
    lo, hi = location_range(c, 0, 31, 60, 3, 2.0)
    assert lo <= 30 and hi >= 33


def test_find_change_points_validates_and_merges():
    rng = np.random.default_rng(3)
    lv = np.concatenate([np.full(100, 100.0), np.full(100, 103.0)])
    med = lv * (1 + 0.005 * rng.standard_normal(200))
    med[50] *= 1.2  # an outlier commit
    scaled = np.log(med)
    cps = find_change_points(med, scaled, np.full(200, 0.005), None, 0.002)
    assert [cp.index for cp in cps] == [100]
    assert cps[0].test.rel_change == pytest.approx(0.03, abs=0.005)
