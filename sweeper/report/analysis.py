"""The paper's analyses on a trials table (pandas and scipy only; no plotting, no I/O).

- outcomes: per (checkpoint, task), trials per status (`status_counts`: ok, stopped early by a
  trial scheduler, diverged, failed); only `ok` trials enter the analyses below;
- selection: per (checkpoint, task), the point (learning rate and the values of the swept
  protocol fields, the trial's `params`) with the best seed-averaged validation score; its test
  scores over seeds give the mean and a 95 % Student-t interval;
- swept axes: per swept field and value, the test score at the best point with that value
  (`axis_scores`);
- category scores: per seed, the mean over a category's tasks of the selected test scores, then
  mean and interval over seeds (SC, TC, QA, IR). The per-seed table is kept: seeds share data
  order and the initial head across checkpoints, so the findings pair checkpoints seed by seed;
- stability (paper Fig. 5): scores centred per (checkpoint, task) cell, pooled per category,
  spread = standard deviation over seeds x learning rates in a range (default 1e-5..1e-4), with
  a 95 % interval from the per-seed contributions (the seed is the unit that is replicated);
- data efficiency, biphasic splits, masking ratios, continued pretraining: category scores
  arranged by the coordinate each question varies.
"""
from __future__ import annotations

import functools
import json

import numpy as np
import pandas as pd
from scipy import stats

from sweeper.contract import registry

RUN_COLUMNS = ["checkpoint_id", "run_name", "objective", "clm_fraction", "mask_ratio", "checkpoint_step",
               "total_steps", "tokens_seen", "init_from", "steps_before", "source", "parameters", "arm", "replicate"]
"""A checkpoint's columns (`run_table`). `source` and `parameters` are null in rows written
before them (and absent from hand-built frames): read as the study's own, size unknown; `arm`
and `replicate` likewise: its own arm, the first replicate."""
STUDY_SOURCE = "study"
"""`source` of the study's own checkpoints; any other is a checkpoint from elsewhere
(`finetuning.checkpoints`: its hub id, folder or object-store prefix)."""
SCORE_COLUMNS = ["checkpoint_id", "task", "task_category", "learning_rate", "seed", "test_score"]


@functools.lru_cache(maxsize=64)
def t95_scalar(dof: int) -> float:
    return float(stats.t.ppf(0.975, dof)) if dof > 0 else float("nan")


def t95(dof) -> np.ndarray | float:
    """Two-sided 95 % Student-t quantile; NaN where there are no degrees of freedom."""
    if isinstance(dof, (int, np.integer)):
        return t95_scalar(int(dof))
    dof = np.asarray(dof, dtype=float)
    quantile = np.where(dof > 0, stats.t.ppf(0.975, np.maximum(dof, 1)), np.nan)
    return float(quantile) if quantile.ndim == 0 else quantile


def half_widths(std: pd.Series, count: pd.Series) -> pd.Series:
    """95 % Student-t half-widths of means, vectorised (one scipy call per table, not per group)."""
    count = count.astype(float)
    return pd.Series(t95(count - 1) * std / np.sqrt(count), index=std.index).where(count > 1)


PARAM_PREFIX = "params."
"""Analysis frames hold each swept field's value in a column `params.<field>` (`with_params`)."""


def axes(frame: pd.DataFrame) -> list[str]:
    """The swept-field columns of an analysis frame (`params.weight_decay`, ...)."""
    return [c for c in frame.columns if isinstance(c, str) and c.startswith(PARAM_PREFIX)]


def axis_name(axis: str) -> str:
    return axis.removeprefix(PARAM_PREFIX)


def hashable(value):
    """A swept value as a group-by key: a list (betas) as a tuple; absent as None."""
    if isinstance(value, (list, tuple, np.ndarray)):
        return tuple(float(v) for v in value)
    return value


