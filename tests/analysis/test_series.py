"""Series input: the per-point medians detection reads."""

from __future__ import annotations

import numpy as np
import pytest

from perfci_core.analysis.series import Point, clean, medians_of


def test_medians_taken_together_equal_one_median_per_point_exactly():
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal(int(rng.integers(1, 9))) * 3 + 100 for _ in range(500)]  # ragged, odd and even sizes
    assert np.array_equal(medians_of(samples), [np.median(x) for x in samples])
    series = clean([(f"c{i}", x.tolist()) for i, x in enumerate(samples)])
    assert series.medians is series.medians  # computed once
    assert medians_of([]).size == 0


def test_each_job_of_a_point_is_one_value_and_dropped_repetitions_leave_the_jobs_in_step():
    s = clean([Point.of("a", [1.0, 2.0, 3.0, 10.0, 11.0, 12.0], runs=(3, 3)),
               Point.of("b", [5.0, float("nan"), 7.0, float("nan"), float("nan")], runs=(3, 2)),
               ("c", [4.0, 4.5])])
    assert s.runs == ((3, 3), (2,), (2,))  # b's second job had nothing usable left
    assert s.run_medians(0, 3).tolist() == [2.0, 11.0, 6.0, 4.25]
    assert clean([("a", [1.0, 2.0]), ("b", [3.0])]).runs == ()  # one job per point: nothing to say
    assert clean([("a", [1.0, 2.0])]).run_medians(0, 1).tolist() == [1.5]
    with pytest.raises(ValueError, match="do not add up"):
        clean([Point.of("a", [1.0, 2.0, 3.0], runs=(2, 2))])


def test_the_best_run_of_each_job_and_a_per_point_value_that_does_not_drift_with_its_job_count():
    s = clean([Point.of("a", [1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 4.0, 5.0, 6.0], runs=(3, 3, 3)),
               ("b", [7.0, 5.0, 9.0]), ("c", [2.5]), ("d", [8.0, 6.0])])
    assert s.run_best(0, 4, lower_is_better=True).tolist() == [1.0, 10.0, 4.0, 5.0, 2.5, 6.0]
    assert s.run_best(0, 1, lower_is_better=False).tolist() == [3.0, 12.0, 6.0]
    # the median of a point's job bests: a's 1.0 would be its best of all, and fall with every job added
    assert s.bests(True).tolist() == [4.0, 5.0, 2.5, 6.0]
    assert s.bests(False).tolist() == [6.0, 9.0, 2.5, 8.0]
    assert s.bests(True) is s.bests(True)  # computed once
    assert clean([("a", [3.0, 1.0])]).bests(True).tolist() == [1.0]


def test_confirmation_sessions_pair_two_points_repetitions_in_order_and_stay_out_of_their_own_level():
    s = clean([
        Point.of("a", [10.0, 10.1, 10.2, 9.0, 9.1, 9.2], runs=[3, 3], pairs=[0, 7]),
        Point.of("b", [11.0, 11.1, 11.2, 12.0, float("nan"), 12.2], runs=[3, 3], pairs=[7, 8]),
        Point.of("c", [12.5, 12.6, 12.7], runs=[3], pairs=[8]),
        Point.of("d", [13.0, 13.1, 13.2], runs=[3]),
    ])
    [((a, b), [(before, after)])] = s.sessions().items()
    assert (a, b) == (0, 1) and before.tolist() == [9.0, 9.1, 9.2] and after.tolist() == [11.0, 11.1, 11.2]
    assert s.pairs == ((0, 7), (7, 8), (8,), (0,)) and s.runs[1] == (3, 2)  # b's session-8 side lost a repetition
    own = s.own()  # each commit's own jobs: b and c were measured in sessions only
    assert own.commits == ("a", "d") and own.positions == (0, 3)
    assert own.samples[0].tolist() == [10.0, 10.1, 10.2] and own.runs == () and own.sessions() == {}
    assert clean([Point.of("a", [1.0, 2.0])]).pairs == ()  # no session: nothing kept
    with pytest.raises(ValueError):
        clean([Point.of("a", [1.0, 2.0], runs=[1, 1], pairs=[3])])
