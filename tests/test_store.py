"""Results store: batches as atomic Parquet files, one row per trial key on read."""
from datetime import datetime, timedelta, timezone

import pyarrow.parquet as pq

from sweeper.store import TRIALS, finished_trial_keys, read_table, read_trials, table_dir, write_rows


def row(key, status="ok", score=50.0, minutes=0):
    return {"study": "s", "trial_key": key, "checkpoint_id": "c", "task": "t", "learning_rate": 1e-3, "seed": 0,
            "status": status, "test_score": score,
            "finished_at": datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(minutes=minutes)}


def test_batches_round_trip_and_leave_no_temporary_files(tmp_path):
    write_rows(tmp_path, TRIALS, [row("a"), row("b")])
    write_rows(tmp_path, TRIALS, [row("c", status="failed")])
    files = list(table_dir(tmp_path, TRIALS).iterdir())
    assert len(files) == 2 and all(f.name.startswith("part-") and f.suffix == ".parquet" for f in files)
    assert sum(pq.read_metadata(f).num_rows for f in files) == 3
    assert read_table(tmp_path, TRIALS).num_rows == 3
    assert finished_trial_keys(tmp_path) == {"a", "b", "c"}
    assert finished_trial_keys(tmp_path, include_failed=False) == {"a", "b"}


def test_a_trial_recorded_twice_is_read_once_preferring_ok(tmp_path):
    write_rows(tmp_path, TRIALS, [row("a", status="failed", minutes=0), row("b", score=1.0, minutes=0)])
    write_rows(tmp_path, TRIALS, [row("a", score=70.0, minutes=5), row("b", score=2.0, minutes=5)])
    write_rows(tmp_path, TRIALS, [row("a", status="failed", minutes=9)])
    table = read_trials(tmp_path).to_pandas().set_index("trial_key")
    assert len(table) == 2
    assert table.loc["a", "status"] == "ok" and table.loc["a", "test_score"] == 70.0
    assert table.loc["b", "test_score"] == 2.0


def test_empty_store_reads_as_empty_table(tmp_path):
    assert read_trials(tmp_path).num_rows == 0 and finished_trial_keys(tmp_path) == set()
