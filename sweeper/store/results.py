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
done, so it is written under its final name (sweeper.store.storage).

A part that cannot be read anyway (truncated, empty, not Parquet: a disk fault, a power loss on
a filesystem that lost it, a hand edit) never stops a read: reading the table (`read_table`,
`read_trials`, `finished_trial_keys`, `compact`) moves it to `<study>/quarantine/<table>/` with a
note saying why and when (`quarantined` lists them; `sweeper status` and `report` name them) and
reads the rest. Its trials are then absent, so `sweeper run` runs them again.
"""
from __future__ import annotations

import os
import re
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from sweeper.store import storage
from sweeper.store.layout import StudyLayout

TRIALS = "trials"
EVAL_CURVES = "eval_curves"
PRETRAINING = "pretraining"

PROTOCOL_COLUMNS = [
    ("batch_size", pa.int64()),
    ("max_steps", pa.int64()),
    ("epochs", pa.float64()),
    ("max_length", pa.int64()),
    ("doc_stride", pa.int64()),
    ("retrieval_temperature", pa.float64()),
    ("warmup_ratio", pa.float64()),
    ("betas", pa.list_(pa.float64())),
    ("eps", pa.float64()),
    ("weight_decay", pa.float64()),
    ("grad_clip", pa.float64()),
    ("params", pa.string()),
]
"""The fine-tuning settings a trial ran with, one column per field a spec can sweep
(`FinetuningSpec.SEARCH_FIELDS`, named as there; null where the field does not reach the task's
protocol, e.g. doc_stride outside QA), and `params`: the swept ones of its point as JSON ('{}':
only the learning rate is swept). Parts written before these columns read them as null."""

TRIAL_SCHEMA = pa.schema([
    ("study", pa.string()),
    ("trial_key", pa.string()),
    ("run_name", pa.string()),
    ("run_key", pa.string()),
    ("checkpoint_id", pa.string()),
    ("replicate", pa.int64()),
    ("arm", pa.string()),
    ("objective", pa.string()),
    ("clm_fraction", pa.float64()),
    ("mask_ratio", pa.float64()),
    ("checkpoint_step", pa.int64()),
    ("total_steps", pa.int64()),
    ("init_from", pa.string()),
    ("steps_before", pa.int64()),
    ("tokens_seen", pa.int64()),
    ("source", pa.string()),
    ("parameters", pa.int64()),
    ("task", pa.string()),
    ("task_family", pa.string()),
    ("task_category", pa.string()),
    ("metric", pa.string()),
    ("search_mode", pa.string()),
    ("learning_rate", pa.float64()),
    ("seed", pa.int64()),
    ("sample", pa.int64()),
    *PROTOCOL_COLUMNS,
    ("status", pa.string()),
    ("validation_score", pa.float64()),
    ("test_score", pa.float64()),
    ("train_loss", pa.float64()),
    ("train_steps", pa.int64()),
    ("error", pa.string()),
    ("wall_time_s", pa.float64()),
    ("packing", pa.string()),
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
    *PROTOCOL_COLUMNS,
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
    ("replicate", pa.int64()),
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


def table_dir(layout: StudyLayout, table: str) -> str:
    return layout.table(table)


def write_rows(layout: StudyLayout, table: str, rows: list[dict]) -> list[str]:
    """Append `rows` as one new Parquet file per partition, atomically. Returns the files."""
    if not rows:
        return []
    schema, column = SCHEMAS[table], PARTITION[table]
    stamp = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    by_value: dict[str, list[dict]] = {}
    for row in rows:
        by_value.setdefault(str(row[column]), []).append(row)
    return [publish(partition_dir(layout, table, value), f"part-{stamp}.parquet",
                    pa.Table.from_pylist([{name: row.get(name) for name in schema.names} for row in group],
                                         schema=schema).drop_columns([column]))
            for value, group in by_value.items()]


def partition_dir(layout: StudyLayout, table: str, value: str) -> str:
    return storage.join(table_dir(layout, table), f"{PARTITION[table]}={quote(value, safe='')}")


def publish(directory: str, name: str, arrow: pa.Table) -> str:
    """Local: write under a dot-name (skipped by readers), fsync, rename into place, fsync the
    folder. Object store: one upload under the final name."""
    if storage.is_remote(directory):
        fs, path = storage.filesystem(storage.join(directory, name))
        pq.write_table(arrow, path, filesystem=fs)
        return storage.join(directory, name)
    Path(directory).mkdir(parents=True, exist_ok=True)
    tmp = Path(directory) / f".{name}.tmp"
    pq.write_table(arrow, tmp)
    storage.sync_path(tmp)
    os.replace(tmp, Path(directory) / name)
    storage.sync_path(directory)  # the rename: a power loss leaves the whole file or none
    return str(Path(directory) / name)


def part_files(partition: str) -> list[str]:
    return [storage.join(partition, name) for name in storage.list_names(partition, folders=False)
            if name.startswith("part-") and name.endswith(".parquet")]


def read_table(layout: StudyLayout, table: str) -> pa.Table:
    """All rows of a table (empty, with the schema, when nothing was written yet). A part that
    cannot be read is set aside (`set_aside`) and the others are read: its rows are absent, so
    its trials run again."""
    directory = table_dir(layout, table)
    files, vanished = list_parts(directory), 0
    while files:
        try:
            return read_parts(directory, table, files)
        except FileNotFoundError:  # a compaction replaced parts since they were listed: list again
            vanished += 1
            if vanished == 3:
                raise
            files = list_parts(directory)
        except DAMAGE:
            # The common case pays nothing: parts are checked one by one only once a read failed.
            kept = set_aside_damaged(layout, table, files, lambda f: read_parts(directory, table, [f]))
            if len(kept) == len(files):
                raise
            files = kept
    return SCHEMAS[table].empty_table()


def list_parts(directory: str) -> list[str]:
    return [f for partition in storage.list_names(directory, folders=True) if "=" in partition
            for f in part_files(storage.join(directory, partition))]


def read_parts(directory: str, table: str, files: list[str]) -> pa.Table:
    schema = SCHEMAS[table]
    partitioning = ds.partitioning(pa.schema([schema.field(PARTITION[table])]), flavor="hive")
    fs, path = storage.filesystem(directory)
    # The files just listed, not the folder: an object store is listed once, not twice.
    return ds.dataset([storage.filesystem(f)[1] for f in files], filesystem=fs, format="parquet",
                      partitioning=partitioning, partition_base_dir=path, schema=schema).to_table()


DAMAGE = (pa.ArrowException, OSError)
"""What reading a damaged part raises: ArrowInvalid (truncated, empty, not Parquet: no footer),
OSError (a footer but corrupt pages), ArrowTypeError (columns of another type)."""


def why_unreadable(read: Callable[[], object]) -> str | None:
    """Why `read()` fails, or None when it works or its file is gone (compacted away since it
    was listed). A failure other than ArrowInvalid is tried twice: an object store's read can
    fail in transit, and a healthy part must not be set aside for that."""
    why = None
    for _ in range(2):
        try:
            read()
            return None
        except FileNotFoundError:
            return None
        except DAMAGE as error:
            text = re.sub(r"^Could not open Parquet input source '[^']*': ", "", " ".join(str(error).split()))
            why = f"{type(error).__name__}: {text}"  # the file is named beside it
            if isinstance(error, pa.ArrowInvalid):
                break
    return why


def set_aside_damaged(layout: StudyLayout, table: str, files: list[str],
                      read: Callable[[str], object]) -> list[str]:
    """Quarantine the files that `read(file)` cannot read; returns the others."""
    kept = []
    for location in files:
        why = why_unreadable(lambda: read(location))
        if why is None:
            kept.append(location)
        else:
            set_aside(layout, table, location, why)
    return kept


NOTE_SUFFIX = ".why.txt"
"""A quarantined part's note: `<part>.why.txt` beside it."""


