"""The report's figures (matplotlib, PNG). Each function returns the file it wrote, or None when
the study has nothing to show for it (the report then says why)."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display on clusters and CI
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from sweeper.report import analysis  # noqa: E402
from sweeper.report.analysis import ordered_categories  # noqa: E402
from sweeper.spec import registry  # noqa: E402

OBJECTIVE_COLOURS = {"mlm": "tab:blue", "clm": "tab:orange", "clm-mlm": "tab:green"}
UNREGISTERED_RANGE = (-100.0, 100.0)
"""Score range of a category no registered family reports (a plugin's study reported without its
SWEEPER_PLUGINS): wide enough for any metric x 100, so no interval is clipped wrongly."""

ScoreRanges = Mapping[str, tuple[float, float]]
"""Report category -> (lowest, highest) score."""


def score_ranges(trials: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """Per report category, the range its scores can take: the `FamilyInfo.score_range` of the
    families the trial rows name for it (`task_family`, `task_category`; the union when several
    share a category). A row without a registered family (written before the column, or by a
    plugin not loaded here) falls back to the registered families of its category."""
    families = trials["task_family"] if "task_family" in trials else pd.Series(None, index=trials.index, dtype=object)
    by_category: dict[str, list[tuple[float, float]]] = {}
    for info in registry.current().families.values():
        by_category.setdefault(info.category, []).append(info.score_range)
    ranges: dict[str, tuple[float, float]] = {}
    pairs = pd.DataFrame({"family": families, "category": trials["task_category"]}).drop_duplicates()
    for family, category in pairs.itertuples(index=False):
        info = registry.current().families.get(family) if isinstance(family, str) else None
        found = [info.score_range] if info is not None else by_category.get(category, [UNREGISTERED_RANGE])
        lows, highs = zip(*found, ranges.get(category, found[0]))
        ranges[category] = (min(lows), max(highs))
    return ranges


def range_of(category: str, ranges: ScoreRanges) -> tuple[float, float]:
    return ranges.get(category, UNREGISTERED_RANGE)


def clipped_interval(mean: pd.Series, half: pd.Series, score_range: tuple[float, float]) -> tuple[pd.Series, pd.Series]:
    """Lower and upper ends of mean ± half, clipped to the category's score range: an interval
    from few seeds can reach past the scale (down to -60 on an F1), which no score can."""
    low, high = score_range
    half = half.fillna(0)
    return (mean - half).clip(lower=low), (mean + half).clip(upper=high)


def present(frame: pd.DataFrame) -> list[str]:
    return ordered_categories(frame["task_category"])


def save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def category_bars(final: pd.DataFrame, ranges: ScoreRanges, path: Path) -> Path | None:
    """Best-LR test score per final checkpoint and category, with 95 % intervals clipped to the
    category's score range (`score_ranges`)."""
    if final.empty:
        return None
    categories = present(final)
    checkpoints = list(final.sort_values(["objective", "checkpoint_id"])["checkpoint_id"].unique())
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(checkpoints) * len(categories) / 2), 4))
    width = 0.8 / len(checkpoints)
    for i, checkpoint in enumerate(checkpoints):
        rows = final[final["checkpoint_id"] == checkpoint].set_index("task_category").reindex(categories)
        objective = final.loc[final["checkpoint_id"] == checkpoint, "objective"].iloc[0]
        mean, half = rows["mean"].to_numpy(), rows["ci95"].fillna(0).to_numpy()
        low, high = np.array([range_of(c, ranges) for c in categories]).T
        errors = np.nan_to_num(np.vstack([np.minimum(half, mean - low), np.minimum(half, high - mean)]))
        ax.bar([c + i * width for c in range(len(categories))], rows["mean"], width,
               yerr=errors, capsize=3, label=checkpoint, alpha=0.85,
               edgecolor=OBJECTIVE_COLOURS.get(objective, "grey"), linewidth=1.5)
    ax.set_xticks([c + 0.4 - width / 2 for c in range(len(categories))], categories)
    ax.set_ylabel("test score at best LR (mean over seeds, 95 % CI)")
    ax.set_title("Category scores per checkpoint")
    ax.legend(fontsize=7, ncol=2)
    return save(fig, path)


