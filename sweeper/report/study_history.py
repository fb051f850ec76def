"""Which recorded trials the report reads, and `## Study history`: the specs the study ran and the
recorded cells the report leaves out, with why.

The store keeps every trial the study ever recorded, whichever spec planned it. The report reads:
- the current spec's trials (the keys of `plan.json`, written by the last `sweeper run`);
- trials an earlier spec planned that the current one does not (a spec that lists fewer tasks,
  seeds or checkpoints, or other learning rates, extends the study; it does not shrink it):
  *kept*, when the settings they depend on (the fine-tuning protocol, their task's definition
  and budget, the search, their checkpoint's run) are the current spec's.

It leaves out, and says so:
- *superseded* trials: the current spec plans the same cell (checkpoint, task, point, seed:
  `changes.trial_cell`) under other settings, so `--recompute-changed` recomputed, or will
  recompute, it;
- trials of a cell the current spec does not plan, recorded under settings that differ from the
  current spec's (a changed protocol the study would otherwise mix with the new one).

Which spec planned a trial comes from the study's spec history (sweeper.store.spec_history);
a trial no kept spec planned was recorded before the study kept its specs, and is kept.

Each recorded row's standing (STANDINGS) is computed here, when the store is read, never written
into it: the Parquet parts stay append-only, and a row's standing follows the last spec that ran
(`sweeper results`, `sweeper.results` and the report read it through `read_record`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from sweeper.plan.changes import cell_id, cell_text, differences, trial_cell
from sweeper.store import spec_history, storage
from sweeper.store.layout import StudyLayout
from sweeper.store.results import read_trials

LISTED = 12
"""Left-out cells listed by name, per reason (then a count of the rest)."""

STANDINGS = {
    "current": "the last spec plans this trial (its key is in plan.json); read by the report",
    "kept": "an earlier spec's trial the last spec does not plan, recorded under the settings the last "
            "spec has; read by the report",
    "unknown": "the study has no readable plan.json, so nothing tells current rows from others; read by "
               "the report",
    "superseded": "the last spec plans the same cell under other settings (`--recompute-changed` recomputed "
                  "or will recompute it); left out of the report",
    "changed": "a cell the last spec does not plan, recorded under settings the last spec changed; left out "
               "of the report",
}
"""A recorded row's standing against the last spec that ran, and what the report does with it."""
READ = ("current", "kept", "unknown")
"""The standings of the rows the report reads."""


@dataclass
class Record:
    trials: pd.DataFrame
    """The recorded trials the report reads."""
    recorded: pd.DataFrame
    """Every recorded trial (one row per trial key), with its `standing` column (a STANDINGS key)."""
    planned: int | None = None
    """Trials the current spec plans (None: no readable plan.json)."""
    missing: int = 0
    """Of those, how many have no row yet."""
    summary: list[str] = field(default_factory=list)
    """Lines under the coverage line: what the report reads besides the current spec's trials."""
    section: list[str] = field(default_factory=list)
    """`## Study history`."""


def row_cell(row: dict) -> tuple:
    sample = row.get("sample")
    params = row.get("params")
    return trial_cell(row["checkpoint_id"], row["task"], row["learning_rate"],
                      params if isinstance(params, str) and params else "{}", row["seed"],
                      None if sample is None or pd.isna(sample) else int(sample))


def setting_changes(row: dict, diffs: list[str], current: dict, runs: dict) -> list[str]:
    """What the current spec sets otherwise for this row than the spec that recorded it did
    (`diffs`: the two specs' resolved settings compared): the parts the row depends on."""
    if runs.get(row["run_name"]) not in (None, row["run_key"]):
        return [f"its pretraining run {row['run_name']} changed"]
    task, checkpoint = row["task"], row["checkpoint_id"]
    prefixes = ["protocol.", "search."]
    prefixes += [f"tasks.{task}.", f"task_protocol.{task}."] if task in current.get("tasks", {}) else []
    prefixes += [f"checkpoints.{checkpoint}."] if checkpoint in current.get("checkpoints", {}) else []
    return [d for d in diffs if d.startswith(tuple(prefixes))]


def cells_text(rows: pd.DataFrame, why: pd.Series | None = None) -> list[str]:
    """One line per (checkpoint, task): how many trials, and why (the first reason)."""
    lines = []
    for (checkpoint, task), group in rows.groupby(["checkpoint_id", "task"], sort=True):
        reason = f": {why.loc[group.index[0]]}" if why is not None else ""
        example = cell_text(row_cell(group.iloc[0].to_dict()))
        lines.append(f"  - {checkpoint} / {task}: {len(group)} trial(s), e.g. {example}{reason}")
    return lines[:LISTED] + ([f"  - ... and {len(lines) - LISTED} more (checkpoint, task) pairs"]
                             if len(lines) > LISTED else [])


