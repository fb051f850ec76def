"""Results store: Hive-partitioned batches as atomic Parquet files, compaction, one row per trial on read."""
from datetime import datetime, timedelta, UTC
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sweeper.store.layout import StudyLayout
from sweeper.store.results import (
    PREDICTIONS, PRETRAINING, SCORE_COLUMNS, TRIAL_SCHEMA, TRIALS, compact, finished_trial_keys, read_predictions,
    read_table, read_trials, table_dir, write_rows,
)


@pytest.fixture
def study(tmp_path) -> StudyLayout:
    return StudyLayout(str(tmp_path))


def row(key, status="ok", score=50.0, minutes=0, task="t"):
    return {"study": "s", "trial_key": key, "checkpoint_id": "c", "task": task, "learning_rate": 1e-3, "seed": 0,
            "status": status, "test_score": score,
            "finished_at": datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=minutes)}


def test_batches_round_trip_by_partition_and_leave_no_temporary_files(study):
    write_rows(study, TRIALS, [row("a"), row("b", task="sst2")])
    write_rows(study, TRIALS, [row("c", status="failed")])
    files = sorted(Path(table_dir(study, TRIALS)).rglob("*"))
    parts = [f for f in files if f.is_file()]
    assert all(f.name.startswith("part-") and f.suffix == ".parquet" for f in parts)
    assert sorted(p.parent.name for p in parts) == ["task=sst2", "task=t", "task=t"]
    assert sum(pq.read_metadata(f).num_rows for f in parts) == 3
    table = read_table(study, TRIALS)
    assert table.num_rows == 3 and sorted(table.column("task").to_pylist()) == ["sst2", "t", "t"]
    assert finished_trial_keys(study) == {"a", "b", "c"}
    assert finished_trial_keys(study, include_failed=False) == {"a", "b"}


def test_a_trial_recorded_twice_is_read_once_preferring_ok(study):
    write_rows(study, TRIALS, [row("a", status="failed", minutes=0), row("b", score=1.0, minutes=0)])
    write_rows(study, TRIALS, [row("a", score=70.0, minutes=5), row("b", score=2.0, minutes=5)])
    write_rows(study, TRIALS, [row("a", status="failed", minutes=9)])
    table = read_trials(study).to_pandas().set_index("trial_key")
    assert len(table) == 2
    assert table.loc["a", "status"] == "ok" and table.loc["a", "test_score"] == 70.0
    assert table.loc["b", "test_score"] == 2.0


def test_compaction_merges_batches_into_one_file_per_partition(study):
    for batch in range(5):
        write_rows(study, TRIALS, [row(f"k{batch}-{i}", task=f"task{i % 2}") for i in range(4)])
    write_rows(study, TRIALS, [row("k0-0", status="failed", minutes=3, task="task0")])  # a duplicate
    before = read_trials(study).to_pandas()
    assert compact(study, TRIALS) == 11
    files = list(Path(table_dir(study, TRIALS)).rglob("part-*.parquet"))
    assert len(files) == 2
    after = read_table(study, TRIALS).to_pandas()
    assert len(after) == 20 and after["trial_key"].is_unique
    assert after.set_index("trial_key").loc["k0-0", "status"] == "ok"
    assert sorted(before["trial_key"]) == sorted(after["trial_key"])
    assert compact(study, TRIALS) == 0


def prediction(key, split, example, value, task="t", minutes=0):
    return {"task": task, "trial_key": key, "split": split, "example": example, "prediction": f"[{value}]",
            "gold": "[1]", "finished_at": datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=minutes)}


def test_predictions_written_again_by_a_retried_trial_read_and_compact_to_one_row_per_example(study):
    first = [prediction("a", split, i, 0) for split in ("validation", "test") for i in range(3)]
    write_rows(study, PREDICTIONS, first + [prediction("b", "test", 0, 5, task="u")])
    retried = [prediction(p["trial_key"], p["split"], p["example"], 9, minutes=5) for p in first]
    write_rows(study, PREDICTIONS, retried)  # the trial ran again (a later attempt)
    write_rows(study, PREDICTIONS, first[:1])  # an earlier attempt's part listed last: still not kept
    assert read_table(study, PREDICTIONS).num_rows == 14
    frame = read_predictions(study)
    assert len(frame) == 7 and not frame.duplicated(["trial_key", "split", "example"]).any()
    assert set(frame.loc[frame["trial_key"] == "a", "prediction"]) == {"[9]"}  # the later write wins
    assert compact(study, PREDICTIONS) == 3
    compacted = read_table(study, PREDICTIONS).to_pandas()
    assert len(compacted) == 7 and set(compacted.loc[compacted["trial_key"] == "a", "prediction"]) == {"[9]"}


def test_a_part_written_before_the_score_columns_reads_them_as_null(study):
    scores = {name for name, _ in SCORE_COLUMNS}
    old_schema = pa.schema([f for f in TRIAL_SCHEMA if f.name not in scores and f.name != "task"])
    folder = Path(table_dir(study, TRIALS)) / "task=t"
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([{k: row("old").get(k) for k in old_schema.names}], schema=old_schema),
                   folder / "part-old.parquet")
    write_rows(study, TRIALS, [{**row("new"), "paper_test_score": 3.0}])
    table = read_trials(study).to_pandas().set_index("trial_key")
    assert table[sorted(scores)].loc["old"].isna().all() and table.loc["new", "paper_test_score"] == 3.0


def test_duckdb_polars_and_pandas_read_the_store_without_the_project(study):
    import duckdb
    import pandas as pd
    import polars as pl

    write_rows(study, TRIALS, [row(f"k{i}", task=["sst2", "mnli", "conll2003"][i % 3]) for i in range(30)])
    write_rows(study, PRETRAINING, [{"study": "s", "run_name": "r", "run_key": "k", "step": s, "loss": 1.0}
                                       for s in range(7)])
    root = Path(table_dir(study, TRIALS))
    glob = f"{root}/*/*.parquet"
    source = f"read_parquet('{glob}', hive_partitioning=true)"
    assert duckdb.sql(f"select count(*), count(distinct task) from {source}").fetchall() == [(30, 3)]
    assert pl.scan_parquet(glob, hive_partitioning=True).select(pl.len()).collect().item() == 30
    frame = pd.read_parquet(root)
    assert len(frame) == 30 and set(frame["task"].astype(str)) == {"sst2", "mnli", "conll2003"}
    assert len(pd.read_parquet(Path(table_dir(study, PRETRAINING)))) == 7


def test_empty_store_reads_as_empty_table(study):
    assert read_trials(study).num_rows == 0 and finished_trial_keys(study) == set()
