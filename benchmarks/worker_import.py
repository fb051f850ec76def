"""Benchmark 17b: the CPU time a Ray worker process spends importing the worker side.

Each sample is a fresh `python` process that imports ray (as every Ray worker has), then
`trainables.finetune_loop` (what a trial's worker imports first), and prints the CPU time of the
second import. Two arms, alternated: the package as shipped (its import runs with the cyclic
garbage collector paused: trainables/__init__.py) and the same import with a collector that
stays on throughout (`gc.disable` patched to do nothing first). Prints each arm's median and
the ratio.

    .venv/bin/python benchmarks/worker_import.py [--samples 5]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MEASURE = """
import gc, time
import ray
if {collector_on}:
    gc.disable = gc.freeze = lambda: None  # the package's pause becomes a no-op: the collector stays on
started = time.process_time()
import trainables.finetune_loop
print(time.process_time() - started)
"""


def sample(collector_on: bool) -> float:
    done = subprocess.run([sys.executable, "-c", MEASURE.format(collector_on=collector_on)], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args()
    times = {"collector paused (shipped)": [], "collector on": []}
    for _ in range(args.samples):
        times["collector paused (shipped)"].append(sample(collector_on=False))
        times["collector on"].append(sample(collector_on=True))
    medians = {arm: statistics.median(values) for arm, values in times.items()}
    for arm, values in times.items():
        print(f"{arm:28s} median {medians[arm]:.2f} CPU-s  ({', '.join(f'{v:.2f}' for v in values)})")
    paused, on = medians["collector paused (shipped)"], medians["collector on"]
    print(f"saved per worker process: {on - paused:.2f} CPU-s ({1 - paused / on:.0%}); ratio paused/on {paused / on:.2f}")


if __name__ == "__main__":
    main()