def study_record(layout: StudyLayout, trials: pd.DataFrame, damaged: dict[str, str]) -> Record:
    """The trials the report reads, with the lines that say which it leaves out and why."""
    plan = storage.read_json(layout.plan, default={}, damaged=damaged.__setitem__, kind=dict)
    keys = plan.get("trial_keys")
    if plan and not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
        damaged[layout.plan] = "its trial_keys are not a list of trial keys"
        plan, keys = {}, None
    entries = spec_history.entries(layout, damaged=damaged.__setitem__)
    if not isinstance(keys, list):
        return Record(trials, trials.assign(standing="unknown"), section=specs_section(entries, trials, trials))
    planned = set(keys)
    is_current = trials["trial_key"].isin(planned)
    missing = len(planned - set(trials.loc[is_current, "trial_key"]))
    others = trials[~is_current]
    standing = pd.Series("current", index=trials.index)
    if others.empty:
        return Record(trials, trials.assign(standing=standing), len(keys), missing,
                      section=specs_section(entries, trials, trials))
    rows = others.to_dict("records")
    cells = pd.Series([cell_id(row_cell(row)) for row in rows], index=others.index)
    if isinstance(plan.get("trial_cells"), list) and all(isinstance(c, str) for c in plan["trial_cells"]):
        current_cells = set(plan["trial_cells"])
    else:  # a plan.json written before it listed cells: the cells of the current spec's recorded rows
        current_cells = {cell_id(row_cell(row)) for row in trials[is_current].to_dict("records")}
    superseded = cells.isin(current_cells)
    first = {}
    for entry in entries:
        for key in entry.trial_keys:
            first.setdefault(key, entry)
    current = entries[-1].plan.get("resolved") if entries else storage.read_json(
        layout.resolved, default={}, damaged=damaged.__setitem__, kind=dict)
    current, runs = current if isinstance(current, dict) else {}, plan.get("runs")
    runs = runs if isinstance(runs, dict) else {}
    diffs = {e.name: differences(e.plan.get("resolved") if isinstance(e.plan.get("resolved"), dict) else {}, current)
             for e in entries}
    why = pd.Series("", index=others.index)
    for index, row in zip(others.index, rows):
        entry = first.get(row["trial_key"])
        if not superseded[index] and entry is not None:
            changed = setting_changes(row, diffs[entry.name], current, runs)
            why[index] = f"spec {entry.name}: {'; '.join(changed[:3])}" if changed else ""
    other_settings = ~superseded & (why != "")
    kept = others[~superseded & ~other_settings]
    unkept = kept["trial_key"].map(lambda key: key not in first)
    read = pd.concat([trials[is_current], kept])
    standing[kept.index], standing[superseded[superseded].index] = "kept", "superseded"
    standing[other_settings[other_settings].index] = "changed"
    summary = []
    if len(kept):
        summary.append(f"It also reads {len(kept)} trial(s) of earlier specs that the current one does not plan "
                       f"(kept: their settings are the current spec's" + (
                           f"; {int(unkept.sum())} recorded before the study kept its specs, not compared)"
                           if unkept.any() else ")") + ".")
    left = int(superseded.sum() + other_settings.sum())
    if left:
        summary.append(f"It leaves out {left} recorded trial(s): {int(superseded.sum())} superseded, "
                       f"{int(other_settings.sum())} recorded under other settings (see `## Study history`).")
    section = specs_section(entries, trials, read)
    if len(kept):
        section += [f"- **Kept, not in the current spec** ({len(kept)} trials, read by this report):",
                    *cells_text(kept)]
    if superseded.any():
        section += [f"- **Superseded** ({int(superseded.sum())} trials, left out): the current spec plans the same "
                    "cell under new settings (`sweeper run --recompute-changed`); the rows stay in the store.",
                    *cells_text(others[superseded])]
    if other_settings.any():
        section += [f"- **Other settings** ({int(other_settings.sum())} trials, left out): cells the current spec "
                    "does not plan, recorded under settings the current spec changed; a spec that plans them "
                    "again recomputes them (`--recompute-changed`).", *cells_text(others[other_settings], why)]
    return Record(read, trials.assign(standing=standing), len(keys), missing, summary, section + [""])


def read_record(layout: StudyLayout, damaged: dict[str, str], unreadable: dict[str, str]) -> Record:
    """The study's record as the report reads it: one row per trial key from the store (a damaged
    part named in `unreadable` and left in place), each row's standing (`damaged`: markers read as
    absent)."""
    return study_record(layout, read_trials(layout, noted=unreadable).to_pandas(), damaged)


def specs_section(entries: list[spec_history.SpecEntry], trials: pd.DataFrame, read: pd.DataFrame) -> list[str]:
    """`## Study history`'s table: every spec the study ran, with its trials."""
    out = ["## Study history", ""]
    if not entries:
        return out + ["`spec.yaml` is the spec the study last ran with; the study kept no earlier ones (it was run "
                      "before `specs/` was kept).", ""]
    rows = []
    recorded, reading = set(trials["trial_key"]), set(read["trial_key"])
    for entry in entries:
        keys = set(entry.trial_keys)
        rows.append([f"`specs/{entry.name}.yaml`" + (" (= `spec.yaml`)" if entry is entries[-1] else ""),
                     str(entry.plan.get("ran_at", "?")), str(len(keys)), str(len(keys & recorded)),
                     str(len(keys & reading))])
    header = "| spec | first ran | trials planned | recorded | read by this report |"
    return out + ["Every spec the study ran, oldest first (`specs/`; a trial counts under each spec that planned "
                  "it):", "", header, "|---|---|---|---|---|", *("| " + " | ".join(r) + " |" for r in rows), ""]
