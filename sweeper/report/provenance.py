"""Where each checkpoint came from, and which checkpoints the findings may compare.

A checkpoint is the study's own (its rows' `source` is `study`, or null in rows written before the
column) or one from elsewhere (`finetuning.checkpoints`: `source` is its hub id, folder or object-store
prefix). Every checkpoint is in every table of the report. The findings compare checkpoints of one
size and one budget, so they read only those whose objective, size and budget are known
(`findings_trials`):

- the study's own runs: size = the preset that starts the run name (`610m`), budget = the run's
  total steps;
- a checkpoint from elsewhere whose meta states its objective, and whose parameters (meta.parameters,
  else its config.json's sizes) and tokens seen (meta.tokens_seen) are known. Its size and budget
  are those two counts to two significant figures (`comparison_keys`): where they are those of a
  final from-scratch run of the study (its `parameters` and its tokens at its last step), it joins
  that run's comparisons under the run's size and budget; otherwise it is compared only with other
  checkpoints from elsewhere of the same figures (`150M-param @ 2T tokens`). It enters only the
  comparisons of objectives on final checkpoints: finding 1 (MLM vs CLM) and finding 3's stability
  part, where a run of the study's own of the same objective stands first. Masking ratios
  (finding 2), data efficiency (finding 3), biphasic splits (finding 4) and continued pretraining
  (finding 5) compare runs that differ only in a ratio, a checkpoint step, a schedule or a starting
  point, which a checkpoint from elsewhere does not state.

The others are left out of the findings (`left_out`, each with its reason); the report names them.
"""
from __future__ import annotations

import pandas as pd

from sweeper.plan.run_names import format_steps
from sweeper.report import analysis

REASONS = (
    ("objective", "objective not stated (meta.objective)"),
    ("parameters", "size unknown (meta.parameters, or sizes in its config.json)"),
    ("tokens_seen", "tokens seen unknown (meta.tokens_seen)"),
)
"""Per run column a checkpoint from elsewhere needs in the findings: why it is left out without it."""


def missing(value) -> bool:
    return value is None or bool(pd.isna(value))


def left_out(trials: pd.DataFrame) -> pd.DataFrame:
    """Checkpoints from elsewhere the findings leave out: one row each (checkpoint_id, source,
    reason: what its meta lacks, as in REASONS, joined by '; '), by name."""
    runs = analysis.run_table(trials[analysis.is_external(trials)])
    rows = [{"checkpoint_id": run["checkpoint_id"], "source": run["source"],
             "reason": "; ".join(reason for column, reason in REASONS if missing(run[column]))}
            for _, run in runs.iterrows()]
    table = pd.DataFrame(rows, columns=["checkpoint_id", "source", "reason"])
    return table[table["reason"] != ""].sort_values("checkpoint_id", kind="stable").reset_index(drop=True)


def findings_trials(trials: pd.DataFrame) -> pd.DataFrame:
    """The rows the findings read: the study's own checkpoints', and those of the checkpoints from
    elsewhere that `left_out` does not name."""
    return trials[~trials["checkpoint_id"].isin(set(left_out(trials)["checkpoint_id"]))]


def count_text(count) -> str | None:
    """A count to two significant figures: 149_000_000 -> '150M', 2e12 -> '2T'; None when unknown."""
    if missing(count):
        return None
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if count >= scale:
            return f"{float(f'{count / scale:.2g}'):g}{unit}"
    return f"{float(f'{count:.2g}'):g}"


def size_of(run_name: str) -> str:
    """A study run's size: the preset its name starts with (`610m-clm-42k` -> `610m`)."""
    return run_name.split("-")[0]


def comparison_keys(runs: pd.DataFrame) -> pd.DataFrame:
    """The findings' checkpoints (one row each, `analysis.run_table` columns) with `external`,
    `size` and `budget` (text: the findings compare checkpoints of one size and budget; module
    docstring), the study's own first."""
    external = analysis.is_external(runs)
    size = runs["run_name"].map(size_of)
    budget = runs["total_steps"].map(lambda steps: None if missing(steps) else format_steps(int(steps)))
    if external.any():
        figures = pd.Series(list(zip(runs["parameters"].map(count_text), runs["tokens_seen"].map(count_text))),
                            index=runs.index)
        own_final = (~external & (runs["checkpoint_step"] == runs["total_steps"]) & runs["init_from"].isna()
                     & runs["parameters"].notna())
        runs_of = {}
        for key, own_size, own_budget in zip(figures[own_final], size[own_final], budget[own_final]):
            runs_of.setdefault(key, (own_size, own_budget))
        for index in runs.index[external]:
            params, tokens = figures[index]
            size[index], budget[index] = runs_of.get((params, tokens), (f"{params}-param", f"{tokens} tokens"))
    return runs.assign(external=external, size=size, budget=budget).sort_values("external", kind="stable")


def origins(trials: pd.DataFrame) -> pd.DataFrame:
    """Per checkpoint from elsewhere: its source and what its rows state (objective, parameters,
    tokens seen, masking ratio), by name."""
    runs = analysis.run_table(trials[analysis.is_external(trials)])
    return runs.sort_values("checkpoint_id", kind="stable").reset_index(drop=True)


def padded(trials: pd.DataFrame) -> pd.DataFrame:
    """Per checkpoint with trials that ran with dynamic padding (`packing` = padded: the packing
    probe refused packed rows for its backbone): how many of its trials did, of how many."""
    if "packing" not in trials:
        return pd.DataFrame(columns=["checkpoint_id", "padded", "trials"])
    counts = (trials.assign(is_padded=trials["packing"] == "padded")
                    .groupby("checkpoint_id", sort=True)["is_padded"].agg(padded="sum", trials="size").reset_index())
    return counts[counts["padded"] > 0].reset_index(drop=True)
