"""The power of the paired t-test behind every part: the smallest true difference it detects with
80 % power (`standardized_detectable`), for the report's "detectable (80 %)" column and `sweeper
plan`'s "what it can decide" (sweeper.design.decidable). Computed here rather than by statsmodels'
`TTestPower.solve_power`, which stops short at 3 units (docs/statistics.md, "Power per part")."""
from __future__ import annotations

import functools
import math

import numpy as np
from scipy import stats

CHI_NODES = 8192
"""Quantile nodes over which `t_test_power` averages: its solved effects agree with statsmodels'
to 1e-5 SDs where statsmodels converges, and with simulation where it does not
(tests/unit/design/test_decidable.py)."""


@functools.lru_cache(maxsize=64)
def chi_scales(df: int) -> np.ndarray:
    """sqrt(V / df) at the midpoints of CHI_NODES equal-probability bins of V ~ chi-square(df)."""
    return np.sqrt(stats.chi2.ppf((np.arange(CHI_NODES) + 0.5) / CHI_NODES, df) / df)


def t_test_power(effect: float, units: int, alpha: float, one_sided: bool) -> float:
    """Power of a paired t-test over `units` at a true effect of `effect` SDs: the noncentral t's
    tail as the normal tail averaged over the chi-square of the SD's estimate (scipy's and
    statsmodels' noncentral t give NaN from a noncentrality of about 10 at 2 degrees of freedom,
    which 3 units at Holm's levels need: statsmodels' solve_power then stops short, at 0.786
    power for 3 units at level 0.025)."""
    from scipy.special import ndtr

    df = units - 1
    noncentrality, critical = effect * math.sqrt(units), stats.t.isf(alpha if one_sided else alpha / 2, df)
    scale = critical * chi_scales(df)
    upper = ndtr(noncentrality - scale)
    return float(np.mean(upper if one_sided else upper + ndtr(-noncentrality - scale)))


@functools.lru_cache(maxsize=256)
def standardized_detectable(units: int, alpha: float, one_sided: bool, power: float = 0.8) -> float:
    """Effect in SDs of the differences that a paired t-test over `units` finds with `power` (both
    directions unless `one_sided`): `t_test_power` solved for the effect."""
    if units < 2:
        return math.nan
    from scipy import optimize

    high = 1.0
    while t_test_power(high, units, alpha, one_sided) < power:
        high *= 2
    return float(optimize.brentq(lambda d: t_test_power(d, units, alpha, one_sided) - power, 0.0, high, xtol=1e-8))
