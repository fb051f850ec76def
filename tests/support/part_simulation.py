"""Simulated findings at the level of their parts' run differences, drawn as the plan builds the
runs, for the calibration of the verdicts' test under several nulls (tests/unit/report/
test_skew_calibration.py, benchmarks/skew_rates.py; docs/statistics.md quotes their numbers).

A finding has `parts` parts; each compares two continued-pretraining arms A and B whose sources
differ (finding 5: MLM continued from CLM against MLM continued from MLM). Replicate r of a CPT arm
continues from replicate `source_of(r)` of its source, so its run effect is

    source effect (source replicate, SD `source_sd`) + own effect (the null's distribution),

and a source replicate's effect is shared by every CPT run that continues from it. The plan gives
replicate r its own source replicate r; `shared_from` simulates the fallback that continued
replicates r >= shared_from from source replicate 0 (the calibration must catch it). The own
effects under each null, with unit variance of the difference:

- normal: both arms N(0, 1/2);
- t3: both arms Student t with 3 degrees of freedom, scaled;
- centred-exponential: arm A has occasional bad runs (1 - Exp(1)), arm B no own noise: the
  differences are a centred exponential (skewness 2) plus the source effects;
- unequal-SD: arm A's SD three times arm B's.
"""
from __future__ import annotations

import numpy as np

from sweeper.report.boundaries import nominal_level
from sweeper.report.statistics import VerdictConfig, paired_test
from sweeper.spec.sequential import SequentialSpec

NULLS = ("normal", "t3", "centred-exponential", "unequal-SD")


def own_effects(rng: np.random.Generator, null: str, shape: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Arms A's and B's own run effects under `null` (their difference has variance 1)."""
    if null == "normal":
        return rng.normal(0, 0.5 ** 0.5, shape), rng.normal(0, 0.5 ** 0.5, shape)
    if null == "t3":
        return (rng.standard_t(3, shape) / 6 ** 0.5, rng.standard_t(3, shape) / 6 ** 0.5)
    if null == "centred-exponential":
        return 1 - rng.exponential(1.0, shape), np.zeros(shape)
    if null == "unequal-SD":
        return rng.normal(0, 0.9 ** 0.5, shape), rng.normal(0, 0.1 ** 0.5, shape)
    raise ValueError(f"unknown null {null!r}")


def source_of(replicates: int, shared_from: int | None) -> np.ndarray:
    """The source replicate each CPT replicate continues from: its own (the plan), or replicate 0
    from `shared_from` on (the fallback the plan no longer takes)."""
    r = np.arange(replicates)
    return r if shared_from is None else np.where(r < shared_from, r, 0)


def differences(rng: np.random.Generator, null: str, studies: int, parts: int, replicates: int,
                source_sd: float = 0.5, shared_from: int | None = None, sign: np.ndarray | None = None) -> np.ndarray:
    """Run differences A - B, (study, part, replicate), under `null`. `sign` (per study and part,
    +-1; random when None) mirrors the skewed arm: bad runs in A or in B alike."""
    a, b = own_effects(rng, null, (studies, parts, replicates))
    sources = rng.normal(0, source_sd, (2, studies, parts, replicates))[..., source_of(replicates, shared_from)]
    if sign is None:
        sign = rng.choice([-1.0, 1.0], (studies, parts, 1))
    return sign * ((sources[0] + a) - (sources[1] + b))


def fixed_verdicts(d: np.ndarray, config: VerdictConfig = VerdictConfig()) -> np.ndarray:
    """Per study, whether its finding gives a verdict (supports or contradicts) in the fixed design:
    Holm over its parts decides some part exactly when its smallest two-sided p times the number
    of parts is below alpha."""
    above, below = paired_test(d, 0.0, config)
    p = np.minimum(1.0, 2 * np.fmin(above, below))
    return np.nanmin(p, axis=1) * d.shape[1] < config.alpha


def sequential_verdicts(d: np.ndarray, design: SequentialSpec, config: VerdictConfig = VerdictConfig()) -> np.ndarray:
    """Per study, whether its finding gives a verdict at some look of `design`: the first decision
    of Holm over looks (`sweeper.report.sequential.decide_look`) is the smallest p of its parts at
    a look reaching that look's level for alpha / parts. Futility stops are ignored: they only
    remove chances of a verdict (non-binding), so this is the rate's upper bound."""
    fractions, parts = design.fractions(), d.shape[1]
    verdict = np.zeros(len(d), bool)
    for k, n in enumerate(design.looks()):
        above, below = paired_test(d[..., :n], 0.0, config)
        p = np.minimum(1.0, 2 * np.fmin(above, below))
        verdict |= np.nanmin(p, axis=1) <= nominal_level(fractions, k, design.alpha / parts)
    return verdict
