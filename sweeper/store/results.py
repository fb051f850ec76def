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

A part that cannot be read anyway (truncated, empty, not Parquet, rows without a trial key or status: a
disk fault, a power loss on a filesystem that lost it, a hand edit) never stops a read: reading
the table (`read_table`, `read_trials`, `finished_trial_keys`, `compact`) in `sweeper run` moves
it to `<study>/quarantine/<table>/` with a note saying why and when (`quarantined` lists them)
and reads the rest. Its trials are then absent, so `sweeper run` runs them again. The read-only
commands (`sweeper status`, `report`) pass `noted`: they name such a part and leave it in place.
A link in the store (a partition folder or a part that is a link) is never read, and is set
aside as a link, its target untouched (sweeper.store.quarantine).
"""
from __future__ import annotations

import functools
import operator
import os
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from sweeper.store import quarantine, storage
from sweeper.store.layout import StudyLayout
from sweeper.store.quarantine import link_text, quarantined as quarantined, relative  # re-exported: quarantined

from sweeper.store.schemas import (  # re-exported (`X as X`): the tables are named from here
    EVAL_CURVES as EVAL_CURVES, EVAL_CURVE_SCHEMA as EVAL_CURVE_SCHEMA, PARTITION as PARTITION,
    PREDICTIONS as PREDICTIONS, PREDICTION_SCHEMA as PREDICTION_SCHEMA, PRETRAINING as PRETRAINING,
    PRETRAINING_SCHEMA as PRETRAINING_SCHEMA, PROTOCOL_COLUMNS as PROTOCOL_COLUMNS, ROW_KEY as ROW_KEY,
    SCHEMAS as SCHEMAS, SCORE_COLUMNS as SCORE_COLUMNS, TRIAL_SCHEMA as TRIAL_SCHEMA, TRIALS as TRIALS)


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
    if storage.is_remote(directory):  # one whole object, sent again through a store's weather (storage.write_bytes)
        buffer = pa.BufferOutputStream()
        pq.write_table(arrow, buffer)
        storage.write_bytes(storage.join(directory, name), buffer.getvalue().to_pybytes())
        return storage.join(directory, name)
    Path(directory).mkdir(parents=True, exist_ok=True)
    tmp = Path(directory) / f".{name}.tmp"
    with storage.removed_on_error(tmp, Path(directory) / name):  # a full disk leaves no half part behind
        pq.write_table(arrow, tmp)
        storage.sync_path(tmp)
        os.replace(tmp, Path(directory) / name)
    storage.sync_path(directory)  # the rename: a power loss leaves the whole file or none
    return str(Path(directory) / name)


def part_files(partition: str) -> list[str]:
    return [storage.join(partition, name) for name in storage.list_names(partition, folders=False)
            if name.startswith("part-") and name.endswith(".parquet")]


Aside = Callable[[str, str], object]
"""What a reader does with a part it cannot read: `aside(location, why)`."""


def reader_aside(layout: StudyLayout, table: str, noted: dict[str, str] | None) -> Aside:
    """`sweeper run`'s readers (`noted` None) set a damaged part aside; the read-only commands'
    (`noted`: a dict) note it there (location -> why) and leave it in place (sweeper.store.quarantine)."""
    if noted is not None:
        return noted.__setitem__
    return lambda location, why: set_aside(layout, table, location, why)


def read_table(layout: StudyLayout, table: str, noted: dict[str, str] | None = None) -> pa.Table:
    """All rows of a table (empty, with the schema, when nothing was written yet). A part that
    cannot be read, or that lacks a column no row may lack (`REQUIRED`), is set aside (`set_aside`;
    with `noted`, named there and left in place) and the others are read: its rows are absent, so
    its trials run again. A link in the table's folder is never read (`list_parts`)."""
    directory, aside = table_dir(layout, table), reader_aside(layout, table, noted)
    files, vanished = list_parts(layout, table, noted), 0
    while files:
        try:
            arrow = read_parts(directory, table, files)
        except FileNotFoundError:  # a compaction replaced parts since they were listed: list again
            vanished += 1
            if vanished == 3:
                raise
            files = list_parts(layout, table, noted)
            continue
        except DAMAGE:
            # The common case pays nothing: parts are checked one by one only once a read failed.
            kept = set_aside_damaged(files, lambda f: read_parts(directory, table, [f]), aside)
            if len(kept) == len(files):
                raise
            files = kept
            continue
        lacking = parts_lacking(directory, table, files, arrow)
        if not lacking:
            return arrow
        for location, why in lacking.items():
            aside(location, why)
        files = [f for f in files if f not in lacking]
    return SCHEMAS[table].empty_table()


REQUIRED = {TRIALS: ["trial_key", "status"], EVAL_CURVES: ["trial_key", "step"], PRETRAINING: ["run_key", "step"],
            PREDICTIONS: ROW_KEY[PREDICTIONS]}
"""Columns no row of a table may lack: its row key, and a trial's status (a part written without
one, or hand-edited, reads it as null: its rows could be counted nowhere)."""


def parts_lacking(directory: str, table: str, files: list[str], arrow: pa.Table) -> dict[str, str]:
    """The parts with rows that lack a `REQUIRED` column: location -> why. Costs nothing unless
    such a row was read (then the offending parts are found by one more scan)."""
    missing = [c for c in REQUIRED[table] if arrow.column(c).null_count]
    if not missing:
        return {}
    found = dataset(directory, table, files).to_table(
        columns=["__filename"], filter=functools.reduce(operator.or_, (ds.field(c).is_null() for c in missing)))
    by_path = {storage.filesystem(f)[1]: f for f in files}
    return {by_path.get(path, path): f"rows without {' or '.join(missing)} (a part written without the column, or "
                                      "edited): its rows cannot be counted"
            for path in sorted(set(found.column("__filename").to_pylist()))}


