"""A creep is one finding over a range, not a staircase of step alerts; a step on top of it is still a step."""

from __future__ import annotations

import numpy as np
import pytest

from perfci_core.analysis import Kind, detect

from .synth import noisy


def _creep(n: int, total: float, start: int = 0, end: int | None = None) -> np.ndarray:
    end = n if end is None else end
    x = np.clip(np.arange(n), start, end) - start
    return 100.0 * (1 + total * x / (end - start))


@pytest.mark.parametrize("reps", [1, 3])
@pytest.mark.parametrize("total", [0.05, 0.10, 0.20])
def test_a_linear_creep_is_one_finding_and_no_step_alert(total, reps):
    for seed in range(3):
        r = detect(noisy(_creep(200, total), np.random.default_rng(seed), "normal", 0.01, reps), "cpp", "tsc")
        assert r.changes == (), (seed, [c.index for c in r.changes])
        [creep] = r.creeps
        assert creep.kind is Kind.REGRESSION and creep.end - creep.start >= 150
        assert creep.rel_change == pytest.approx(total, rel=0.35) and creep.p_value <= 1e-4


def test_a_slow_creep_raises_no_step_alert():
    for seed in range(3):
        for reps in (1, 3):
            r = detect(noisy(_creep(200, 0.02), np.random.default_rng(10 + seed), "normal", 0.01, reps), "cpp", "tsc")
            assert r.changes == ()


def test_a_step_on_top_of_a_creep_is_still_a_step():
    for seed in range(3):
        level = _creep(200, 0.10) * np.where(np.arange(200) >= 130, 1.03, 1.0)
        r = detect(noisy(level, np.random.default_rng(20 + seed), "normal", 0.01, 3), "cpp", "tsc")
        assert [abs(c.index - 130) <= 1 for c in r.changes] == [True], [c.index for c in r.changes]
        assert len(r.creeps) == 1


def test_steps_on_a_flat_series_are_not_a_creep():
    level = 100.0 * np.where(np.arange(300) >= 100, 1.03, 1.0) * np.where(np.arange(300) >= 200, 1.03, 1.0)
    r = detect(noisy(level, np.random.default_rng(4), "normal", 0.01, 3), "cpp", "tsc")
    assert [c.index for c in r.changes] == [100, 200] and r.creeps == ()


def test_a_small_step_on_a_creep_is_placed_and_sized_with_the_creep_taken_out():
    """The search runs again on the creep's stretch with the ramp taken out: a 2 % step is placed where it is, not
    where the staircase cut the ramp, and its size is its own, not the ramp's share of the windows around it."""
    for seed in range(8):
        level = _creep(200, 0.10) * np.where(np.arange(200) >= 130, 1.02, 1.0)
        r = detect(noisy(level, np.random.default_rng(40 + seed), "normal", 0.01, 3), "cpp", "tsc")
        assert [abs(c.index - 130) <= 1 for c in r.changes] == [True], (seed, [c.index for c in r.changes])
        assert r.changes[0].rel_change == pytest.approx(0.02, abs=0.006), seed
