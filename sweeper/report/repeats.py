"""Points an Optuna search evaluated twice in one cell, flagged in the report.

TPE proposes each sample of a (checkpoint, task) cell; two samples of one cell at the same
learning rate and searched values spend the cell's budget on a point it already had (a resumed
search whose sampler restarted its start-up draws did so: issue 54). The tables count such a
point's seeds by seed id, averaging its rows per seed (`analysis.point_table`), so the numbers
stay right; the line says the search repeated itself, so its sample count overstates what it
explored.
"""
from __future__ import annotations

import pandas as pd

LISTED = 6
"""Repeated points named one by one (then a count)."""
POINT = ["checkpoint_id", "task", "learning_rate", "params"]


def repeated_points(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per (cell, point) that two or more Optuna samples of the cell share: its POINT
    columns and `samples`, the sorted sample numbers."""
    if trials.empty or "sample" not in trials or "search_mode" not in trials:
        return pd.DataFrame(columns=[*POINT, "samples"])
    rows = trials[(trials["search_mode"] == "optuna") & trials["sample"].notna()]
    rows = rows.assign(params=rows["params"].fillna("{}"), sample=rows["sample"].astype(int))
    samples = rows.groupby(POINT, sort=True)["sample"].agg(lambda s: sorted(set(s))).rename("samples").reset_index()
    return samples[samples["samples"].map(len) > 1].reset_index(drop=True)


def repeated_lines(trials: pd.DataFrame) -> list[str]:
    """The report's lines naming each repeated point (none: no lines)."""
    repeats = repeated_points(trials)
    if repeats.empty:
        return []
    named = [f"Repeated point: the Optuna search of {r['checkpoint_id']} / {r['task']} evaluated learning rate "
             f"{r['learning_rate']:g}" + ("" if r["params"] == "{}" else f" with {r['params']}")
             + f" in samples {', '.join(map(str, r['samples']))}; each seed there counts once (its rows averaged)."
             for r in repeats.head(LISTED).to_dict("records")]
    more = [f"... and {len(repeats) - LISTED} more repeated points."] if len(repeats) > LISTED else []
    return [*named, *more, ""]
