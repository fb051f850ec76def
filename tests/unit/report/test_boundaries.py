"""The group-sequential boundaries (sweeper.report.boundaries) against published tables, and the
conditional power's basic properties."""
from __future__ import annotations

import math

import pytest
from scipy import stats

from sweeper.report.boundaries import conditional_power, efficacy_bounds, nominal_level, spent

# Lan-DeMets O'Brien-Fleming-type spending, equally spaced looks, one-sided alpha 0.025: Jennison
# and Turnbull (2000) table 2.3 / rpact getDesignGroupSequential(typeOfDesign = "asOF").
PUBLISHED = {
    (0.2, 0.4, 0.6, 0.8, 1.0): (4.877, 3.357, 2.680, 2.290, 2.031),
    (1 / 3, 2 / 3, 1.0): (3.710, 2.511, 1.993),
    (0.5, 1.0): (2.963, 1.969),
}


@pytest.mark.parametrize("fractions", list(PUBLISHED))
def test_the_boundaries_are_the_published_ones(fractions):
    assert efficacy_bounds(fractions, 0.025) == pytest.approx(PUBLISHED[fractions], abs=1e-3)


def test_a_single_look_is_the_fixed_test_and_the_whole_alpha_is_spent_by_the_end():
    assert efficacy_bounds((1.0,), 0.025)[0] == pytest.approx(stats.norm.isf(0.025))
    assert spent(1.0, 0.025) == pytest.approx(0.025)
    assert spent(0.5, 0.025) < spent(0.8, 0.025) < 0.025
    # two-sided level over looks: the last look's nominal level sits a little under alpha
    assert 0.04 < nominal_level((1 / 3, 2 / 3, 1.0), 2, 0.05) < 0.05


def test_unequal_looks_and_bad_fractions():
    bounds = efficacy_bounds((3 / 9, 5 / 9, 7 / 9, 1.0), 0.025)
    assert list(bounds) == sorted(bounds, reverse=True)
    for bad in ((0.5, 0.5, 1.0), (0.5, 0.9), (0.0, 1.0)):
        with pytest.raises(ValueError):
            efficacy_bounds(bad, 0.025)


def test_conditional_power_follows_the_trend():
    bound = efficacy_bounds((1 / 3, 2 / 3, 1.0), 0.0125)[-1]
    weak, strong = conditional_power(0.4, 3, 1 / 3, bound), conditional_power(0.01, 3, 1 / 3, bound)
    assert weak < 0.05 < 0.5 < strong
    assert math.isnan(conditional_power(0.01, 3, 1.0, bound))
    # at the same p-value, more units mean a smaller t (the trend is the t statistic itself)
    assert conditional_power(0.05, 3, 1 / 3, bound) > conditional_power(0.05, 30, 1 / 3, bound)
