import math

import numpy as np
import pytest

from perfci_core.analysis.noise import diff_sigma, learned_min_effect, mad_sigma


def test_mad_sigma_hand_computed():
    # median 3, |dev| = 2 1 0 1 97 -> MAD 1
    assert mad_sigma(np.array([1, 2, 3, 4, 100])) == pytest.approx(1.4826)
    assert mad_sigma(np.array([5.0])) == 0.0


def test_diff_sigma_ignores_steps_and_matches_normal_scale():
    rng = np.random.default_rng(0)
    y = rng.normal(0, 0.5, 4000)
    y[2000:] += 10.0  # a huge step
    assert diff_sigma(y) == pytest.approx(0.5, rel=0.05)
    assert np.std(y) > 4  # what a naive estimate would say


def test_diff_sigma_hand_computed():
    # diffs 1, -1, 1, -1 -> median |d| 1 -> 1.4826 / sqrt 2
    assert diff_sigma(np.array([0, 1, 0, 1, 0.0])) == pytest.approx(1.4826 / math.sqrt(2))


def test_learned_min_effect():
    assert learned_min_effect(0.01, 0.002, 0.5) == 0.005
    assert learned_min_effect(0.001, 0.002, 0.5) == 0.002
    with pytest.raises(ValueError):
        learned_min_effect(math.nan, 0.002, 0.5)
