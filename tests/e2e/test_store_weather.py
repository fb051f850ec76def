"""A cloud store's weather (issue #57): the study's bucket behind tests/support/faulty_proxy.py,
which answers a seeded share of requests `503 SlowDown` and drops a share of connections. What
sweeper reads and writes rides it out in one run."""
from __future__ import annotations

import os
import pickle
from urllib.parse import urlsplit

import pytest
from conftest import ROOT, run_sweeper
from faulty_proxy import Weather, faulty_proxy
from local_s3 import LocalS3

from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study
from sweeper.store import storage
from sweeper.store.layout import StudyLayout
from sweeper.store.results import PRETRAINING, TRIALS, read_table

STORM = Weather(slow_down=0.20, drop=0.05, seed=1)
"""Twice the acceptance's weather: one request in four fails."""


def bucket_of(object_store) -> LocalS3:
    """The `object_store` fixture's bucket and server, for a proxy to stand in front of."""
    location = object_store("x")
    return LocalS3(storage.bucket_and_path(location)[0], urlsplit(location).query)


def through(proxy, location: str) -> str:
    """`location` (an `object_store` one) reached through the proxy."""
    return location.replace(urlsplit(location).query, proxy.s3.query)


def test_files_written_and_read_through_a_storm_arrive_whole(object_store):
    with faulty_proxy(bucket_of(object_store), STORM) as proxy:
        location = storage.normalize(through(proxy, object_store("storm/files")))
        blobs = {f"f{i}.json": os.urandom(i * 37 % 300) for i in range(24)}  # 0-300 bytes: markers, JSON
        blobs["big.bin"] = os.urandom(11 << 20)  # over pyarrow's 10 MiB part size: a multipart upload
        for name, data in blobs.items():
            storage.write_bytes(storage.join(location, name), data)
        assert storage.file_sizes(location) == {name: len(data) for name, data in blobs.items()}
        # Ray pickles the filesystem into its workers: the copy keeps the retries.
        fs, path = storage.filesystem(location)
        copy = pickle.loads(pickle.dumps(fs))
        assert copy is fs  # rebuilt from its root in the receiving process: here the same cached object
        assert {name: storage.read_bytes(storage.join(location, name)) for name in blobs} == blobs
        counts = proxy.counts
        assert counts["slow_down"] >= 8 and counts["dropped"] >= 2, counts

        # One client rides out more than 100 retries: the SDK's standard strategy (pyarrow's
        # default) stops retrying after about 100 (its quota is never refilled through pyarrow).
        before = proxy.counts
        for i in range(300):
            with fs.open_output_stream(f"{path}/one-client-{i}") as stream:
                stream.write(b"x")
        after = proxy.counts
        assert after["slow_down"] + after["dropped"] - before["slow_down"] - before["dropped"] > 40, after


@pytest.mark.e2e
def test_the_smoke_study_finishes_in_one_run_through_a_flaky_store(ray_head, object_store):
    """Acceptance of issue #57: 10 % 503 SlowDown and 2 % dropped connections for the driver
    and every worker; one `sweeper run`, exit 0, every planned trial recorded once and ok, the
    report written."""
    spec = ROOT / "search_spaces" / "smoke.yaml"
    with faulty_proxy(bucket_of(object_store), Weather(slow_down=0.10, drop=0.02, seed=57)) as proxy:
        study = through(proxy, object_store("weather/study"))
        result = run_sweeper("run", str(spec), "--storage", study, address=ray_head[0])
        counts = proxy.counts
    print(f"weather: {counts}")
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    layout = StudyLayout(storage.normalize(object_store("weather/study")))  # read back without the proxy
    plan = plan_study(load_study(spec).spec)
    rows = read_table(layout, TRIALS).to_pandas()
    assert sorted(rows["trial_key"]) == sorted(t.trial_key for t in plan.trials), "one row per planned trial"
    assert (rows["status"] == "ok").all(), rows[rows["status"] != "ok"][["trial_key", "status"]]
    assert set(read_table(layout, PRETRAINING).to_pandas()["run_name"]) == {run.name for run in plan.runs}
    assert storage.exists(layout.report)
    assert counts["slow_down"] >= 50 and counts["dropped"] >= 5, counts


def test_a_missing_bucket_stops_at_once_with_one_line_naming_it(object_store):
    """A permanent error is not retried (twelve tries with backoff would take minutes): it
    fails within seconds, and `permanent_line` makes it one line without credentials."""
    import time

    from sweeper.store.permanent_errors import permanent_line

    missing = storage.normalize(object_store("x").replace("@sweeper-tests/", "@no-such-bucket/"))
    started = time.monotonic()
    with pytest.raises(OSError) as raised:
        storage.write_bytes(storage.join(missing, "marker.json"), b"{}")
    assert time.monotonic() - started < 5
    line = permanent_line(raised.value)
    assert line is not None and "no-such-bucket" in line and "\n" not in line and "testing:testing" not in line, line
