"""The results store: Parquet tables under `<study>/results/<table>/`, the record of the study.

Tables are Hive-partitioned (`trials/task=sst2/part-*.parquet`), so pandas, polars and duckdb
read them with no help from the project. Rows are written by the driver in batches: one file per
partition per batch, written under a dot-name (which every Parquet reader skips), fsynced and
renamed into place, so a reader (or a killed writer) never sees half a file. `compact` merges a
partition's batch files into one (after each shard), which keeps 18,000 trials in a few dozen
files. A trial recorded twice (a driver killed between writing and learning it had, or a
compaction killed between its rename and its deletes) is read once: `read_trials` keeps one row
per trial key, preferring an `ok` row, then the latest.

In an object store (`s3://`, `gs://`) a batch file is one upload, which no reader sees half
done, so it is written under its final name (sweeper.storage).
"""
from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from sweeper import storage
from sweeper.layout import StudyLayout

TRIALS = "trials"
EVAL_CURVES = "eval_curves"
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
    ("cpus", pa.float64()),
    ("gpus", pa.float64()),
    ("code_version", pa.string()),
    ("finished_at", pa.timestamp("ms", tz="UTC")),
])

EVAL_CURVE_SCHEMA = pa.schema([
    ("study", pa.string()),
    ("trial_key", pa.string()),
    ("checkpoint_id", pa.string()),
    ("task", pa.string()),
    ("learning_rate", pa.float64()),
    ("seed", pa.int64()),
    ("step", pa.int64()),
    ("train_loss", pa.float64()),
    ("validation_score", pa.float64()),
    ("test_score", pa.float64()),
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

SCHEMAS = {TRIALS: TRIAL_SCHEMA, EVAL_CURVES: EVAL_CURVE_SCHEMA, PRETRAINING: PRETRAINING_SCHEMA}
PARTITION = {TRIALS: "task", EVAL_CURVES: "task", PRETRAINING: "run_name"}
ROW_KEY = {TRIALS: ["trial_key"], EVAL_CURVES: ["trial_key", "step"], PRETRAINING: ["run_key", "step"]}


def table_dir(study_dir: str | Path, table: str) -> str:
    return StudyLayout(str(study_dir)).table(table)


def write_rows(study_dir: str | Path, table: str, rows: list[dict]) -> list[str]:
    """Append `rows` as one new Parquet file per partition, atomically. Returns the files."""
    if not rows:
        return []
    schema, column = SCHEMAS[table], PARTITION[table]
    stamp = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    by_value: dict[str, list[dict]] = {}
    for row in rows:
        by_value.setdefault(str(row[column]), []).append(row)
    return [publish(partition_dir(study_dir, table, value), f"part-{stamp}.parquet",
                    pa.Table.from_pylist([{name: row.get(name) for name in schema.names} for row in group],
                                         schema=schema).drop_columns([column]))
            for value, group in by_value.items()]


def partition_dir(study_dir: str | Path, table: str, value: str) -> str:
    return storage.join(table_dir(study_dir, table), f"{PARTITION[table]}={quote(value, safe='')}")


def publish(directory: str, name: str, arrow: pa.Table) -> str:
    """Local: write under a dot-name (skipped by readers), fsync, rename into place. Object
    store: one upload under the final name."""
    if storage.is_remote(directory):
        fs, path = storage.filesystem(storage.join(directory, name))
        pq.write_table(arrow, path, filesystem=fs)
        return storage.join(directory, name)
    Path(directory).mkdir(parents=True, exist_ok=True)
    tmp = Path(directory) / f".{name}.tmp"
    pq.write_table(arrow, tmp)
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, Path(directory) / name)
    return str(Path(directory) / name)


def part_files(partition: str) -> list[str]:
    return [storage.join(partition, name) for name in storage.list_names(partition, folders=False)
            if name.startswith("part-") and name.endswith(".parquet")]


def read_table(study_dir: str | Path, table: str) -> pa.Table:
    """All rows of a table (empty, with the schema, when nothing was written yet)."""
    directory = table_dir(study_dir, table)
    schema = SCHEMAS[table]
    files = [f for partition in storage.list_names(directory, folders=True) if "=" in partition
             for f in part_files(storage.join(directory, partition))]
    if not files:
        return schema.empty_table()
    column = PARTITION[table]
    partitioning = ds.partitioning(pa.schema([schema.field(column)]), flavor="hive")
    fs, path = storage.filesystem(directory)
    # The files just listed, not the folder: an object store is listed once, not twice.
    return ds.dataset([storage.filesystem(f)[1] for f in files], filesystem=fs, format="parquet",
                      partitioning=partitioning, partition_base_dir=path, schema=schema).to_table()


def compact(study_dir: str | Path, table: str) -> int:
    """Merge each partition's files into one, one row per row key (ok/latest first for trials).
    Safe to interrupt: the merged file is published before the parts are removed, and readers
    deduplicate. Returns the number of files removed."""
    removed = 0
    directory = table_dir(study_dir, table)
    for partition in storage.list_names(directory, folders=True):
        partition = storage.join(directory, partition)
        parts = sorted(part_files(partition))
        if len(parts) < 2:
            continue
        frame = pa.concat_tables(read_part(p) for p in parts).to_pandas()
        frame = keep_one_row_per_key(frame, table)
        schema = SCHEMAS[table].remove(SCHEMAS[table].get_field_index(PARTITION[table]))
        merged = pa.Table.from_pandas(frame[schema.names], schema=schema, preserve_index=False)
        stamp = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
        publish(partition, f"part-{stamp}-compacted.parquet", merged)
        for part in parts:
            storage.remove(part)
            removed += 1
    return removed


def read_part(location: str) -> pa.Table:
    fs, path = storage.filesystem(location)
    return pq.read_table(path, filesystem=fs)


def keep_one_row_per_key(frame, table: str):
    if table == TRIALS:
        frame = frame.assign(_ok=frame["status"] == "ok").sort_values(["_ok", "finished_at"]).drop(columns="_ok")
    return frame.drop_duplicates(ROW_KEY[table], keep="last")


def read_trials(study_dir: str | Path) -> pa.Table:
    """One row per trial key: its `ok` row if any, else its latest row."""
    table = read_table(study_dir, TRIALS)
    if table.num_rows == 0:
        return table
    frame = keep_one_row_per_key(table.to_pandas(), TRIALS)
    frame = frame.sort_values(["checkpoint_id", "task", "learning_rate", "seed"])
    return pa.Table.from_pandas(frame, schema=TRIAL_SCHEMA, preserve_index=False)


def finished_trial_keys(study_dir: str | Path, include_failed: bool = True) -> set[str]:
    """Keys of trials that are not run again: ok, diverged (a property of the cell, not an
    accident), and failed unless the user asks to retry failures."""
    table = read_table(study_dir, TRIALS)
    statuses = table.column("status").to_pylist()
    final = {"ok", "diverged", "failed"} if include_failed else {"ok", "diverged"}
    return {key for key, status in zip(table.column("trial_key").to_pylist(), statuses) if status in final}
