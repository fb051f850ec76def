"""The paper's analyses on a trials table (pandas only; no plotting, no I/O).

- selection: per (checkpoint, task), the learning rate with the best seed-averaged validation
  score; its test scores over seeds give the mean and a 95 % Student-t interval;
- category scores: per seed, the mean over a category's tasks of the selected test scores, then
  mean and interval over seeds (SC, TC, QA, IR);
- stability (paper Fig. 5): scores centred per (checkpoint, task) cell, pooled per category,
  spread = standard deviation over seeds x learning rates in a range (default 1e-5..1e-4);
- data efficiency, biphasic splits, masking ratios, continued pretraining: category scores
  arranged by the coordinate each question varies.
"""
from __future__ import annotations

import math

import pandas as pd

from sweeper import registry
RUN_COLUMNS = ["checkpoint_id", "run_name", "objective", "clm_fraction", "mask_ratio", "checkpoint_step",
               "total_steps", "tokens_seen", "init_from", "steps_before"]

# Two-sided 95 % Student t quantiles by degrees of freedom (scipy is not a dependency).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
       10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042}


def t95(dof: int) -> float:
    if dof <= 0:
        return float("nan")
    if dof > 30:
        return 1.96
    return T95[max(d for d in T95 if d <= dof)]


def ci95_half_width(values: pd.Series) -> float:
    values = values.dropna()
    n = len(values)
    return float(t95(n - 1) * values.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")


def ok_trials(trials: pd.DataFrame) -> pd.DataFrame:
    return trials[trials["status"] == "ok"]


def best_lr_table(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per (checkpoint, task): best LR on mean validation; test mean/std/CI at that LR."""
    ok = ok_trials(trials)
    if ok.empty:
        return pd.DataFrame()
    keys = RUN_COLUMNS + ["task", "task_category"]
    per_lr = (ok.groupby(keys + ["learning_rate"], dropna=False)
                .agg(validation_mean=("validation_score", "mean"), test_mean=("test_score", "mean"),
                     test_std=("test_score", "std"), seeds=("seed", "nunique"),
                     test_ci95=("test_score", ci95_half_width))
                .reset_index())
    best = per_lr.loc[per_lr.groupby(["checkpoint_id", "task"])["validation_mean"].idxmax()]
    return best.sort_values(["task", "objective", "checkpoint_id"]).reset_index(drop=True)


def selected_scores(trials: pd.DataFrame, best: pd.DataFrame) -> pd.DataFrame:
    """The per-seed test scores at each cell's selected learning rate."""
    ok = ok_trials(trials)
    chosen = best[["checkpoint_id", "task", "learning_rate"]]
    return ok.merge(chosen, on=["checkpoint_id", "task", "learning_rate"])


def category_scores(trials: pd.DataFrame, best: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (checkpoint, category): mean over seeds of the seed's mean over the category's tasks,
    with its 95 % interval. A seed counts only if it has every task of the category."""
    best = best_lr_table(trials) if best is None else best
    if best.empty:
        return pd.DataFrame()
    rows = selected_scores(trials, best)
    tasks_per_category = best.groupby(["checkpoint_id", "task_category"])["task"].nunique().rename("tasks")
    per_seed = (rows.groupby(["checkpoint_id", "task_category", "seed"])
                    .agg(score=("test_score", "mean"), tasks=("task", "nunique")).reset_index())
    per_seed = per_seed.merge(tasks_per_category.reset_index(), on=["checkpoint_id", "task_category"],
                              suffixes=("", "_all"))
    per_seed = per_seed[per_seed["tasks"] == per_seed["tasks_all"]]
    table = (per_seed.groupby(["checkpoint_id", "task_category"])
                     .agg(mean=("score", "mean"), ci95=("score", ci95_half_width), seeds=("seed", "nunique"))
                     .reset_index())
    runs = best[RUN_COLUMNS].drop_duplicates("checkpoint_id")
    return table.merge(runs, on="checkpoint_id")


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


def stability(trials: pd.DataFrame, lr_range: tuple[float, float] = (1e-5, 1e-4)) -> tuple[pd.DataFrame, str]:
    """Spread of centred scores over seeds x learning rates, per (checkpoint, category), final
    checkpoints only. Returns the table and the learning-rate range actually used (all rates when
    none of the study's falls in the requested range)."""
    ok = ok_trials(trials)
    ok = ok[ok["checkpoint_step"] == ok["total_steps"]]
    in_range = ok[ok["learning_rate"].between(*lr_range)]
    used = f"{lr_range[0]:g}..{lr_range[1]:g}"
    if in_range.empty:
        in_range, used = ok, f"all ({ok['learning_rate'].min():g}..{ok['learning_rate'].max():g}; none in {used})"
    if in_range.empty:
        return pd.DataFrame(), used
    cell = in_range.groupby(["checkpoint_id", "task"])["test_score"]
    # A (checkpoint, task) with a single trial has no spread to show (centred it is always 0).
    centred = in_range.assign(centred=(in_range["test_score"] - cell.transform("mean"))
                              .where(cell.transform("size") > 1))
    table = (centred.groupby(["checkpoint_id", "run_name", "objective", "init_from", "task_category"], dropna=False)
                    .agg(spread=("centred", "std"), runs=("centred", "size")).reset_index())
    return table, used


def final_only(categories: pd.DataFrame) -> pd.DataFrame:
    return categories[categories["checkpoint_step"] == categories["total_steps"]]


def data_efficiency(categories: pd.DataFrame) -> pd.DataFrame:
    """Category scores of runs with intermediate checkpoints, by step and tokens."""
    counts = categories.groupby("run_name")["checkpoint_step"].nunique()
    curves = categories[categories["run_name"].isin(counts[counts > 1].index)]
    return curves.sort_values(["run_name", "task_category", "checkpoint_step"])


def biphasic(categories: pd.DataFrame) -> pd.DataFrame:
    """Final checkpoints of from-scratch runs that mask tokens, by budget and CLM share."""
    table = final_only(categories)
    table = table[table["init_from"].isna() & table["mask_ratio"].notna()]
    return table.sort_values(["total_steps", "clm_fraction", "task_category"])


def masking_ratios(categories: pd.DataFrame) -> pd.DataFrame:
    """Final checkpoints of pure MLM runs from scratch, by masking ratio."""
    table = final_only(categories)
    table = table[(table["objective"] == "mlm") & table["init_from"].isna()]
    return table.sort_values(["total_steps", "mask_ratio", "task_category"])


def continued_pretraining(categories: pd.DataFrame) -> pd.DataFrame:
    """CPT runs by source and added steps, with each source itself at 0 added steps."""
    final = final_only(categories)
    cpt = final[final["init_from"].notna()].assign(source=lambda f: f["init_from"], added_steps=lambda f: f["total_steps"])
    sources = final[final["run_name"].isin(set(cpt["init_from"]))].assign(
        source=lambda f: f["run_name"], added_steps=0)
    return pd.concat([sources, cpt]).sort_values(["source", "added_steps", "task_category"])