def set_aside(layout: StudyLayout, table: str, location: str, why: str) -> None:
    """Move a damaged part to `<study>/quarantine/<table>/<partition>/<name>`, beside its note
    `<name>.why.txt` (the part's place in the store, when, why). The note is written first: a
    process killed between the two leaves the part in the store with a note, and the next read
    moves it. A part that cannot be moved (a read-only study) stays, and is named on stderr."""
    relative = f"{storage.name(storage.parent(location))}/{storage.name(location)}"
    target = storage.join(layout.quarantine, table, relative)
    at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    note = storage.join(storage.parent(target), storage.name(target) + NOTE_SUFFIX)
    try:
        storage.write_text(note, f"file: results/{table}/{relative}\nquarantined_at: {at}\nreason: {why}\n")
        fs, source_path = storage.filesystem(location)
        fs.move(source_path, storage.filesystem(target)[1])  # a rename; copy + delete in an object store
        if not storage.is_remote(target):
            storage.sync_path(storage.parent(target))
            storage.sync_path(storage.parent(location))
    except OSError as error:
        if not storage.exists(location):
            return  # set aside meanwhile by another reader
        try:
            storage.remove(note)
        except OSError:
            pass
        print(f"[store] damaged file {storage.display(location)} ({why}) could not be set aside: {error}; "
              "its rows are left out of this read", file=sys.stderr, flush=True)
        return
    print(f"[store] damaged file set aside: {storage.display(location)} -> {storage.display(target)} ({why}); "
          "its rows are absent from the store until its trials run again", file=sys.stderr, flush=True)


