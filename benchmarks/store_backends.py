"""Benchmark 6: the results store of the paper's grid on a local disk vs an object store.

Records the rows of every trial of `search_spaces/paper.yaml` (18,000) as the driver does:
batches of 50 rows (one Parquet file per task in the batch), a compaction after each shard of
2,000 trials, then one `read_trials` of the whole table; once into a local folder (the
baseline, measured in the same run) and once into an S3 bucket served by moto on 127.0.0.1
(`pip install -e ".[test]"`). The loopback server has none of a real store's network latency,
so the script also prints the requests made: multiply by your store's latency per request for
a first estimate.

    .venv/bin/python benchmarks/store_backends.py [--trials 18000]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, UTC
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BATCH_ROWS = 50  # ResultsRecorder.flush_rows
SHARD_TRIALS = 2_000  # resources.trials_per_shard of paper.yaml


def trial_rows(count: int) -> list[dict]:
    from sweeper.plan.load import load_study
    from sweeper.plan.study_plan import plan_study
    from sweeper.run.recording import trial_row

    trials = plan_study(load_study(ROOT / "search_spaces" / "paper.yaml").spec).trials[:count]
    now = datetime.now(UTC)
    return [{**trial_row("paper", t, {"validation_score": 50.0, "test_score": 49.0, "train_loss": 0.5,
                                      "train_steps": 100, "wall_time_s": 60.0}, "ok", None), "finished_at": now}
            for t in trials]


def record(study, rows: list[dict]) -> dict[str, float]:
    """Write as the driver does into `study` (a StudyLayout); returns seconds per phase and the
    files written."""
    from sweeper.store.results import TRIALS, compact, read_trials, write_rows

    timings = {"write": 0.0, "compact": 0.0, "files": 0}
    for shard_start in range(0, len(rows), SHARD_TRIALS):
        shard = rows[shard_start:shard_start + SHARD_TRIALS]
        started = time.perf_counter()
        for i in range(0, len(shard), BATCH_ROWS):
            timings["files"] += len(write_rows(study, TRIALS, shard[i:i + BATCH_ROWS]))
        timings["write"] += time.perf_counter() - started
        started = time.perf_counter()
        compact(study, TRIALS)
        timings["compact"] += time.perf_counter() - started
    started = time.perf_counter()
    assert read_trials(study).num_rows == len(rows)
    timings["read"] = time.perf_counter() - started
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=18_000)
    args = parser.parse_args()
    from sweeper.store.layout import StudyLayout
    sys.path.insert(0, str(ROOT / "tests" / "support"))  # the loopback S3 server lives with the tests
    from local_s3 import local_s3

    rows = trial_rows(args.trials)
    with local_s3("bench") as s3:
        local = StudyLayout(str(Path(tempfile.mkdtemp(prefix="bench-store-")) / "paper"))
        results = {"local disk": record(local, rows),
                   "S3 (moto, loopback)": record(StudyLayout(s3.uri("paper")), rows)}
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; {len(rows):,} trial rows of paper.yaml in "
          f"batches of {BATCH_ROWS}, compacted every {SHARD_TRIALS:,}")
    base = sum(results["local disk"][k] for k in ("write", "compact", "read"))
    for name, t in results.items():
        total = t["write"] + t["compact"] + t["read"]
        print(f"{name:20s} write {t['write']:6.1f} s ({t['files']} files)  compact {t['compact']:5.1f} s  "
              f"read {t['read']:5.2f} s  total {total:6.1f} s  ratio {total / base:.2f}")


if __name__ == "__main__":
    main()
