import math

import numpy as np
import pytest

from perfci_core import metrics
from perfci_core.analysis import IncrementalDetector, Kind, Settings, detect
from tests.analysis.synth import levels, noisy

STEPS = {150: 0.03, 330: -0.04}


@pytest.mark.parametrize("kind", ["normal", "heavy", "bimodal", "outliers"])
def test_steps_found_at_the_exact_commit_with_five_repetitions(kind):
    for seed in range(3):
        pts = noisy(levels(500, STEPS), np.random.default_rng(seed), kind, 0.01, 5)
        r = detect(pts, "cpp", "tsc")
        assert [c.kind for c in r.changes] == [Kind.REGRESSION, Kind.IMPROVEMENT], seed
        for c, true in zip(r.changes, STEPS):
            # the truth is always among the candidates; a pinned change is pinned right
            assert f"c{true:04d}" in c.candidates, (seed, c.index, c.candidates)
            assert c.index == true or (not c.pinned and abs(c.index - true) <= 1), (seed, c.index)
        assert r.changes[0].rel_change == pytest.approx(0.03, abs=0.006)
        assert r.changes[0].confidence > 0.999
        assert not any(c.confirmed for c in r.changes)  # found by the search over commits, no session measured


def test_higher_is_better_metric_flips_the_kind():
    pts = noisy(levels(300, {120: -0.05}), np.random.default_rng(7), "normal", 0.01, 5)
    (c,) = detect(pts, "pps", "tsc").changes
    assert (c.index, c.kind) == (120, Kind.REGRESSION)
    (c,) = detect(pts, "cpp", "tsc").changes
    assert c.kind is Kind.IMPROVEMENT


@pytest.mark.parametrize("kind", ["normal", "heavy", "outliers"])
def test_single_repetition_series_locates_within_the_reported_range(kind):
    for seed in range(3):
        pts = noisy(levels(500, STEPS), np.random.default_rng(10 + seed), kind, 0.01, 1)
        r = detect(pts, "cpp", "tsc")
        assert len(r.changes) == 2
        for c, true in zip(r.changes, STEPS):
            assert abs(c.index - true) <= 2
            assert f"c{true:04d}" in c.candidates or abs(c.index - true) <= 1


@pytest.mark.parametrize("kind", ["normal", "heavy", "bimodal", "outliers"])
def test_no_false_alert_on_a_flat_series(kind):
    for seed in range(3):
        pts = noisy(levels(1000, {}), np.random.default_rng(100 + seed), kind, 0.02, 3)
        assert detect(pts, "cpp", "tsc").changes == ()


def test_slow_drift_is_not_a_step_but_a_step_on_drift_is():
    n = 1000
    drift = 100.0 * (1 + 0.03 * np.arange(n) / n)  # +3 % over 1000 commits
    rng = np.random.default_rng(4)
    flat = noisy(drift, rng, "normal", 0.01, 5)
    assert detect(flat, "cpp", "tsc").changes == ()
    stepped = drift * np.where(np.arange(n) >= 600, 1.02, 1.0)
    r = detect(noisy(stepped, rng, "normal", 0.01, 5), "cpp", "tsc")
    assert len(r.changes) == 1 and abs(r.changes[0].index - 600) <= 1 and "c0600" in r.changes[0].candidates


def test_varying_repetition_counts():
    rng = np.random.default_rng(6)
    reps = rng.integers(1, 8, 400)
    r = detect(noisy(levels(400, {250: 0.02}), rng, "normal", 0.01, reps), "cpp", "tsc")
    assert [c.index for c in r.changes] == [250]


def test_sim_exact_rule_one_sample_each():
    ipp = [100.0] * 10 + [100.0 + 1 / 32] * 10 + [99.0] * 5
    pts = [(f"s{i}", v) for i, v in enumerate(ipp)]
    r = detect(pts, "ipp", "sim")
    assert [(c.index, c.kind, c.pinned, c.exact) for c in r.changes] == [
        (10, Kind.REGRESSION, True, True),
        (20, Kind.IMPROVEMENT, True, True),
    ]
    assert r.changes[0].last_good == "s9" and r.changes[0].candidates == ("s10",)
    assert r.changes[0].rel_change == pytest.approx(0.0003125)
    assert detect(pts, "ipp", "sim", Settings(tolerance=1e-3)).changes[0].index == 20


