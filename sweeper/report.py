"""`sweeper report STUDY_DIR`: the paper's selection rule applied to the store, as markdown.

Per checkpoint and task: the learning rate with the best seed-averaged validation score, and
the test mean over seeds at that learning rate with a 95 % confidence interval (Student t over
seeds). Then category averages (SC, TC, QA, IR) per checkpoint. Works on partial results and
says what is missing.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from sweeper.store import read_trials

# Two-sided 95 % Student t quantiles by degrees of freedom (scipy is not a dependency).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
       10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042}


def t95(dof: int) -> float:
    if dof <= 0:
        return float("nan")
    known = [d for d in T95 if d <= dof]
    return T95[max(known)] if dof <= 30 else 1.96


def ci95_half_width(values: pd.Series) -> float:
    n = values.count()
    return float(t95(n - 1) * values.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")


def best_lr_table(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per (checkpoint, task): best LR on mean validation, test mean/std/CI at that LR."""
    ok = trials[trials["status"] == "ok"]
    if ok.empty:
        return pd.DataFrame()
    keys = ["checkpoint_id", "run_name", "objective", "clm_fraction", "mask_ratio", "checkpoint_step",
            "tokens_seen", "task", "task_category"]
    per_lr = (ok.groupby(keys + ["learning_rate"], dropna=False)
                .agg(validation_mean=("validation_score", "mean"), test_mean=("test_score", "mean"),
                     test_std=("test_score", "std"), seeds=("seed", "nunique"),
                     test_ci95=("test_score", ci95_half_width))
                .reset_index())
    best = per_lr.loc[per_lr.groupby(["checkpoint_id", "task"])["validation_mean"].idxmax()]
    return best.sort_values(["task", "objective", "checkpoint_id"]).reset_index(drop=True)


def category_table(best: pd.DataFrame) -> pd.DataFrame:
    """Mean over tasks of the best-LR test score, per checkpoint and category (columns)."""
    if best.empty:
        return pd.DataFrame()
    table = best.pivot_table(index=["checkpoint_id", "objective"], columns="task_category",
                             values="test_mean", aggfunc="mean")
    return table.reset_index()


def fmt(value: float, digits: int = 2) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def coverage(trials: pd.DataFrame, planned: int | None) -> str:
    counts = trials["status"].value_counts().to_dict() if not trials.empty else {}
    parts = [f"{n} {status}" for status, n in sorted(counts.items())]
    recorded = len(trials)
    line = f"{recorded} trials recorded ({', '.join(parts) or 'none'})"
    if planned is not None and planned > recorded:
        line += f"; {planned - recorded} of {planned} planned trials are missing (study incomplete)"
    return line


PLAN_FILE = "plan.json"


def planned_trial_keys(study_dir: str | Path) -> list[str] | None:
    path = Path(study_dir) / PLAN_FILE
    return json.loads(path.read_text())["trial_keys"] if path.exists() else None


def build_report(study_dir: str | Path) -> str:
    """The report of the study's current plan (rows of superseded cells are left out)."""
    trials = read_trials(study_dir).to_pandas()
    planned = planned_trial_keys(study_dir)
    if planned is not None:
        trials = trials[trials["trial_key"].isin(set(planned))]
    planned_trials = len(planned) if planned is not None else None
    study = trials["study"].iloc[0] if not trials.empty else Path(study_dir).name
    sections = [f"# Study report: {study}", "", coverage(trials, planned_trials), ""]
    best = best_lr_table(trials)
    if best.empty:
        sections.append("No finished trials yet.")
        return "\n".join(sections) + "\n"
    sections += ["## Category averages (best-LR test score, mean over tasks)", ""]
    categories = category_table(best)
    cat_columns = [c for c in ("SC", "TC", "QA", "IR") if c in categories.columns]
    sections.append(markdown_table(
        ["checkpoint", "objective", *cat_columns],
        [[row["checkpoint_id"], row["objective"], *(fmt(row[c]) for c in cat_columns)]
         for _, row in categories.iterrows()],
    ))
    for task, rows in best.groupby("task", sort=True):
        metric = trials.loc[trials["task"] == task, "metric"].iloc[0]
        sections += ["", f"## {task} ({metric}, test mean over seeds at the best validation LR)", ""]
        sections.append(markdown_table(
            ["checkpoint", "objective", "step", "best LR", "val mean", "test mean", "95% CI", "std", "seeds"],
            [[r["checkpoint_id"], r["objective"], str(int(r["checkpoint_step"])), f"{r['learning_rate']:.0e}",
              fmt(r["validation_mean"]), fmt(r["test_mean"]), f"± {fmt(r['test_ci95'])}",
              fmt(r["test_std"]), str(int(r["seeds"]))]
             for _, r in rows.iterrows()],
        ))
    return "\n".join(sections) + "\n"


def write_report(study_dir: str | Path) -> Path:
    text = build_report(study_dir)
    path = Path(study_dir) / "report.md"
    path.write_text(text)
    print(text)
    print(f"[report] written to {path}")
    return path
