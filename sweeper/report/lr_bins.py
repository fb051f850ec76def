"""Learning rates a search sampled (Optuna, random: a value per sample), gathered into log-spaced
bins for the learning-rate table and figure: a column per sampled value would be mostly empty
(each value belongs to one cell) and unreadable. A grid's few rates are left as they are."""
from __future__ import annotations

import numpy as np
import pandas as pd

from sweeper.report import analysis
from sweeper.report.tables import fmt, markdown_table

MAX_RATES = 8
"""Above this many distinct learning rates, `binned` gathers them into `BINS` bins."""
BINS = 5
BINNED_NOTE = (" The search sampled a learning rate per sample, so the rates are gathered into log-spaced bins; per "
               "seed, a bin's samples are averaged first.")


def rate_text(rate: float) -> str:
    """A learning rate short: 3e-4, 1.5e-5."""
    mantissa, exponent = f"{rate:.1e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def binned(trials: pd.DataFrame) -> tuple[pd.DataFrame, dict[float, str]]:
    """`trials` with each learning rate replaced by its bin's geometric centre when there are more
    than `MAX_RATES` (bins of equal width in log rate over the sampled range), and per value the
    column label the tables use ('LR 1e-4–3e-4' for a bin, 'LR 3e-4' for a grid's rate)."""
    rates = trials["learning_rate"].dropna()
    if rates.nunique() <= MAX_RATES:
        return trials, {rate: f"LR {rate:g}" for rate in rates.unique()}
    edges = np.geomspace(rates.min(), rates.max(), BINS + 1)
    index = np.clip(np.searchsorted(edges, trials["learning_rate"].to_numpy(), side="right") - 1, 0, BINS - 1)
    centres = np.sqrt(edges[:-1] * edges[1:])
    labels = {float(centres[i]): f"LR {rate_text(edges[i])}–{rate_text(edges[i + 1])}" for i in range(BINS)}
    out = trials.assign(learning_rate=np.where(trials["learning_rate"].notna(), centres[index], np.nan))
    return out, labels


def lr_section(per_lr: pd.DataFrame, labels: dict[float, str]) -> list[str]:
    """`## Learning-rate sensitivity`: per final checkpoint and category, the validation score at
    each learning rate or bin of rates (`binned`: its column label in `labels`; mean ± std over
    seeds; `analysis.lr_sensitivity`); no lines below two rates."""
    if per_lr.empty:
        return []
    rates = sorted(per_lr["learning_rate"].unique())
    cells = {(r["checkpoint_id"], r["task_category"], r["learning_rate"]): f"{fmt(r['mean'])} ± {fmt(r['std'])}"
             for _, r in per_lr.iterrows()}
    order = {c: i for i, c in enumerate(analysis.ordered_categories(per_lr["task_category"]))}
    keys = per_lr.drop_duplicates(["checkpoint_id", "task_category"]).sort_values(
        ["checkpoint_id", "task_category"], key=lambda column: column.map(order) if column.name == "task_category"
        else column)
    rows = [[r["checkpoint_id"], analysis.objective_text(r["objective"]), r["task_category"],
             *(cells.get((r["checkpoint_id"], r["task_category"], rate), "-") for rate in rates)]
            for _, r in keys.iterrows()]
    return ["## Learning-rate sensitivity", "",
            "Validation score at each fine-tuning learning rate (per seed the mean over the category's tasks; mean ± "
            "std over seeds), final checkpoints." + BINNED_NOTE * any("–" in label for label in labels.values()), "",
            markdown_table(["checkpoint", "objective", "category",
                            *(labels.get(rate, f"LR {rate:g}") for rate in rates)], rows), ""]
