"""Benchmark 10 (issue #17): the share of a grid's fine-tuning compute that a TPE search, and a
TPE search with ASHA early stopping, need to select each cell's best params.

Three studies of the same four checkpoints (nano MLM 40 % and CLM, 300 steps, each at 150 and
300) and task (WordNet supersense classification, 60 steps, a curve point every 15), run as a
user runs them (`python -m sweeper run`), the later two on a copy of the first one's
pretrained checkpoints:
- `grid`: learning rate (4) x weight decay (3) x 2 seeds, every trial to its end (the paper's
  protocol);
- `tpe`: `search: optuna` over the same ranges (learning rate log-uniform between the grid's
  ends, weight decay a choice of the grid's values), as many samples per cell as the grid has
  points, seeds as repeats;
- `tpe-asha`: the same search with `scheduler: {kind: asha}` on the validation curve, which
  judges a sample on its seeds' mean and stops its seeds together (sweeper.run.early_stopping).

Per (checkpoint, task) cell, the reference is the grid's selection: the best point on
seed-averaged validation, and its mean test score. A search "has found" the cell after its
first k samples when its own selection among them (the same rule, on its finished trials) has a
mean test score within `--tolerance` (0.5) points of the reference, or above it, and stays so
for every later k. Its cost is the trial-steps (optimizer steps summed over trials, a stopped
trial counting the steps it ran) of those k samples, as a share of the grid's trial-steps for
the cell. A cell the search never settles within tolerance counts as its whole search's cost
and is marked. Wall times are printed for information only: on 2 shared CPUs they follow the
machine's load more than the method, and the grid's include its pretraining, with which its
first trials run pipelined.

    .venv/bin/python benchmarks/search_efficiency.py [--out DIR] [--tolerance 0.5] [--quick]

`--quick`: a few steps and samples, to check the machinery (seconds of fine-tuning, no figure).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LEARNING_RATES = [0.001, 0.003, 0.01, 0.03]
WEIGHT_DECAYS = [0.0, 0.1, 0.3]

PRETRAINING = """\
model: {{preset: nano}}
data: {{vocab_size: 2048, seq_len: 128}}
pretraining:
  steps: {steps}
  global_batch_size: 16
  warmup_steps: {warmup}
  decay_steps: {decay}
  log_every: 50
  runs:
    - {{objective: mlm, mask_ratio: [0.4], checkpoint_steps: [{middle}]}}
    - {{objective: clm, checkpoint_steps: [{middle}]}}
"""

FINETUNING = """\
finetuning:
  tasks: [wordnet-supersense-cls]
{search}  seeds: [0, 1]
  batch_size: 32
  micro_batch_size: 32
  max_steps: {max_steps}
  epochs: 3.0
  eval_every: {eval_every}
  max_length: 64
  max_train_examples: 2000
  max_eval_examples: 200
resources: {{pretraining_workers: 0, cpus_per_trial: 1, gpus_per_trial: 0}}
"""


def search_lines(mode: str, samples: int) -> str:
    if mode == "grid":
        return f"  learning_rates: {LEARNING_RATES}\n  weight_decay: {WEIGHT_DECAYS}\n"
    lines = (f"  search: optuna\n  optuna: {{learning_rates_per_cell: {samples}, lr_min: {LEARNING_RATES[0]}, "
             f"lr_max: {LEARNING_RATES[-1]}, startup_samples: 4, seed: 0}}\n"
             f"  weight_decay: {{choice: {WEIGHT_DECAYS}}}\n")
    if mode == "tpe-asha":
        lines += "  scheduler: {kind: asha, grace_period: 1, reduction_factor: 3}\n"
    return lines


def spec_text(mode: str, quick: bool) -> str:
    samples = len(LEARNING_RATES) * len(WEIGHT_DECAYS)
    return (f"study: search-efficiency-{mode}\n"
            + PRETRAINING.format(steps=40 if quick else 300, warmup=4 if quick else 20, decay=8 if quick else 40,
                                 middle=20 if quick else 150)
            + FINETUNING.format(search=search_lines(mode, 4 if quick else samples), max_steps=4 if quick else 60,

                                eval_every=2 if quick else 15))


def run_study(spec: Path, study: Path) -> float:
    """`python -m sweeper run` as a user runs it; returns its wall seconds."""
    started = time.perf_counter()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)  # a local Ray of its own
    done = subprocess.run([sys.executable, "-m", "sweeper", "run", str(spec), "--storage", str(study)],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{spec.name} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def finetuning_seconds(study: Path) -> float:
    """Wall time of the fine-tuning stage: first to last trial recorded (the pretraining and the
    process start, equal for all three, left out)."""
    import pandas as pd

    from sweeper.store.layout import StudyLayout
    from sweeper.store.results import read_trials

    rows = read_trials(StudyLayout(str(study))).to_pandas()
    started = (rows["finished_at"] - pd.to_timedelta(rows["wall_time_s"], unit="s")).min()
    return (rows["finished_at"].max() - started).total_seconds()


def point_outcomes(rows) -> str:
    """How the points (a sample, or a grid point, with every seed) ended: all seeds ok, all
    stopped (and at which steps), or mixed."""
    keys = ["checkpoint_id", "task", "sample"] if rows["sample"].notna().all() else [
        "checkpoint_id", "task", "learning_rate", "params"]
    counts = {"complete": 0, "stopped": 0, "mixed": 0}
    steps = []
    for _, point in rows.groupby(keys, dropna=False):
        statuses = set(point["status"])
        kind = "complete" if statuses == {"ok"} else "stopped" if statuses == {"stopped"} else "mixed"
        counts[kind] += 1
        if kind == "stopped":
            steps.append(int(point["train_steps"].max()))
    stopped_at = ", ".join(f"{n} at step {s}" for s, n in sorted({s: steps.count(s) for s in steps}.items()))
    return (f"{counts['complete']} complete, {counts['stopped']} stopped" + (f" ({stopped_at})" if steps else "")
            + f", {counts['mixed']} mixed")


def reference(grid) -> dict:
    """Per cell: the grid's selected test mean and its trial-steps."""
    from sweeper.report import analysis

    best = analysis.best_params_table(grid)
    steps = grid.groupby(["checkpoint_id", "task"])["train_steps"].sum()
    return {(row.checkpoint_id, row.task): {"test": float(row.test_mean),
                                            "steps": int(steps[(row.checkpoint_id, row.task)])}
            for row in best.itertuples()}