def list_parts(layout: StudyLayout, table: str, noted: dict[str, str] | None) -> list[str]:
    """The table's part files. A link where `results/`, the table's folder, a partition folder
    or a part should be (only the study writes there, and it writes no link) is not read: it is
    noted, or set aside as a link, never followed (sweeper.store.quarantine)."""
    directory, files, aside = table_dir(layout, table), [], reader_aside(layout, table, noted)
    if link := quarantine.link_on_the_way(layout, directory):  # results/ or results/<table> is a link
        location = layout.path(*link.split("/"))
        if noted is not None:
            noted[location] = link_text(location)
        else:  # `sweeper run`: the link itself, to the same place under quarantine/
            quarantine.set_aside(layout, location, link_text(location))
        return []
    for partition in partitions(directory, aside):
        for location in part_files(partition):
            if storage.is_remote(location) or not os.path.islink(location):
                files.append(location)
            else:
                aside(location, link_text(location))
    return files


def partitions(directory: str, aside: Aside) -> list[str]:
    """The partition folders of a table folder (`name=value`); links go to `aside`."""
    found = []
    for name in storage.list_names(directory, folders=True):
        location = storage.join(directory, name)
        if not storage.is_remote(location) and os.path.islink(location):
            aside(location, link_text(location))
        elif "=" in name:
            found.append(location)
    return found


def dataset(directory: str, table: str, files: list[str]) -> ds.Dataset:
    schema = SCHEMAS[table]
    partitioning = ds.partitioning(pa.schema([schema.field(PARTITION[table])]), flavor="hive")
    fs, path = storage.filesystem(directory)
    # The files just listed, not the folder: an object store is listed once, not twice.
    return ds.dataset([storage.filesystem(f)[1] for f in files], filesystem=fs, format="parquet",
                      partitioning=partitioning, partition_base_dir=path, schema=schema)


def read_parts(directory: str, table: str, files: list[str]) -> pa.Table:
    return dataset(directory, table, files).to_table()


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


def set_aside_damaged(files: list[str], read: Callable[[str], object], aside: Aside) -> list[str]:
    """Hand the files that `read(file)` cannot read to `aside`; returns the others."""
    kept = []
    for location in files:
        why = why_unreadable(lambda: read(location))
        if why is None:
            kept.append(location)
        else:
            aside(location, why)
    return kept


def set_aside(layout: StudyLayout, table: str, location: str, why: str) -> None:
    """Move a damaged part (or a link where a part or partition should be) to
    `<study>/quarantine/<table>/<partition>/<name>` beside its note (sweeper.store.quarantine: the
    note first, one line saying so; a part that cannot be moved stays, named on stderr, and is left
    out of this read)."""
    inside = relative(layout, location).removeprefix(f"results/{table}/")
    target = storage.join(layout.quarantine, table, *inside.split("/"))
    rerun = " (its trials run again unless another part records them)" if table == TRIALS else ""
    quarantine.set_aside(layout, location, why, target, then=f"; its rows are not used{rerun}")


def compact(layout: StudyLayout, table: str) -> int:
    """Merge each partition's files into one, one row per row key (ok/latest first for trials).
    Safe to interrupt: the merged file is published before the parts are removed, and readers
    deduplicate. A part that cannot be read is set aside, and the others are merged. Returns the
    number of files removed."""
    removed = 0
    aside = reader_aside(layout, table, None)
    if quarantine.link_on_the_way(layout, table_dir(layout, table)):
        return 0  # the table's folder is a link: never written through (`list_parts` sets it aside)
    for partition in partitions(table_dir(layout, table), aside):
        parts = sorted(p for p in part_files(partition) if storage.is_remote(p) or not os.path.islink(p))
        if len(parts) < 2:
            continue
        try:
            tables = [read_part(p) for p in parts]
        except DAMAGE:
            parts = set_aside_damaged(parts, read_part, aside)
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
    elif table == PREDICTIONS:  # a trial's latest attempt (its rows share their trial row's finished_at)
        frame = frame.sort_values("finished_at", kind="stable")
    return frame.drop_duplicates(ROW_KEY[table], keep="last")


def read_trials(layout: StudyLayout, noted: dict[str, str] | None = None) -> pa.Table:
    """One row per trial key: its `ok` row if any, else its latest row (`noted`: `read_table`)."""
    table = read_table(layout, TRIALS, noted)
    if table.num_rows == 0:
        return table
    frame = keep_one_row_per_key(table.to_pandas(), TRIALS)
    frame = frame.sort_values(["checkpoint_id", "task", "learning_rate", "seed"])
    return pa.Table.from_pandas(frame, schema=TRIAL_SCHEMA, preserve_index=False)


def read_predictions(layout: StudyLayout, noted: dict[str, str] | None = None):
    """The `predictions` table as a pandas frame, one row per (trial, split, example): a trial run
    again after its predictions were written but before its row was (a killed driver) wrote them
    twice, and the later attempt's (`finished_at`) is kept, as compaction keeps it (`noted`:
    `read_table`)."""
    frame = read_table(layout, PREDICTIONS, noted).to_pandas()
    return keep_one_row_per_key(frame, PREDICTIONS).reset_index(drop=True)


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
