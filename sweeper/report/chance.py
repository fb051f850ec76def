"""Tasks whose scores sit at chance: per task its chance level, derived per task family from the
data where the study kept it, and the checkpoints whose best test score is no better.

A score at chance is not a small effect: the model never learned the task (too few steps, too
small a model, a learning rate out of range), and a comparison there compares nothing. The
level per family:

- sequence classification (accuracy): the majority label's share of the test set's gold labels
  (`finetuning.keep_predictions` stores them), else 1 / labels when the task names its labels
  (uniform guessing), else unknown;
- token classification (entity F1) and extractive QA without unanswerable questions (F1): 0, what
  a model that predicts no entity / an empty answer scores;
- extractive QA with unanswerable questions: the share of unanswerable test questions (from the
  kept gold answers), else unknown; retrieval (nDCG@10): unknown (it depends on the pool).
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from sweeper.contract import registry
from sweeper.report.tables import fmt

MARGIN = 1.0
"""Points above chance a best test score must reach to count as learned (the findings' tie margin)."""


@dataclass(frozen=True, slots=True)
class Chance:
    level: float
    """In score points (0-100)."""
    how: str


def gold_labels(predictions: pd.DataFrame, task: str) -> pd.Series:
    """One trial's test-split gold labels of `task` (every trial of a task scores the same set)."""
    if predictions.empty:
        return pd.Series(dtype=object)
    rows = predictions[(predictions["task"] == task) & (predictions["split"] == "test")]
    if rows.empty:
        return pd.Series(dtype=object)
    return rows.loc[rows["trial_key"] == rows["trial_key"].iloc[0], "gold"]


def chance_level(task: str, family: str, gold: pd.Series) -> Chance | None:
    """The task's chance level (None: not known for its family or data; module docstring)."""
    try:
        info = registry.get_task(task)
    except KeyError:
        info = None
    if family == "sequence_classification":
        if len(gold):
            share = gold.value_counts(normalize=True).iloc[0] * 100
            return Chance(share, f"the majority label's share of the {len(gold)} test labels")
        if info is not None and info.label_names:
            return Chance(100 / len(info.label_names), f"uniform guessing over {len(info.label_names)} labels")
        return None
    if family == "token_classification":
        return Chance(0.0, "a tagger that predicts no entity scores 0 F1")
    if family == "extractive_qa":
        if info is not None and not info.with_no_answer:
            return Chance(0.0, "an empty answer scores 0 F1")
        if len(gold):
            share = (gold.fillna("").astype(str).isin(["", "[]"])).mean() * 100
            return Chance(share, "the share of unanswerable test questions (answering none)")
    return None


def at_chance(best: pd.DataFrame, trials: pd.DataFrame, predictions: pd.DataFrame) -> pd.DataFrame:
    """Per (checkpoint, task) whose best test mean is within `MARGIN` of the task's chance level:
    task, family, category, metric, checkpoint, test mean, chance level and how it was derived."""
    rows = []
    kinds = trials.drop_duplicates("task").set_index("task")
    for task, cells in best.groupby("task", sort=True):
        family = kinds.loc[task, "task_family"]
        chance = chance_level(task, family, gold_labels(predictions, task))
        if chance is None:
            continue
        for _, cell in cells[cells["test_mean"] <= chance.level + MARGIN].iterrows():
            rows.append({"task": task, "task_family": family, "task_category": kinds.loc[task, "task_category"],
                         "metric": kinds.loc[task, "metric"], "checkpoint_id": cell["checkpoint_id"],
                         "test_mean": cell["test_mean"], "chance": chance.level, "how": chance.how,
                         "checkpoints": len(cells)})
    return pd.DataFrame(rows, columns=["task", "task_family", "task_category", "metric", "checkpoint_id", "test_mean",
                                       "chance", "how", "checkpoints"])


def flag_lines(flagged: pd.DataFrame) -> list[str]:
    """One line per task at chance: 'never learned' when every checkpoint is there."""
    out = []
    for task, rows in flagged.groupby("task", sort=True):
        first = rows.iloc[0]
        where = ("every checkpoint: never learned" if len(rows) == first["checkpoints"]
                 else ", ".join(rows["checkpoint_id"]))
        out.append(f"{task} ({first['task_category']}, {first['metric']}): at chance for {where} (best test "
                   f"{fmt(rows['test_mean'].max())}; chance {fmt(first['chance'])}: {first['how']})")
    return out


def chance_section(flagged: pd.DataFrame) -> list[str]:
    """`## Tasks at chance` (no lines when none is)."""
    if flagged.empty:
        return []
    return ["## Tasks at chance", "",
            f"Best test score within {MARGIN:g} point of the task's chance level (derived per task family; "
            "sweeper.report.chance): the model did not learn the task there, so its scores compare nothing.", "",
            *(f"- {line}" for line in flag_lines(flagged)), ""]
