"""A pull request's calls over its sessions (core pull_verdict): one level over the alerting metrics,
an answer for an unchanged head, failure that never falls as the regression grows."""

from __future__ import annotations

import numpy as np
import pytest

from perfci_core.analysis.pull_verdict import MetricSessions, look_level, verdicts

from .test_paired import _tsc_pairs


def _pull_request(rng: np.random.Generator, step: float, metrics: int = 1, pairs: int = 25, looks: int = 3) -> str:
    """Up to ``looks`` sessions of ``pairs`` recorded quiet-host pairs per metric, the first metric ``step``
    slower on the head: failure, success or neutral, as the server decides after each session."""
    base = [np.empty(0) for _ in range(metrics)]
    head = [np.empty(0) for _ in range(metrics)]
    for look in range(1, looks + 1):
        for i in range(metrics):
            b, h = _tsc_pairs(rng, pairs)
            base[i], head[i] = np.r_[base[i], b], np.r_[head[i], h * (1 + (step if i == 0 else 0.0))]
        calls = [v.call for v in verdicts([MetricSessions("c", "cpp", "tsc", base[i], head[i], True, 0.01)
                                           for i in range(metrics)], look, looks, equivalence=0.03)]
        if "regression" in calls:
            return "failure"
        if all(c == "unchanged" for c in calls):
            return "success"
    return "neutral"


def test_failure_never_falls_as_the_regression_grows():
    """+2 / 3 / 5 / 8 / 12 % on recorded quiet-host noise (a quarter of its runs slowed by other work), each
    step on the same draws: the share of pull requests that fail is non-decreasing, and every one fails from
    +5 % on."""
    shares = []
    for step in (0.02, 0.03, 0.05, 0.08, 0.12):
        rng = np.random.default_rng(3)
        shares.append(np.mean([_pull_request(rng, step) == "failure" for _ in range(60)]))
    assert all(x <= y for x, y in zip(shares, shares[1:])), shares
    assert shares[2:] == [1.0, 1.0, 1.0], shares


def test_an_unchanged_head_is_shown_unchanged_and_fails_at_most_alpha_of_the_time_over_all_its_metrics():
    rng = np.random.default_rng(8)
    ends = [_pull_request(rng, 0.0, metrics=10) for _ in range(60)]
    assert ends.count("failure") == 0 and ends.count("success") >= 50, ends


def test_holm_holds_the_family_at_the_looks_level_and_other_metrics_never_fail():
    rng = np.random.default_rng(1)
    b, h = _tsc_pairs(rng, 25)
    moved = MetricSessions("c", "cpp", "tsc", b, h * 1.08, True, 0.01)
    quiet = [MetricSessions("c", "pps", "tsc", *_tsc_pairs(rng, 25), True, 0.01) for _ in range(9)]
    calls = verdicts([moved, *quiet], 1, 3)
    assert calls[0].call == "regression" and calls[0].level == pytest.approx(look_level(1, 3) / 10)
    assert all(c.call != "regression" for c in calls[1:])
    context = MetricSessions("c", "alias_4k_pp", "pmu", b, h * 1.08, True, 0.01)  # stored, never alerted on
    [lone] = [v for v in verdicts([context, *quiet], 1, 3) if v.sessions is context]
    assert lone.level == pytest.approx(look_level(1, 3)) and lone.call == "regression"
    assert not context.alerts


def test_sim_decides_by_the_exact_rule_in_one_session():
    same = MetricSessions("c", "ipp", "sim", np.array([81.0]), np.array([81.0]), True, 0.0)
    more = MetricSessions("c", "ipp", "sim", np.array([81.0]), np.array([82.0]), True, 0.0)
    assert [v.call for v in verdicts([same, more], 1, 3)] == ["unchanged", "regression"]
