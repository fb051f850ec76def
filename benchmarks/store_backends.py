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
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BATCH_ROWS = 50  # ResultsRecorder.flush_rows
SHARD_TRIALS = 2_000  # resources.trials_per_shard of paper.yaml


def trial_rows(count: int) -> list[dict]:
    from sweeper.finetuning import trial_row
    from sweeper.plan import plan_study
    from sweeper.spec import load_spec

    trials = plan_study(load_spec(ROOT / "search_spaces" / "paper.yaml")).trials[:count]
    now = datetime.now(timezone.utc)
    return [{**trial_row("paper", t, {"validation_score": 50.0, "test_score": 49.0, "train_loss": 0.5,
                                      "train_steps": 100, "wall_time_s": 60.0}, "ok", None), "finished_at": now}
            for t in trials]


def record(study: str, rows: list[dict]) -> dict[str, float]:
    """Write as the driver does; returns seconds per phase and the files written."""
    from sweeper.store import TRIALS, compact, read_trials, write_rows

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


def s3_server() -> tuple[subprocess.Popen, str]:
    import pyarrow.fs as pafs

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    query = f"endpoint_override=127.0.0.1:{port}&scheme=http"
    pafs.FileSystem.from_uri(f"s3://bench:bench@bench?{query}&allow_bucket_creation=true")[0].create_dir("bench")
    return server, f"s3://bench:bench@bench/paper?{query}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=18_000)
    args = parser.parse_args()
    rows = trial_rows(args.trials)
    server, uri = s3_server()
    try:
        results = {"local disk": record(str(Path(tempfile.mkdtemp(prefix="bench-store-")) / "paper"), rows),
                   "S3 (moto, loopback)": record(uri, rows)}
    finally:
        server.terminate()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; {len(rows):,} trial rows of paper.yaml in "
          f"batches of {BATCH_ROWS}, compacted every {SHARD_TRIALS:,}")
    base = sum(results["local disk"][k] for k in ("write", "compact", "read"))
    for name, t in results.items():
        total = t["write"] + t["compact"] + t["read"]
        print(f"{name:20s} write {t['write']:6.1f} s ({t['files']} files)  compact {t['compact']:5.1f} s  "
              f"read {t['read']:5.2f} s  total {total:6.1f} s  ratio {total / base:.2f}")


if __name__ == "__main__":
    main()
