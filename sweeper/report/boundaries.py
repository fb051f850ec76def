"""Group-sequential boundaries: how far a test statistic must go at each planned look so that the
chance of a false verdict over all looks stays at the stated rate.

Lan and DeMets' (1983) alpha-spending form of O'Brien and Fleming's boundaries: by information
fraction t (here the replicates at a look over the maximum), a one-sided level `alpha` is spent as

    alpha(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t)),

little at the early looks and nearly all of it at the last. The boundary c_k of look k solves
P(Z_1 < c_1, ..., Z_{k-1} < c_{k-1}, Z_k >= c_k) = alpha(t_k) - alpha(t_{k-1}) under the null, the Z_k
being the canonical joint normal (corr(Z_i, Z_j) = sqrt(t_i / t_j), i <= j). The probabilities come
from the recursive numerical integration of Armitage, McPherson and Rowe (1969) on the score
scale S_k = Z_k sqrt(t_k), whose increments are independent normals: the density of S_k on the
region where no boundary was crossed is carried from look to look on a fixed grid (trapezoid
rule), which is deterministic and takes milliseconds. No maintained Python library computes
these boundaries (statsmodels has none;
gsDesign and rpact are R): `tests/unit/report/test_boundaries.py` holds this module to the
published tables (Jennison and Turnbull 2000, table 2.3; rpact's `getDesignGroupSequential`
with `typeOfDesign="asOF"`: K = 5, one-sided 0.025: 4.877, 3.357, 2.680, 2.290, 2.031).

Conditional power (`conditional_power`) is the chance, under the trend seen so far, that the
statistic ends above the last boundary at the maximum: Brownian motion B(t) = Z(t) sqrt(t) with
drift theta estimated as B(t)/t.
"""
from __future__ import annotations

import functools
import math

import numpy as np
from scipy import optimize, special, stats

SEARCH = (0.0, 40.0)
"""Where a boundary is looked for (a z-value): a level of 1e-300 sits below 40."""


def spent(fraction: float, alpha: float) -> float:
    """One-sided `alpha` spent by information fraction `fraction` (O'Brien-Fleming-type)."""
    if fraction <= 0:
        return 0.0
    return float(2 * stats.norm.sf(stats.norm.isf(alpha / 2) / math.sqrt(min(fraction, 1.0))))


GRID = 1201
"""Points of the integration grid: boundaries agree with the published tables to 1e-4."""


@functools.lru_cache(maxsize=1024)
def efficacy_bounds(fractions: tuple[float, ...], alpha: float) -> tuple[float, ...]:
    """The one-sided boundaries (z-values) at looks with these increasing information fractions
    (the last 1.0), spending one-sided `alpha` O'Brien-Fleming-like."""
    if not fractions or any(b <= a for a, b in zip(fractions, fractions[1:])) or not 0 < fractions[0] \
            or not math.isclose(fractions[-1], 1.0):
        raise ValueError(f"information fractions must increase to 1, got {fractions}")
    bounds: list[float] = []
    grid = density = None  # S_{k-1}'s sub-density where no boundary was crossed, on `grid`
    previous = 0.0
    for k, t in enumerate(fractions):
        increment = spent(t, alpha) - (spent(previous, alpha) if k else 0.0)
        if k == 0:
            bounds.append(float(stats.norm.isf(increment)))
        else:
            step = math.sqrt(t - previous)
            weighted = density * trapezoid_weights(grid)  # the trapezoid rule as one dot product

            def crossing(c: float) -> float:  # P(no earlier crossing, S_k >= c sqrt(t))
                return float(weighted @ special.ndtr((grid - c * math.sqrt(t)) / step))  # ndtr(-x) = norm.sf(x)

            bounds.append(float(optimize.brentq(lambda c: crossing(c) - increment, *SEARCH, xtol=1e-9)))
        # Carry the density to this look, on the region below its boundary.
        new_grid = np.linspace(-8 * math.sqrt(t), bounds[-1] * math.sqrt(t), GRID)
        if k == 0:
            density = stats.norm.pdf(new_grid / math.sqrt(t)) / math.sqrt(t)
        else:
            kernel = np.exp(-0.5 * ((new_grid[:, None] - grid[None, :]) / step) ** 2) / (step * math.sqrt(2 * math.pi))
            density = kernel @ weighted  # the trapezoid rule over the previous grid, for every new point
        grid, previous = new_grid, t
    return tuple(bounds)


def trapezoid(values: np.ndarray, grid: np.ndarray, axis: int = -1):
    return np.trapezoid(values, grid, axis=axis)


def trapezoid_weights(grid: np.ndarray) -> np.ndarray:
    """w with `w @ values == trapezoid(values, grid)`: the integral as a dot product, so the kernel
    step is one matrix-vector product instead of a grid x grid product summed (about 10x less)."""
    gaps = np.diff(grid)
    return np.concatenate([[gaps[0] / 2], (gaps[:-1] + gaps[1:]) / 2, [gaps[-1] / 2]])


def nominal_level(fractions: tuple[float, ...], look: int, alpha: float) -> float:
    """The two-sided p-value a test must reach at `look` (0-based) for a two-sided level `alpha`
    over all looks: each direction spends alpha/2 (a part's p-value tries both directions)."""
    return float(2 * stats.norm.sf(efficacy_bounds(fractions, alpha / 2)[look]))


def conditional_power(p_one_sided: float, units: int, fraction: float, final_bound: float) -> float:
    """Chance that a one-sided statistic now at p-value `p_one_sided` (a t-test over `units`), at
    information `fraction`, ends at or above `final_bound` (a z-value) at the maximum, if the trend
    seen so far holds. The trend is the t statistic itself (the effect estimate over its standard
    error), not the normal quantile of its p-value: with 2 degrees of freedom the two differ by a
    factor of 2 at p = 0.025, and the quantile would call most true effects futile at a first look."""
    if fraction >= 1 or math.isnan(p_one_sided) or units < 2:
        return math.nan
    z = float(stats.t.isf(min(max(p_one_sided, 1e-300), 1.0), units - 1))
    return float(stats.norm.sf((final_bound - z / math.sqrt(fraction)) / math.sqrt(1 - fraction)))
