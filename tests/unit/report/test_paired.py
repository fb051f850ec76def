"""The paired tests of sweeper/report/paired.py: the exact sign-flip test against its definition,
the skew-sign test's parts, and the skew note's rate per design."""
from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

from sweeper.report.paired import (SEQUENTIAL_LOOKS, SKEW_UNITS, SKEWED_RATES, SKEWED_SEQUENTIAL, adjusted_skewness,
                                   sign_flip, skew_corrected_t, skew_note, skew_sign)
from sweeper.report.robustness import smallest_p
from sweeper.spec.sequential import SequentialSpec


@pytest.mark.parametrize("n", [1, 3, 6, 9, 12])
def test_the_sign_flip_counts_every_sign_vector(n):
    rng = np.random.default_rng(n)
    d = rng.exponential(1.0, (40, n)) - 0.7
    d[0] = 0.0  # every sum ties
    d[1] = np.round(d[1])  # some sums tie
    signs = np.array(list(itertools.product([-1.0, 1.0], repeat=n))).T
    sums, observed = (d - 0.1) @ signs, (d - 0.1).sum(axis=1, keepdims=True)
    above, below = sign_flip(d, shift=0.1)
    np.testing.assert_allclose(above, (sums >= observed - 1e-9).mean(axis=1))
    np.testing.assert_allclose(below, (sums <= observed + 1e-9).mean(axis=1))


def test_the_skew_sign_test_needs_both_tests_and_has_the_sign_flips_floor():
    rng = np.random.default_rng(3)
    d = rng.normal(1.0, 1.0, (2, 5, SKEW_UNITS + 3))
    above, below = skew_sign(d)
    np.testing.assert_array_equal(above, np.fmax(skew_corrected_t(d)[0], sign_flip(d)[0]))
    np.testing.assert_array_equal(below, np.fmax(skew_corrected_t(d)[1], sign_flip(d)[1]))
    n = 9
    assert 2 * skew_sign(np.full((1, n), 5.0) + np.arange(n))[0][0] == pytest.approx(smallest_p("skew-sign", n))
    few = d[..., :SKEW_UNITS - 1]  # below SKEW_UNITS, the plain t (the skew-t's rule)
    np.testing.assert_array_equal(skew_sign(few)[0], skew_corrected_t(few)[0])


def test_the_skew_note_quotes_the_rate_of_the_studys_design():
    test = "t"  # rates above 5 % in both designs
    fixed = skew_note(9, 3, 1.8, test)
    sequential = skew_note(9, 3, 1.8, test, SequentialSpec().looks())
    other = skew_note(9, 3, 1.8, test, (6, 9, 12, 15))
    assert f"{SKEWED_RATES[test][3][2][1]:.0f} % false verdicts per finding at 9 units" in fixed
    assert f"{SKEWED_SEQUENTIAL[test][3]:.0f} % false verdicts per finding over a sequential design's looks at " \
           f"{', '.join(map(str, SEQUENTIAL_LOOKS))} runs" in sequential
    assert "not this study's" in other
    assert skew_note(9, 3, 0.3, test, SequentialSpec().looks()) == ""


def test_the_adjusted_skewness_is_scipys():
    """Against `scipy.stats.skew(bias=False)` on the shapes the tests see: units of 3 to 15, axes
    tested apart, skewed and symmetric rows, rows that do not vary (NaN), a NaN among the units."""
    from scipy import stats

    rng = np.random.default_rng(11)
    for units in (2, 3, 5, 6, 15):
        values = np.concatenate([rng.exponential(size=(4, 3, units)), rng.normal(size=(4, 3, units))])
        values[0, 0] = 0.3  # does not vary
        values[1, 1, 0] = np.nan
        with warnings.catch_warnings():  # scipy's own, on the row that does not vary
            warnings.simplefilter("ignore", RuntimeWarning)
            expected = stats.skew(values, axis=-1, bias=False)
        np.testing.assert_allclose(adjusted_skewness(values), expected, rtol=1e-12, atol=1e-12, equal_nan=True)
        assert np.isnan(adjusted_skewness(values)[0, 0]) and np.isnan(adjusted_skewness(values)[1, 1])