def quarantined(layout: StudyLayout) -> list[dict]:
    """The parts set aside so far, from their notes: `file` (its place in the store),
    `quarantined_at`, `reason`, and `note` (the note's location); oldest first."""
    notes = []
    for location in storage.find_files(layout.quarantine, f"*/*/*{NOTE_SUFFIX}"):
        fields = dict(line.split(": ", 1) for line in storage.read_text(location).splitlines() if ": " in line)
        notes.append({"file": fields.get("file", location), "quarantined_at": fields.get("quarantined_at", ""),
                      "reason": fields.get("reason", ""), "note": location})
    return sorted(notes, key=lambda n: (n["quarantined_at"], n["file"]))


def compact(layout: StudyLayout, table: str) -> int:
    """Merge each partition's files into one, one row per row key (ok/latest first for trials).
    Safe to interrupt: the merged file is published before the parts are removed, and readers
    deduplicate. A part that cannot be read is set aside, and the others are merged. Returns the
    number of files removed."""
    removed = 0
    directory = table_dir(layout, table)
    for partition in storage.list_names(directory, folders=True):
        partition = storage.join(directory, partition)
        parts = sorted(part_files(partition))
        if len(parts) < 2:
            continue
        try:
            tables = [read_part(p) for p in parts]
        except DAMAGE:
            parts = set_aside_damaged(layout, table, parts, read_part)
            if len(parts) < 2:
                continue
            tables = [read_part(p) for p in parts]
        # Parts written before a column was added lack it: it is null in their rows.
        frame = pa.concat_tables(tables, promote_options="permissive").to_pandas()
        frame = keep_one_row_per_key(frame, table)
        schema = SCHEMAS[table].remove(SCHEMAS[table].get_field_index(PARTITION[table]))
        merged = pa.Table.from_pandas(frame.reindex(columns=schema.names), schema=schema, preserve_index=False)
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


def read_trials(layout: StudyLayout) -> pa.Table:
    """One row per trial key: its `ok` row if any, else its latest row."""
    table = read_table(layout, TRIALS)
    if table.num_rows == 0:
        return table
    frame = keep_one_row_per_key(table.to_pandas(), TRIALS)
    frame = frame.sort_values(["checkpoint_id", "task", "learning_rate", "seed"])
    return pa.Table.from_pandas(frame, schema=TRIAL_SCHEMA, preserve_index=False)


FINISHED = frozenset({"ok", "diverged", "stopped"})
"""Trial statuses that are never run again, `--retry-failed` or not (docs/results.md lists
every status)."""


def finished_trial_keys(layout: StudyLayout, include_failed: bool = True) -> set[str]:
    """Keys of trials that are not run again: ok, diverged (a property of the cell, not an
    accident), stopped (a trial scheduler's decision, which the search has acted on), and failed
    unless the user asks to retry failures."""
    table = read_table(layout, TRIALS)
    statuses = table.column("status").to_pylist()
    final = FINISHED | {"failed"} if include_failed else FINISHED
    return {key for key, status in zip(table.column("trial_key").to_pylist(), statuses) if status in final}
