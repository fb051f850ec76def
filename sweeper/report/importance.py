"""Parameter importances of the sampling searches (search: optuna or random), by Optuna's evaluator.

Per (checkpoint, task) cell, its samples are the trials of an in-memory Optuna study: each
sample's parameters (learning rate and searched fields, from the store's `learning_rate` and
`params`) and its seed-averaged search score (`sweeper.run.search.search_score`: the validation
score, 0 for a diverged or failed seed, the last curve point for a stopped one: what the search
itself was told); `optuna.importance.get_param_importances` with fANOVA (seeded) gives each
parameter's share of the score's variance in the cell. Read from the store, the record; the
parameters' bounds come from the study's spec when the report has it (its `space`), else from the
range the samples cover (the learning rate on a log scale). A cell with fewer than
`MIN_SAMPLES` samples is left out (an importance over a handful of points is noise), and so is
one whose samples all score the same (nothing to explain), and a parameter that takes one value
in the cell.
"""
from __future__ import annotations

import json
import math
import warnings

import pandas as pd

from sweeper.report import analysis
from sweeper.spec import space as spaces

MIN_SAMPLES = 4
"""Samples a cell needs before its importances are computed."""


def sample_scores(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per recorded sample of a sampling search: checkpoint_id, task, objective (as the
    tables write it: a checkpoint from elsewhere without one is 'not stated', never dropped from a
    group), sample, `point` (parameter -> value) and `score` (seed-averaged search score)."""
    rows = trials[trials["sample"].notna()] if "sample" in trials else trials.iloc[:0]
    if rows.empty:
        return pd.DataFrame(columns=["checkpoint_id", "task", "objective", "sample", "point", "score"])
    score = rows["validation_score"].map(lambda v: float(v) if v is not None and math.isfinite(v) else 0.0)
    frame = rows.assign(score=score, objective=rows["objective"].map(analysis.objective_text), point=[
        {spaces.LEARNING_RATE: float(lr), **json.loads(params or "{}")}
        for lr, params in zip(rows["learning_rate"], rows["params"])])
    samples = frame.groupby(["checkpoint_id", "task", "objective", "sample"], sort=True)
    return samples.agg(point=("point", "first"), score=("score", "mean")).reset_index()


def inferred_space(points: list[dict]) -> dict[str, object]:
    """Optuna distributions covering the sampled values: a numeric parameter's range (the learning
    rate on a log scale), any other a categorical over its values."""
    import optuna

    found = {}
    for name in sorted(set().union(*points)):
        values = [p[name] for p in points if p.get(name) is not None]
        if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            low, high = float(min(values)), float(max(values))
            found[name] = optuna.distributions.FloatDistribution(
                low, high, log=name == spaces.LEARNING_RATE and low > 0
            )
        else:
            found[name] = optuna.distributions.CategoricalDistribution(sorted({json.dumps(v) for v in values}))
    return found


def optuna_params(point: dict, distributions: dict, space: dict) -> dict:
    """The sample's values as Optuna stores them under `distributions`."""
    import optuna

    params = {}
    for name, distribution in distributions.items():
        value = point.get(name)
        if name in space:
            params[name] = spaces.to_optuna(space[name], value)
        elif isinstance(distribution, optuna.distributions.CategoricalDistribution):
            params[name] = json.dumps(value)
        else:
            params[name] = float(value)
    return params


def cell_trials(points: list[dict], scores, space: dict) -> list:
    """The samples as finished Optuna trials, over the spec's distributions where `space` names them."""
    import optuna

    distributions = {name: spaces.optuna_distribution(space[name]) if name in space else distribution
                     for name, distribution in inferred_space(points).items()}
    return [optuna.trial.create_trial(params=optuna_params(point, distributions, space), distributions=distributions,
                                      value=score) for point, score in zip(points, scores)]


def cell_importances(samples: pd.DataFrame, space: dict | None = None) -> pd.DataFrame:
    """Per cell with at least MIN_SAMPLES samples: one row per varying parameter with its fANOVA
    importance (the cell's importances sum to 1). `space`: parameter -> sweeper.spec.parsing.Distribution."""
    import optuna
    from optuna.importance import FanovaImportanceEvaluator, get_param_importances

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = []
    for (checkpoint_id, task, objective), cell in samples.groupby(["checkpoint_id", "task", "objective"], sort=True):
        if len(cell) < MIN_SAMPLES:
            continue
        points = list(cell["point"])
        varying = [name for name in sorted(set().union(*points)) if len({json.dumps(p.get(name)) for p in points}) > 1]
        if not varying or cell["score"].nunique() < 2:  # nothing varies: no variance to share out
            continue
        study = optuna.create_study(direction="maximize")
        try:  # the spec's bounds; samples recorded under another space than the spec's: their own range
            study.add_trials(cell_trials(points, cell["score"], space or {}))
        except ValueError:
            study = optuna.create_study(direction="maximize")
            study.add_trials(cell_trials(points, cell["score"], {}))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                importances = get_param_importances(study, evaluator=FanovaImportanceEvaluator(seed=0), params=varying)
            except RuntimeError:  # fANOVA's trees found no variance (scores that differ by float dust)
                continue
        rows += [{"checkpoint_id": checkpoint_id, "task": task, "objective": objective, "parameter": name,
                  "importance": value, "samples": len(cell)} for name, value in importances.items()]
    return pd.DataFrame(rows, columns=["checkpoint_id", "task", "objective", "parameter", "importance", "samples"])


def importance_summary(importances: pd.DataFrame) -> pd.DataFrame:
    """Mean importance per task, objective and parameter over the cells (columns: parameters),
    with the number of cells."""
    if importances.empty:
        return pd.DataFrame()
    table = importances.pivot_table(index=["task", "objective"], columns="parameter", values="importance",
                                    aggfunc="mean")
    table["cells"] = importances.groupby(["task", "objective"])["checkpoint_id"].nunique()
    return table.reset_index()
