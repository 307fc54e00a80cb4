import math

import pytest
from perfci_core.analysis.compare import min_attainable_p
from perfci_core.analysis.sequential import look_alpha, spent


@pytest.mark.parametrize("shape", ["pocock", "obrien-fleming", "even"])
def test_the_looks_spend_exactly_alpha_and_each_spends_something(shape):
    shares = [look_alpha(0.01, k, 8, shape) for k in range(1, 9)]
    assert math.isclose(sum(shares), 0.01, rel_tol=1e-12)
    assert all(s > 0 for s in shares)
    assert spent(0.01, 0.0, shape) == 0.0 and math.isclose(spent(0.01, 1.0, shape), 0.01)


def test_pocock_is_about_even_and_obrien_fleming_spends_late():
    pocock = [look_alpha(0.01, k, 8) for k in range(1, 9)]
    assert max(pocock) / min(pocock) < 2.5
    assert pocock[0] < min_attainable_p(5, 5)  # 5 vs 5 repetitions cannot use the first look's share (2 / 252)
    assert look_alpha(0.01, 2, 8, "obrien-fleming") < 1e-6 < look_alpha(0.01, 8, 8, "obrien-fleming")


def test_even_spending_is_bonferroni_over_the_looks():
    assert all(math.isclose(look_alpha(1e-4, k, 12, "even"), 1e-4 / 12) for k in range(1, 13))


def test_bad_looks_and_shapes_are_refused():
    with pytest.raises(ValueError, match="look"):
        look_alpha(0.01, 0, 8)
    with pytest.raises(ValueError, match="spending"):
        spent(0.01, 0.5, "linear")