def with_params(trials: pd.DataFrame) -> pd.DataFrame:
    """The trials with one column `params.<field>` per field swept in any row's `params` (the
    value at the row's point; None where the field does not reach the row's task). A row without
    `params` (written before the column) reads as {} . A row that lacks a field the other rows of
    its (checkpoint, task) have (recorded before the field was swept, under the same key) takes
    the value of its setting column when it has one."""
    if axes(trials) or "params" not in trials or trials.empty:
        return trials
    parsed = trials["params"].map(lambda text: json.loads(text) if isinstance(text, str) and text else {})
    names = sorted(set().union(*parsed)) if len(parsed) else []
    if not names:
        return trials
    frame = trials.copy()
    for name in names:
        values = parsed.map(lambda params: hashable(params.get(name))).astype(object)
        if name in frame:
            cell_has = values.notna().groupby([frame["checkpoint_id"], frame["task"]]).transform("any")
            setting = frame[name].map(lambda v: hashable(v) if v is not None and not (
                isinstance(v, float) and np.isnan(v)) else None).astype(object)
            values = values.where(values.notna() | ~cell_has, setting)
        frame[PARAM_PREFIX + name] = values
    return frame


def ok_trials(trials: pd.DataFrame) -> pd.DataFrame:
    """The trials that ran to their end: every analysis reads these. A trial stopped early by a
    trial scheduler (`stopped`) has no test score and is never selected; a point some of whose
    seeds were stopped keeps the seeds that finished (its `seeds` count says how many), and is
    selected only where no point of its cell finished every seed (`best_params_table`)."""
    trials = with_params(trials)
    return trials[trials["status"] == "ok"]


STATUSES = ("ok", "stopped", "diverged", "failed")
"""A trial's outcomes, as the store's `status` column has them (docs/results.md)."""


def status_counts(trials: pd.DataFrame) -> pd.DataFrame:
    """Per (checkpoint, task): trials recorded, and how many of them ended in each status."""
    if trials.empty:
        return pd.DataFrame(columns=["checkpoint_id", "task", "trials", *STATUSES])
    table = pd.crosstab([trials["checkpoint_id"], trials["task"]], trials["status"])
    table = table.reindex(columns=[*STATUSES, *sorted(set(table.columns) - set(STATUSES))], fill_value=0)
    table.insert(0, "trials", table.sum(axis=1))
    return table.rename_axis(columns=None).reset_index()


