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

`effects` (per part, in the claim's direction) plants true differences: the least favourable
configuration of the co-primary rule (`VerdictConfig.parts`) is one part at its null and the others
clearly true, where a false "supports" needs only the null part's own test (`LEAST_FAVOURABLE`).
"""
from __future__ import annotations

import numpy as np

from sweeper.report.boundaries import nominal_level
from sweeper.report import statistics
from sweeper.report.statistics import HOLM, VerdictConfig, paired_test
from sweeper.spec.sequential import SequentialSpec

NULLS = ("normal", "t3", "centred-exponential", "unequal-SD")
TRUE_EFFECT = 4.0
"""A part's planted difference where it is clearly true (SDs of one replicate's difference are
about 1.2 with the source effects): found at 9 runs nearly always."""


def least_favourable(parts: int) -> np.ndarray:
    """Part 0 at its null, the others clearly true: where the co-primary rule's false verdicts are
    highest (alpha / 2 for a false "supports" plus the null part's false "contradicts")."""
    return np.r_[0.0, np.full(parts - 1, TRUE_EFFECT)]


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
                source_sd: float = 0.5, shared_from: int | None = None, sign: np.ndarray | None = None,
                effects: np.ndarray | None = None) -> np.ndarray:
    """Run differences A - B, (study, part, replicate), under `null`. `sign` (per study and part,
    +-1; random when None) mirrors the skewed arm: bad runs in A or in B alike. `effects` (per
    part; none when None) are added after, in the claim's direction."""
    a, b = own_effects(rng, null, (studies, parts, replicates))
    sources = rng.normal(0, source_sd, (2, studies, parts, replicates))[..., source_of(replicates, shared_from)]
    if sign is None:
        sign = rng.choice([-1.0, 1.0], (studies, parts, 1))
    d = sign * ((sources[0] + a) - (sources[1] + b))
    return d if effects is None else d + np.asarray(effects, float)[None, :, None]


def fixed_verdicts(d: np.ndarray, config: VerdictConfig = VerdictConfig()) -> np.ndarray:
    """Per study, whether its finding gives a verdict (supports or contradicts) in the fixed design:
    the report's rule (`statistics.part_codes`, `config.parts`, and `finding_codes`) over its
    parts' p-values (looked up at each call: a calibration breaks them on purpose); under `holm`,
    whether any part is decided (the family-wise rate, an upper bound of the finding's)."""
    above, below = paired_test(d, 0.0, config)
    codes, _, _ = statistics.part_codes(above, below, config.alpha, config.parts)
    if config.parts == HOLM:  # Holm's family-wise rate: any part decided (an upper bound; the tables')
        return (codes != 0).any(axis=1)
    return statistics.finding_codes(codes) != 0


def sequential_verdicts(d: np.ndarray, design: SequentialSpec, config: VerdictConfig = VerdictConfig()) -> np.ndarray:
    """Per study, whether its finding gives a verdict at some look of `design`. `holm`: the first
    decision of Holm over looks (`sweeper.report.sequential.decide_look`) is the smallest p of its
    parts at a look reaching that look's level for alpha / parts. `co-primary`: every part's p for
    the claim reaches a look's one-sided level of alpha / 2, each at its own look (supports), or
    the smallest p against it reaches a look's one-sided level of alpha / 2 / parts (Holm over
    looks' first step: contradicts). Futility stops are ignored: they only remove chances of a
    verdict (non-binding), so this is the rate's upper bound."""
    fractions, parts = design.fractions(), d.shape[1]
    verdict = np.zeros(len(d), bool)
    supported = np.zeros(d.shape[:2], bool)
    for k, n in enumerate(design.looks()):
        above, below = paired_test(d[..., :n], 0.0, config)
        if config.parts == HOLM:
            p = np.minimum(1.0, 2 * np.fmin(above, below))
            verdict |= np.nanmin(p, axis=1) <= nominal_level(fractions, k, design.alpha / parts)
            continue
        supported |= (above < below) & (above <= nominal_level(fractions, k, design.alpha) / 2)
        against = np.nanmin(np.where(below < above, below, np.inf), axis=1)
        verdict |= against <= nominal_level(fractions, k, design.alpha / parts) / 2
    return verdict | supported.all(axis=1)