def found_after(search, cell: tuple, target: float, tolerance: float) -> tuple[int | None, int, int, float]:
    """(samples after which the selection stays within tolerance, or None; their trial-steps;
    the search's trial-steps in all; the final selection's test mean)."""
    from sweeper.report import analysis

    rows = search[(search["checkpoint_id"] == cell[0]) & (search["task"] == cell[1])]
    samples = sorted(rows["sample"].unique())
    within = []
    final = float("nan")
    for k in range(1, len(samples) + 1):
        best = analysis.best_params_table(rows[rows["sample"] <= samples[k - 1]])
        final = float(best["test_mean"].iloc[0]) if not best.empty else float("nan")
        within.append(final >= target - tolerance)
    settled = next((k for k in range(1, len(within) + 1) if all(within[k - 1:])), None)
    total = int(rows["train_steps"].sum())
    steps = int(rows[rows["sample"] <= samples[settled - 1]]["train_steps"].sum()) if settled else total
    return settled, steps, total, final


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="folder of the three studies (default: a temporary one)")
    parser.add_argument("--tolerance", type=float, default=0.5, help="points of test score")
    parser.add_argument("--quick", action="store_true", help="tiny budgets: check the machinery only")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="search-efficiency-"))
    out.mkdir(parents=True, exist_ok=True)

    from sweeper.store.layout import StudyLayout
    from sweeper.store.results import read_trials

    walls, tables = {}, {}
    for mode in ("grid", "tpe", "tpe-asha"):
        spec, study = out / f"{mode}.yaml", out / mode
        spec.write_text(spec_text(mode, args.quick))
        if mode != "grid" and not (study / "pretraining").exists():
            # The grid's checkpoints: the same runs under the same keys, trained once.
            for part in ("pretraining", "cache"):
                shutil.copytree(out / "grid" / part, study / part, dirs_exist_ok=True)
        walls[mode] = run_study(spec, study)
        tables[mode] = read_trials(StudyLayout(str(study))).to_pandas()
        outcomes = ", ".join(f"{n} {status}" for status, n in tables[mode]["status"].value_counts().items())
        print(f"[{mode}] {len(tables[mode])} trials ({outcomes}; points: {point_outcomes(tables[mode])}), "
              f"sweeper run {walls[mode]:.0f} s, fine-tuning ~{finetuning_seconds(study):.0f} s", flush=True)

    ref = reference(tables["grid"])
    lines = [f"{'cell':44s} {'grid test':>9s} " + " ".join(f"{m + ' share':>18s}" for m in ("tpe", "tpe-asha"))]
    summary: dict[str, list[float]] = {"tpe": [], "tpe-asha": []}
    results = {}
    for cell, grid in sorted(ref.items()):
        shown = []
        for mode in ("tpe", "tpe-asha"):
            settled, steps, total, final = found_after(tables[mode], cell, grid["test"], args.tolerance)
            share = steps / grid["steps"]
            summary[mode].append(share)
            results[f"{cell[0]}/{cell[1]}/{mode}"] = {"samples": settled, "steps": steps, "search_steps": total,
                                                      "grid_steps": grid["steps"], "share": share,
                                                      "grid_test": grid["test"], "search_test": final}
            shown.append(f"{share:5.2f} ({settled} samples)" if settled else f"{share:5.2f} (never)*")
        lines.append(f"{cell[0] + ' / ' + cell[1]:44s} {grid['test']:9.2f} " + " ".join(f"{s:>18s}" for s in shown))
    for mode, shares in summary.items():
        search_total = int(tables[mode]["train_steps"].sum())
        lines.append(f"{mode}: mean share {sum(shares) / len(shares):.2f}, whole search "
                     f"{search_total / sum(r['steps'] for r in ref.values()):.2f} of the grid's trial-steps")
    print("\n".join(lines))
    (out / "search_efficiency.json").write_text(json.dumps({"walls_s": walls, "cells": results}, indent=1))
    print(f"(* never within {args.tolerance} points: its whole search's steps; details in "
          f"{out / 'search_efficiency.json'})")


if __name__ == "__main__":
    main()
