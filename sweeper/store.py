"""The results store: Parquet tables under `<study>/results/<table>/`, the record of the study.

Rows are written by the driver in batches, each batch one file written to a temporary name
and renamed into place, so a reader (or a killed writer) never sees half a file. A trial that
was recorded twice (a driver killed after writing, before learning it had) is read once: the
reader keeps one row per trial key, preferring an `ok` row, then the latest.
"""
from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

TRIALS = "trials"
PRETRAINING = "pretraining"

TRIAL_SCHEMA = pa.schema([
    ("study", pa.string()),
    ("trial_key", pa.string()),
    ("run_name", pa.string()),
    ("run_key", pa.string()),
    ("checkpoint_id", pa.string()),
    ("objective", pa.string()),
    ("clm_fraction", pa.float64()),
    ("mask_ratio", pa.float64()),
    ("checkpoint_step", pa.int64()),
    ("total_steps", pa.int64()),
    ("init_from", pa.string()),
    ("steps_before", pa.int64()),
    ("tokens_seen", pa.int64()),
    ("task", pa.string()),
    ("task_family", pa.string()),
    ("task_category", pa.string()),
    ("metric", pa.string()),
    ("search_mode", pa.string()),
    ("learning_rate", pa.float64()),
    ("seed", pa.int64()),
    ("sample", pa.int64()),
    ("status", pa.string()),
    ("validation_score", pa.float64()),
    ("test_score", pa.float64()),
    ("train_loss", pa.float64()),
    ("train_steps", pa.int64()),
    ("error", pa.string()),
    ("wall_time_s", pa.float64()),
    ("finished_at", pa.timestamp("ms", tz="UTC")),
])

PRETRAINING_SCHEMA = pa.schema([
    ("study", pa.string()),
    ("run_name", pa.string()),
    ("run_key", pa.string()),
    ("objective", pa.string()),
    ("step", pa.int64()),
    ("phase", pa.string()),
    ("loss", pa.float64()),
    ("lr", pa.float64()),
    ("tokens_seen", pa.int64()),
    ("tokens_per_s", pa.float64()),
])

SCHEMAS = {TRIALS: TRIAL_SCHEMA, PRETRAINING: PRETRAINING_SCHEMA}


def table_dir(study_dir: str | Path, table: str) -> Path:
    return Path(study_dir) / "results" / table


def write_rows(study_dir: str | Path, table: str, rows: list[dict]) -> Path | None:
    """Append `rows` as one new Parquet file, atomically. Returns its path (None if no rows)."""
    if not rows:
        return None
    schema = SCHEMAS[table]
    directory = table_dir(study_dir, table)
    directory.mkdir(parents=True, exist_ok=True)
    arrow = pa.Table.from_pylist([{name: row.get(name) for name in schema.names} for row in rows], schema=schema)
    name = f"part-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}.parquet"
    tmp = directory / f".{name}.tmp"
    pq.write_table(arrow, tmp)
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, directory / name)
    return directory / name


def read_table(study_dir: str | Path, table: str) -> pa.Table:
    """All rows of a table (empty, with the schema, when nothing was written yet)."""
    directory = table_dir(study_dir, table)
    files = sorted(str(p) for p in directory.glob("part-*.parquet")) if directory.exists() else []
    if not files:
        return SCHEMAS[table].empty_table()
    return ds.dataset(files, schema=SCHEMAS[table], format="parquet").to_table()


def read_trials(study_dir: str | Path) -> pa.Table:
    """One row per trial key: its `ok` row if any, else its latest row."""
    table = read_table(study_dir, TRIALS)
    if table.num_rows == 0:
        return table
    frame = table.to_pandas()
    frame["_ok"] = frame["status"] == "ok"
    frame = frame.sort_values(["_ok", "finished_at"]).drop_duplicates("trial_key", keep="last")
    frame = frame.drop(columns="_ok").sort_values(["checkpoint_id", "task", "learning_rate", "seed"])
    return pa.Table.from_pandas(frame, schema=TRIAL_SCHEMA, preserve_index=False)


def finished_trial_keys(study_dir: str | Path, include_failed: bool = True) -> set[str]:
    """Keys of trials that are not run again: ok, diverged (a property of the cell, not an
    accident), and failed unless the user asks to retry failures."""
    table = read_table(study_dir, TRIALS)
    statuses = table.column("status").to_pylist()
    final = {"ok", "diverged", "failed"} if include_failed else {"ok", "diverged"}
    return {key for key, status in zip(table.column("trial_key").to_pylist(), statuses) if status in final}