def stability_bars(table: pd.DataFrame, lr_range: str, path: Path) -> Path | None:
    """Paper Fig. 5: spread of centred scores over seeds x learning rates, per run, with its 95 %
    interval over seeds (`analysis.stability`; never below 0)."""
    if table.empty:
        return None
    categories = present(table)
    runs = list(table.sort_values(["objective", "run_name"])["run_name"].unique())
    fig, ax = plt.subplots(figsize=(max(6, len(runs) * len(categories) * 0.6), 4))
    width = 0.8 / len(runs)
    for i, run in enumerate(runs):
        rows = table[table["run_name"] == run].set_index("task_category").reindex(categories)
        objective = table.loc[table["run_name"] == run, "objective"].iloc[0]
        errors = np.nan_to_num(np.vstack([rows["spread"] - rows["spread_low"], rows["spread_high"] - rows["spread"]]))
        ax.bar([c + i * width for c in range(len(categories))], rows["spread"], width, label=run,
               yerr=errors.clip(min=0), capsize=3,
               color=OBJECTIVE_COLOURS.get(objective, "grey"), alpha=0.4 + 0.6 * (i + 1) / len(runs))
    ax.set_xticks([c + 0.4 - width / 2 for c in range(len(categories))], categories)
    ax.set_ylabel("std of centred test score (points, 95 % CI)")
    ax.set_xlabel(f"spread over seeds x learning rates {lr_range}", fontsize=8)
    ax.set_title("Fine-tuning stability (smaller = more stable)")
    ax.legend(fontsize=7)
    return save(fig, path)


def lines_by_category(frame: pd.DataFrame, x: str, group: str, xlabel: str, title: str, path: Path,
                      ranges: ScoreRanges, log_x: bool = False) -> Path | None:
    """One panel per category, one line per `group` value, with 95 % bands clipped to the
    category's score range."""
    if frame.empty or frame[group].nunique() == 0:
        return None
    categories = present(frame)
    fig, axes = plt.subplots(1, len(categories), figsize=(4.2 * len(categories), 3.6), squeeze=False)
    for ax, category in zip(axes[0], categories):
        for name, rows in frame[frame["task_category"] == category].groupby(group):
            rows = rows.sort_values(x)
            line = ax.plot(rows[x], rows["mean"], marker="o", label=str(name))[0]
            low, high = clipped_interval(rows["mean"], rows["ci95"], range_of(category, ranges))
            ax.fill_between(rows[x], low, high, color=line.get_color(), alpha=0.15)
        ax.set_title(category)
        ax.set_xlabel(xlabel)
        if log_x:
            ax.set_xscale("log")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test score at best LR")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(title)
    return save(fig, path)


def lr_sensitivity(trials: pd.DataFrame, path: Path) -> Path | None:
    """Validation score (mean over seeds) against the learning rate, per final checkpoint and category."""
    per_lr = analysis.lr_sensitivity(trials)
    if per_lr.empty:
        return None
    final = trials[trials["checkpoint_id"].isin(set(per_lr["checkpoint_id"]))]
    return lines_by_category(per_lr.rename(columns={"std": "ci95"}), "learning_rate", "checkpoint_id",
                             "fine-tuning learning rate", "Validation score vs learning rate (band: std over seeds)",
                             path, score_ranges(final), log_x=True)


def axis_lines(table: pd.DataFrame, axis: str, name: str, ranges: ScoreRanges, path: Path) -> Path | None:
    """Test score against a swept field's value (`analysis.axis_scores`): one panel per task, one
    line per checkpoint, 95 % bands clipped to the task's score range. Values that are not single
    numbers (betas) sit at even places along the axis, labelled."""
    if table.empty:
        return None
    tasks = sorted(table["task"].unique())
    values = sorted(table[axis].unique())
    numeric = all(isinstance(v, (int, float, np.integer, np.floating)) for v in values)
    place = {v: (float(v) if numeric else i) for i, v in enumerate(values)}
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        rows = table[table["task"] == task]
        category = rows["task_category"].iloc[0]
        for checkpoint, line_rows in rows.groupby("checkpoint_id"):
            line_rows = line_rows.assign(x=line_rows[axis].map(place)).sort_values("x")
            line = ax.plot(line_rows["x"], line_rows["test_mean"], marker="o", label=str(checkpoint))[0]
            low, high = clipped_interval(line_rows["test_mean"], line_rows["test_ci95"], range_of(category, ranges))
            ax.fill_between(line_rows["x"], low, high, color=line.get_color(), alpha=0.15)
        if not numeric:
            ax.set_xticks(list(place.values()), [str(list(v)) if isinstance(v, tuple) else str(v) for v in values],
                          fontsize=7)
        ax.set_title(task)
        ax.set_xlabel(f"finetuning.{name}")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test score (mean over seeds, 95 % CI)")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(f"Score vs {name} (each value at its best learning rate and other swept values)")
    return save(fig, path)