def test_bad_input_is_dropped_with_notes():
    rng = np.random.default_rng(8)
    pts = noisy(levels(200, {100: 0.05}), rng, "normal", 0.01, 5)
    pts[10] = ("c0010", [math.nan, math.inf, *pts[10][1][:2]])
    pts[20] = ("c0020", [])
    pts[30] = ("c0030", [math.nan])
    r = detect(pts, "cpp", "tsc")
    assert r.n_points == 198
    assert any(n.startswith("c0010: dropped 2 non-finite") for n in r.notes)
    assert any(n.startswith("c0020: no usable") for n in r.notes)
    assert any(n.startswith("c0030: dropped 1") for n in r.notes)
    assert [c.suspect for c in r.changes] == ["c0100"]
    assert [c.index for c in r.changes] == [100]  # the input position, though c0020 was dropped


def test_change_index_is_the_input_position_after_dropped_commits():
    ipp = [100.0] * 10 + [101.0] * 10
    pts = [(f"s{i}", [v]) for i, v in enumerate(ipp)]
    for gone in (2, 5, 7):  # three commits before the step have no usable repetition
        pts[gone] = (f"s{gone}", [math.nan])
    r = detect(pts, "ipp", "sim")
    assert r.n_points == 17
    assert [(c.index, c.suspect) for c in r.changes] == [(10, "s10")]
    assert pts[r.changes[0].index][0] == r.changes[0].suspect  # index-based callers score the right commit

    inc = IncrementalDetector("ipp", "sim", Settings(tail_window=8))
    for commit, values in pts:
        res = inc.append(commit, values)
    assert [(c.index, c.suspect) for c in res.changes] == [(10, "s10")]


def test_too_short_series_give_no_verdict():
    r = detect([("a", [1.0, 1.1])], "cpp", "tsc")
    assert r.changes == () and "no verdict" in r.notes[-1]
    assert detect([], "ipp", "sim").changes == ()
    assert detect([("a", 1.0), ("b", 2.0)], "cpp", "tsc").changes == ()  # 2 noisy points: no group


def test_unknown_metric_raises_or_reports():
    pts = [(f"c{i}", 1.0 if i < 10 else 2.0) for i in range(20)]
    with pytest.raises(KeyError, match="unknown metric 'frobs'"):
        detect(pts, "frobs", "sim")
    r = detect(pts, "frobs", "sim", Settings(unknown_metric="report"))
    assert [(c.index, c.kind) for c in r.changes] == [(10, Kind.CHANGE)]
    custom = metrics.Metric("frobs", "1", metrics.Direction.HIGHER_IS_BETTER, "", frozenset({metrics.Backend.SIM}))
    assert detect(pts, custom, "sim").changes[0].kind is Kind.IMPROVEMENT


def test_incremental_matches_batch_and_never_duplicates():
    pts = noisy(levels(700, {150: 0.03, 500: 0.04}), np.random.default_rng(9), "heavy", 0.01, 5)
    inc = IncrementalDetector("cpp", "tsc", Settings(tail_window=200))
    seen: dict[int, int] = {}
    for n, (commit, values) in enumerate(pts, 1):
        res = inc.append(commit, values)
        for c in res.changes:
            seen.setdefault(c.index, n)
    assert [c.index for c in res.changes] == [c.index for c in detect(pts, "cpp", "tsc").changes] == [150, 500]
    assert set(seen) == {150, 500}  # no transient alert elsewhere
    assert 153 <= seen[150] <= 160  # confirmed a few commits after the step
    assert res.n_points == 700


def test_a_fresh_step_is_confirmed_after_min_segment_commits():
    pts = noisy(levels(203, {200: 0.08}), np.random.default_rng(11), "normal", 0.01, 5)
    assert detect(pts[:202], "cpp", "tsc").changes == ()
    assert [c.index for c in detect(pts, "cpp", "tsc").changes] == [200]


def test_the_search_over_commits_never_sees_the_sessions_repetitions():
    """Sessions of the newest 20 commits, two neighbours each, read 4 % slower on both sides (a host that drifted
    while they ran). They are not the commits' own measurements: the search proposes nothing there, as on the
    commits' own jobs alone."""
    from perfci_core.analysis import Point, clean

    rng = np.random.default_rng(7)
    points = []
    for i in range(80):
        own = list(100.0 * (1 + 0.02 * rng.standard_normal(3)))
        session = list(100.0 * 1.04 * (1 + 0.002 * rng.standard_normal(20))) if i >= 60 else []
        key = [0, 1000 + i // 2] if session else [0]  # c60 with c61, c62 with c63, ...
        points.append(Point.of(f"c{i}", own + session, [3, 20] if session else [3], key))
    s = clean(points)
    assert len(s.sessions()) == 10
    assert detect(s, "cpp", "tsc").changes == detect(s.own(), "cpp", "tsc").changes == ()
