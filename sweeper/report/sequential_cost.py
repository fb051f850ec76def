"""What a sequential replicate plan is expected to train, for `sweeper plan`: the chance that one
comparison stops at each look, at the effect the spec plans for (`pretraining.sequential`'s
`planning_effect` and `planning_run_sd`, points on the 0-100 scale).

One comparison is a paired test over replicates whose difference has mean `effect` and SD
`run_sd` x sqrt(2) (two independent runs). Its statistic at look k is simulated as the
z-statistic of the first n_k differences (20,000 paths, seeded: the same figure on every call),
stopped at the boundary (sweeper.report.boundaries, at the whole alpha: one comparison) or, from
FUTILITY_UNITS runs on, for futility. A configuration is costed as one comparison: one with
several open comparisons runs to the last of them, so the expected figure is a floor for such a
configuration; the study-level figure for the paper's grid is benchmarks/sequential_power.py's.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats

from sweeper.report.boundaries import efficacy_bounds
from sweeper.spec.sequential import SequentialSpec

PATHS = 20_000


def stopping_probabilities(design: SequentialSpec, paths: int = PATHS) -> np.ndarray:
    """P(the comparison stops at look k), k over the design's looks (the last takes the rest)."""
    from sweeper.report.sequential import FUTILITY_UNITS

    looks, fractions = np.array(design.looks()), design.fractions()
    bounds = np.array(efficacy_bounds(fractions, design.alpha / 2))
    drift = design.planning_effect / (design.planning_run_sd * math.sqrt(2))  # per replicate, in SDs
    rng = np.random.default_rng(0)
    increments = rng.normal(drift * np.diff(looks, prepend=0), np.sqrt(np.diff(looks, prepend=0)), (paths, len(looks)))
    z = np.cumsum(increments, axis=1) / np.sqrt(looks)
    final = bounds[-1]
    fraction = np.asarray(fractions)
    with np.errstate(divide="ignore", invalid="ignore"):
        power = stats.norm.sf((final - np.abs(z) / np.sqrt(fraction)) / np.sqrt(1 - fraction))
    futile = (power < design.futility) & (looks >= FUTILITY_UNITS) & (fraction < 1)
    stop = (np.abs(z) >= bounds) | futile
    stop[:, -1] = True
    first = stop.argmax(axis=1)
    return np.bincount(first, minlength=len(looks)) / paths


def expected_replicates(design: SequentialSpec) -> float:
    """Expected replicates of one configuration under the planning effect."""
    return float(stopping_probabilities(design) @ np.array(design.looks()))


def plan_lines(study) -> list[str]:
    """`sweeper plan`'s lines for a sequential plan (a `plan.load.LoadedStudy`): its looks, and its
    pretraining GPU-hours at the first look, expected at the planning effect, and at the maximum
    (= the fixed design there)."""
    from sweeper.plan.cost import pretraining_cost

    spec, plan, design = study.spec, study.plan, study.spec.pretraining.sequential
    if design is None:
        return []
    first = pretraining_cost(spec, plan.runs).gpu_hours
    widest = study.with_replicates({run.name: design.maximum for run in plan.runs if run.replicate == 0}).plan
    maximum = pretraining_cost(spec, widest.runs).gpu_hours
    expected = expected_replicates(design)
    # Continued runs cost what they add, scratch runs their whole budget: every configuration has
    # the first look's replicates, so a replicate costs first / first-look replicates.
    expected_hours = first / design.looks()[0] * expected
    skipped = [f"    {design.skipped()}"] if design.skipped() else []
    return [f"  sequential replicates:  looks at {', '.join(map(str, design.looks()))} runs per configuration "
            f"(alpha {design.alpha:g} per finding over all looks, futility below {design.futility:.0%})",
            f"    pretraining GPU-h: first look {first:,.1f}; expected {expected_hours:,.1f} "
            f"({expected:.1f} runs per configuration if its comparisons differ by {design.planning_effect:g} points, "
            f"run SD {design.planning_run_sd:g}); maximum {maximum:,.1f} "
            f"({len(widest.runs)} runs, the fixed design at {design.maximum})", *skipped]