def run_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row of run columns per checkpoint (a column the frame lacks reads as null)."""
    return frame.drop_duplicates("checkpoint_id").reindex(columns=RUN_COLUMNS)


def is_external(frame: pd.DataFrame) -> pd.Series:
    """Rows of checkpoints from elsewhere (a `source` other than the study's)."""
    if "source" not in frame:
        return pd.Series(False, index=frame.index)
    return frame["source"].notna() & (frame["source"] != STUDY_SOURCE)


def is_final(frame: pd.DataFrame) -> pd.Series:
    """Rows of final checkpoints: a run's last step, or a checkpoint from elsewhere (which has
    no steps of the study's: step 0, total steps null)."""
    return (frame["checkpoint_step"] == frame["total_steps"]) | is_external(frame)


def objective_text(objective) -> str:
    """A checkpoint's objective as the tables write it ('not stated' for one from elsewhere whose
    meta gives none)."""
    return objective if isinstance(objective, str) else "not stated"


def point_table(ok: pd.DataFrame, cell: list[str]) -> pd.DataFrame:
    """Per `cell` and point (learning rate, swept values): validation and test means over seeds,
    the test std, seeds and 95 % interval. Counted by seed id, never by rows: two samples of a
    search at one point (a repeated draw) give a seed two rows, averaged into one value first."""
    point = [*cell, "learning_rate", *[a for a in axes(ok) if a not in cell]]
    per_seed = ok.groupby([*point, "seed"], dropna=False)[["validation_score", "test_score"]].mean().reset_index()
    points = per_seed.groupby(point, dropna=False)
    table = points[["validation_score", "test_score"]].mean().set_axis(["validation_mean", "test_mean"], axis=1)
    table["test_std"] = points["test_score"].std()
    table["seeds"] = points["seed"].nunique()
    table["test_ci95"] = half_widths(table["test_std"], points["test_score"].count())
    return table.reset_index()


def best_params_table(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per (checkpoint, task): the best point (learning rate and swept values, the
    `params.*` columns) on mean validation; test mean/std/CI there. Ties go to the smaller
    learning rate, then the smaller swept values."""
    ok = ok_trials(trials)
    if ok.empty:
        return pd.DataFrame()
    per_point = point_table(ok, ["checkpoint_id", "task", "task_category"])
    # A point some of whose seeds a scheduler stopped is judged on the seeds that survived, the
    # lucky ones: its mean is biased upwards, so points that finished every seed come first.
    keys = ["checkpoint_id", "task", "learning_rate", *axes(ok)]
    stopped = with_params(trials)
    stopped = stopped.loc[stopped["status"] == "stopped", keys].drop_duplicates().assign(seed_stopped=True)
    per_point = per_point.merge(stopped, on=keys, how="left")
    per_point["seed_stopped"] = per_point["seed_stopped"].astype("boolean").fillna(False).astype(bool)
    # A cell with no validation score at any point has nothing to select on: it is left out.
    best = (per_point.dropna(subset=["validation_mean"])
                     .sort_values(["seed_stopped", "validation_mean"], ascending=[True, False], kind="stable")
                     .drop_duplicates(["checkpoint_id", "task"]).drop(columns="seed_stopped"))
    best = best.merge(run_table(ok), on="checkpoint_id")
    return best.sort_values(["task", "objective", "checkpoint_id"]).reset_index(drop=True)


best_lr_table = best_params_table
"""The paper's best-LR selection: the best params tuple when only the learning rate is swept."""


def selected_scores(trials: pd.DataFrame, best: pd.DataFrame) -> pd.DataFrame:
    """The per-seed test scores at each cell's selected point (the columns of SCORE_COLUMNS and
    the swept ones: narrow, so that large studies stay quick)."""
    ok = ok_trials(trials)
    keys = ["checkpoint_id", "task", "learning_rate", *axes(ok)]
    return ok[[*SCORE_COLUMNS, *axes(ok)]].merge(best[keys], on=keys)


def axis_scores(trials: pd.DataFrame, axis: str) -> pd.DataFrame:
    """Per (checkpoint, task, value of the swept `axis`): the test score (mean over seeds, 95 %
    interval) at the point with that value that is best on mean validation over the learning
    rate and the other swept fields, with the run columns. Tasks the field does not reach are
    left out."""
    ok = ok_trials(trials)
    ok = ok[ok[axis].notna()] if axis in ok else ok.iloc[0:0]
    if ok.empty:
        return pd.DataFrame()
    per_point = point_table(ok, ["checkpoint_id", "task", "task_category", axis])
    best = (per_point.dropna(subset=["validation_mean"]).sort_values("validation_mean", ascending=False, kind="stable")
                     .drop_duplicates(["checkpoint_id", "task", axis]))
    best = best.merge(run_table(ok), on="checkpoint_id")
    return best.sort_values(["task", "objective", "checkpoint_id", axis]).reset_index(drop=True)


def per_seed_category_scores(trials: pd.DataFrame, best: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (checkpoint, category, seed): the mean over the category's tasks of the selected test
    scores, with the run columns. A seed counts only if it has every task of the category."""
    best = best_params_table(trials) if best is None else best
    if best.empty:
        return pd.DataFrame()
    rows = selected_scores(trials, best).dropna(subset=["test_score"])  # a task without a score is absent
    tasks_all = best.groupby(["checkpoint_id", "task_category"])["task"].nunique().rename("tasks_all")
    seeds = rows.groupby(["checkpoint_id", "task_category", "seed"])
    per_seed = pd.DataFrame({"score": seeds["test_score"].mean(), "tasks": seeds["task"].nunique()}).reset_index()
    per_seed = per_seed.join(tasks_all, on=["checkpoint_id", "task_category"])
    per_seed = per_seed[per_seed["tasks"] == per_seed["tasks_all"]].drop(columns=["tasks", "tasks_all"])
    return per_seed.merge(run_table(best), on="checkpoint_id")


def category_scores(trials: pd.DataFrame, best: pd.DataFrame | None = None,
                    per_seed: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (checkpoint, category): mean over seeds of the seed's mean over the category's tasks,
    with its 95 % interval."""
    per_seed = per_seed_category_scores(trials, best) if per_seed is None else per_seed
    if per_seed.empty:
        return pd.DataFrame()
    table = (per_seed.groupby(["checkpoint_id", "task_category"])
                     .agg(mean=("score", "mean"), std=("score", "std"), seeds=("seed", "nunique"))
                     .reset_index())
    table["ci95"] = half_widths(table["std"], table["seeds"])
    return table.drop(columns="std").merge(run_table(per_seed), on="checkpoint_id")


def ordered_categories(present) -> list[str]:
    """The categories present, in the registered families' order (SC, TC, QA, IR, then plugins'),
    then any other recorded category: a category is never dropped from a table or figure."""
    present = set(present)
    known = [c for c in registry.categories() if c in present]
    return known + sorted(present - set(known))


def wide(categories: pd.DataFrame, value: str = "mean") -> pd.DataFrame:
    """Checkpoints as rows, categories as columns."""
    table = categories.pivot_table(index="checkpoint_id", columns="task_category", values=value, dropna=False)
    return table[ordered_categories(table.columns)]


def in_lr_range(trials: pd.DataFrame, lr_range: tuple[float, float] | None) -> tuple[pd.DataFrame, str]:
    """OK trials of final checkpoints whose learning rate lies in the range (the spec's
    `report.stability_lr_range`), and the range used, said as such: every rate when the range is
    None, or when none of the study's rates falls in it (the CPU studies' rates are above the paper's)."""
    ok = ok_trials(trials)
    ok = ok[is_final(ok)]
    every = f"{ok['learning_rate'].min():g}..{ok['learning_rate'].max():g}" if not ok.empty else "none"
    if lr_range is None:
        return ok, f"all ({every}; report.stability_lr_range not set)"
    in_range = ok[ok["learning_rate"].between(*lr_range)]
    used = f"{lr_range[0]:g}..{lr_range[1]:g}"
    if in_range.empty and not ok.empty:
        in_range, used = ok, f"all ({every}; none in report.stability_lr_range {used})"
    return in_range, used


def per_seed_spread(trials: pd.DataFrame, lr_range: tuple[float, float] | None) -> tuple[pd.DataFrame, str]:
    """Per (checkpoint, category, seed): the mean square of the seed's centred scores over the
    category's tasks and the learning rates in range (`mean_square`, `count` of them), with the
    run columns. The paper's spread squared is (up to ddof) the mean of these over seeds, so the
    seed is the replicated unit its interval and the stability test rest on."""
    in_range, used = in_lr_range(trials, lr_range)
    if in_range.empty:
        return pd.DataFrame(), used
    runs = run_table(in_range)
    in_range = in_range[SCORE_COLUMNS]
    cell = in_range.groupby(["checkpoint_id", "task"], sort=False)["test_score"]
    # A (checkpoint, task) with a single trial has no spread to show (centred it is always 0).
    centred = (in_range["test_score"] - cell.transform("mean")).where(cell.transform("count") > 1)
    seeds = in_range.assign(square=centred ** 2).groupby(["checkpoint_id", "task_category", "seed"])["square"]
    table = pd.DataFrame({"mean_square": seeds.mean(), "count": seeds.count(), "trials": seeds.size()}).reset_index()
    return table.merge(runs, on="checkpoint_id"), used


def lr_sensitivity(trials: pd.DataFrame) -> pd.DataFrame:
    """Per final checkpoint, category and learning rate: the validation score's mean over seeds of
    each seed's mean over the category's tasks (`mean`) and its std over seeds (`std`), with the
    checkpoint's objective; empty below two learning rates."""
    ok = trials[(trials["status"] == "ok")]
    ok = ok[is_final(ok)]
    if ok.empty or ok["learning_rate"].nunique() < 2:
        return pd.DataFrame(columns=["checkpoint_id", "task_category", "learning_rate", "mean", "std", "objective"])
    cell = ["checkpoint_id", "task_category", "learning_rate"]
    per_lr = ok.groupby([*cell, "seed"])["validation_score"].mean().groupby(cell).agg(["mean", "std"]).reset_index()
    return per_lr.merge(run_table(ok)[["checkpoint_id", "objective"]], on="checkpoint_id")


def stability(trials: pd.DataFrame, lr_range: tuple[float, float] | None) -> tuple[pd.DataFrame, str]:
    """Spread of centred scores over seeds x learning rates, per (checkpoint, category), final
    checkpoints only, with a 95 % interval (`spread_low`, `spread_high`). Returns the table and
    the learning-rate range actually used.

    spread = sqrt(sum of squared centred scores / (n - 1)), the standard deviation of the pooled
    centred scores (each cell's are centred, so their mean is 0). The interval is the Student-t
    interval of the log of the mean over seeds of the per-seed mean squares (`per_seed_spread`),
    square-rooted and scaled to the spread: positive, never clipped. With few seeds it is wide:
    that is the information there is. The spread mixes learning-rate sensitivity with seed noise;
    the findings separate them (`grid.Sensitivity`)."""
    seeds, used = per_seed_spread(trials, lr_range)
    if seeds.empty:
        return pd.DataFrame(), used
    seeds = seeds.assign(total=seeds["mean_square"] * seeds["count"],
                         has_spread=seeds["count"] > 0)
    table = (seeds.groupby(["checkpoint_id", "task_category"])
                  .agg(total=("total", "sum"), count=("count", "sum"), runs=("trials", "sum"),
                       mean=("mean_square", "mean"), std=("mean_square", "std"), seeds=("has_spread", "sum"))
                  .reset_index())
    table["spread"] = np.sqrt(table["total"] / (table["count"] - 1)).where(table["count"] > 1)
    # On the log scale (delta method: the log of a mean has SE ~ sd / (mean sqrt(n))), so the
    # interval of a spread is positive and asymmetric, never clipped at 0.
    with np.errstate(divide="ignore", invalid="ignore"):
        log_half = (half_widths(table["std"], table["seeds"]) / table["mean"]).where(table["mean"] > 0)
    table["spread_low"] = table["spread"] * np.exp(-log_half / 2)
    table["spread_high"] = table["spread"] * np.exp(log_half / 2)
    table = table.drop(columns=["total", "count", "mean", "std", "seeds"]).merge(run_table(seeds), on="checkpoint_id")
    return table.sort_values(["objective", "run_name", "task_category"]).reset_index(drop=True), used


def final_only(categories: pd.DataFrame) -> pd.DataFrame:
    """Final checkpoints (`is_final`): every checkpoint from elsewhere is one."""
    return categories[is_final(categories)]


def own_final(categories: pd.DataFrame) -> pd.DataFrame:
    """Final checkpoints of the study's own runs: the tables that arrange runs by a schedule's
    coordinate (CLM share, masking ratio), which a checkpoint from elsewhere does not state."""
    return categories[(categories["checkpoint_step"] == categories["total_steps"]) & ~is_external(categories)]


def data_efficiency(categories: pd.DataFrame) -> pd.DataFrame:
    """Category scores of runs with intermediate checkpoints, by step and tokens (the study's own:
    a checkpoint from elsewhere is one step)."""
    categories = categories[~is_external(categories)]
    counts = categories.groupby("run_name")["checkpoint_step"].nunique()
    curves = categories[categories["run_name"].isin(counts[counts > 1].index)]
    return curves.sort_values(["run_name", "task_category", "checkpoint_step"])


def biphasic(categories: pd.DataFrame) -> pd.DataFrame:
    """Final checkpoints of from-scratch runs that mask tokens, by budget and CLM share."""
    table = own_final(categories)
    table = table[table["init_from"].isna() & table["mask_ratio"].notna()]
    return table.sort_values(["total_steps", "clm_fraction", "task_category"])


def masking_ratios(categories: pd.DataFrame) -> pd.DataFrame:
    """Final checkpoints of pure MLM runs from scratch, by masking ratio."""
    table = own_final(categories)
    table = table[(table["objective"] == "mlm") & table["init_from"].isna()]
    return table.sort_values(["total_steps", "mask_ratio", "task_category"])


def continued_pretraining(categories: pd.DataFrame) -> pd.DataFrame:
    """CPT runs by source and added steps, with each source itself at 0 added steps."""
    final = final_only(categories)
    cpt = final[final["init_from"].notna()].assign(
        source=lambda f: f["init_from"], added_steps=lambda f: f["total_steps"]
    )
    sources = final[final["run_name"].isin(set(cpt["init_from"]))].assign(
        source=lambda f: f["run_name"], added_steps=0)
    return pd.concat([sources, cpt]).sort_values(["source", "added_steps", "task_category"])
