"""Studies and locations in moto's S3 server: split from tests/unit/store/test_storage.py."""
from __future__ import annotations

import subprocess
import sys
from datetime import datetime, UTC

import pyarrow.dataset as ds
import pytest

from sweeper.store import storage
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, compact, read_table, read_trials, table_dir, write_rows

from conftest import ROOT

# The unit tests of a location, run here on an s3:// one (tests/unit/store/test_storage.py runs them
# on a folder), and the unit module's autouse fixture.
from test_storage import (  # noqa: F401  (the tests and fixture named above)
    private_cache, test_a_run_resumes_from_its_newest_checkpoint_whose_listed_files_all_arrived,
    test_build_once_publishes_a_whole_folder_that_local_copy_reads, test_files_round_trip_and_listing)


@pytest.fixture(params=["s3"])
def location(request, object_store) -> str:
    return object_store(f"unit-{id(request)}/study")


def row(key: str, task: str, status: str = "ok", minute: int = 0) -> dict:
    return {"study": "s", "trial_key": key, "checkpoint_id": "c", "task": task, "learning_rate": 1e-3, "seed": 0,
            "status": status, "test_score": 50.0, "finished_at": datetime(2026, 1, 1, 0, minute, tzinfo=UTC)}


def test_results_store_in_an_object_store(object_store):
    study = StudyLayout(object_store("store/study"))
    write_rows(study, TRIALS, [row("a", "sst2", status="failed"), row("b", "conll2003")])
    write_rows(study, TRIALS, [row("a", "sst2", minute=5), row("c", "sst2")])
    assert compact(study, TRIALS) == 2  # the two sst2 batch files merged into one
    assert storage.list_names(storage.join(table_dir(study, TRIALS), "task=sst2")) != []
    rows = read_trials(study).to_pandas().set_index("trial_key")
    assert sorted(rows.index) == ["a", "b", "c"] and rows.loc["a", "status"] == "ok"
    # Plain pyarrow reads the same Hive-partitioned files from the bucket, no sweeper code involved.
    fs, path = storage.filesystem(table_dir(study, TRIALS))
    direct = ds.dataset(path, filesystem=fs, format="parquet", partitioning="hive").to_table()
    assert sorted(direct.column("task").to_pylist()) == ["conll2003", "sst2", "sst2"]
    assert read_table(StudyLayout(object_store("store/empty")), TRIALS).num_rows == 0


def test_a_spec_may_name_an_object_store_and_a_missing_bucket_stops_the_run(tmp_path, object_store):
    from sweeper.cli import study_layout_for
    from sweeper.plan.load import load_study

    smoke = (ROOT / "search_spaces" / "smoke.yaml").read_text()
    spec_path = tmp_path / "spec.yaml"
    # A spec names no credentials (sweeper.spec.names): the bucket as a spec gives it, keys in the environment.
    spec_path.write_text(smoke + f"storage: {storage.strip_credentials(object_store('from-spec/study'))}\n")
    spec = load_study(spec_path).spec
    elsewhere = str(tmp_path / "x" / "y")
    layout = study_layout_for(spec, None)
    assert layout.root == spec.storage
    assert study_layout_for(spec, elsewhere) == StudyLayout(elsewhere)
    missing = object_store("x").replace("@sweeper-tests/", "@no-such-bucket/")
    result = subprocess.run([sys.executable, "-m", "sweeper", "run", str(spec_path), "--storage", missing],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 2 and "bucket 'no-such-bucket' does not exist" in result.stderr, result.stderr
    assert "testing:testing" not in result.stderr and "[study]" not in result.stdout


def test_a_small_file_rewritten_while_it_is_read_is_never_read_half(object_store):
    """pyarrow asks an object's size, then its bytes; a rewrite in between splices two
    versions (about one read in five here without the re-read). progress.json is rewritten at
    every log step while `sweeper status` and the tests read it."""
    import threading
    import time

    location = storage.join(object_store("rewritten"), "progress.json")
    storage.write_json(location, {"step": 0})
    stop = threading.Event()

    def rewrite():
        step = 0
        while not stop.is_set():
            step += 1
            storage.write_json(location, {"step": step, "pad": "x" * (step % 50)}, indent=None)
            time.sleep(0.002)  # still ~100 rewrites a second, far more than any real writer

    writer = threading.Thread(target=rewrite)
    writer.start()
    try:
        steps = [storage.read_json(location)["step"] for _ in range(150)]
    finally:
        stop.set()
        writer.join()
    assert steps == sorted(steps) and steps[-1] > 0
