"""Benchmark 17b: the CPU time a process spends on its heavy imports.

Two comparisons, each sampled in fresh `python` processes, the arms alternating:
- the collector (sweeper.contract.heavy_imports, as shipped, against a collector that stays on
  throughout: the second arm patches `gc.disable` and `gc.freeze` to do nothing first):
  - worker: `ray`, then `trainables.finetune_loop` in `imports_frozen()` (what a trial's Ray
    worker imports: sweeper.run.tune_grid.finetune_trainable);
  - driver: `sweeper.run.runner` (what `sweeper run` imports once the spec is good: Ray Tune,
    pandas, scipy.stats, matplotlib; sweeper/cli.py pauses and freezes around it), then a
    workload of short-lived containers such as a driver's loop makes, so the full collections
    that follow an import are counted too;
- prep: what a worker that probes the environment and tokenises task data imports (`ray`, then
  trainables.environment, trainables.tasks.data, every task family and transformers'
  tokenizer classes, frozen), as shipped against the same with `trainables.model` too: what
  such a worker imported while `import trainables` loaded the model classes.
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
from sweeper.contract.heavy_imports import imports_frozen
with imports_frozen():
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
    "prep": """
import time
import ray
started = time.process_time()
from sweeper.contract.heavy_imports import imports_frozen
with imports_frozen():
    import trainables.environment, trainables.tasks.data, trainables.tasks.classification, trainables.tasks.qa
    import trainables.tasks.retrieval
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    if {with_model}:
        import trainables.model
print(time.process_time() - started)
""",
}
ARMS = {
    "worker": {"paused, then frozen (shipped)": {"collector_on": False}, "collector on": {"collector_on": True}},
    "driver": {"paused, then frozen (shipped)": {"collector_on": False}, "collector on": {"collector_on": True}},
    "prep": {"no model classes (shipped)": {"with_model": False}, "with the model classes": {"with_model": True}},
}
"""Each side's two arms (shipped first) and what each fills into the side's code."""


def sample(side: str, fill: dict) -> float:
    done = subprocess.run([sys.executable, "-c", MEASURE[side].format(**fill)], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args()
    for side, arms in ARMS.items():
        times = {arm: [] for arm in arms}
        for _ in range(args.samples):
            for arm, fill in arms.items():
                times[arm].append(sample(side, fill))
        medians = {arm: statistics.median(values) for arm, values in times.items()}
        for arm, values in times.items():
            print(f"{side}: {arm:30s} median {medians[arm]:.2f} CPU-s  ({', '.join(f'{v:.2f}' for v in values)})")
        shipped, other = medians.values()
        print(
            f"{side}: saved per process {other - shipped:.2f} CPU-s ({1 - shipped / other:.0%}); ratio "
            f"{shipped / other:.2f}"
        )


if __name__ == "__main__":
    main()
