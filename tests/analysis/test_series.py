"""Series input: the per-point medians detection reads."""

from __future__ import annotations

import numpy as np

from perfci_core.analysis.series import clean, medians_of


def test_medians_taken_together_equal_one_median_per_point_exactly():
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal(int(rng.integers(1, 9))) * 3 + 100 for _ in range(500)]  # ragged, odd and even sizes
    assert np.array_equal(medians_of(samples), [np.median(x) for x in samples])
    series = clean([(f"c{i}", x.tolist()) for i, x in enumerate(samples)])
    assert series.medians is series.medians  # computed once
    assert medians_of([]).size == 0
