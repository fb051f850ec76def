"""Benchmark 17b: the CPU time a process spends on its heavy imports, with the cyclic garbage
collector paused and then frozen (sweeper.contract.heavy_imports, as shipped) and with a collector
that stays on throughout.

Two imports, each sampled in fresh `python` processes:
- worker: `ray`, then `trainables.finetune_loop` (what a trial's Ray worker imports first; the
  package pauses and freezes around torch and transformers' model classes);
- driver: `sweeper.run.runner` (what `sweeper run` imports once the spec is good: Ray Tune,
  pandas, scipy.stats, matplotlib; sweeper/cli.py pauses and freezes around it), then a workload
  of short-lived containers such as a driver's loop makes, so the full collections that follow
  an import are counted too.
The arms alternate; the collector-on arm patches `gc.disable` and `gc.freeze` to do nothing first.
Prints each arm's median and the ratio.

    .venv/bin/python benchmarks/heavy_imports.py [--samples 5]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MEASURE = {
    "worker": """
import gc, time
import ray
if {collector_on}:
    gc.disable = gc.freeze = lambda: None  # the pause becomes a no-op: the collector stays on
started = time.process_time()
import trainables.finetune_loop
print(time.process_time() - started)
""",
    "driver": """
import gc, time
if {collector_on}:
    gc.disable = gc.freeze = lambda: None
started = time.process_time()
from sweeper.contract.heavy_imports import imports_frozen
with imports_frozen():
    from sweeper.run.runner import run_study
rows = []
for i in range(400_000):  # a driver's loop: events, results, their dicts and lists
    rows.append({{"trial": i, "scores": [i, i + 1]}})
    if len(rows) > 1000:
        rows.clear()
print(time.process_time() - started)
""",
}


def sample(side: str, collector_on: bool) -> float:
    done = subprocess.run([sys.executable, "-c", MEASURE[side].format(collector_on=collector_on)], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args()
    for side in MEASURE:
        times = {"paused, then frozen (shipped)": [], "collector on": []}
        for _ in range(args.samples):
            times["paused, then frozen (shipped)"].append(sample(side, collector_on=False))
            times["collector on"].append(sample(side, collector_on=True))
        medians = {arm: statistics.median(values) for arm, values in times.items()}
        for arm, values in times.items():
            print(f"{side}: {arm:30s} median {medians[arm]:.2f} CPU-s  ({', '.join(f'{v:.2f}' for v in values)})")
        paused, on = medians["paused, then frozen (shipped)"], medians["collector on"]
        print(f"{side}: saved per process {on - paused:.2f} CPU-s ({1 - paused / on:.0%}); ratio {paused / on:.2f}")


if __name__ == "__main__":
    main()
