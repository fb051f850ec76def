"""Benchmark 12: the verdicts' power at the paper's 610m effects, by pretraining replicates; and the
time of the report's verdicts and robustness card on an 18,000-row store.

Power: simulated studies (tests/support/verdict_simulation.py: noise SD 1 point per trial, a (task, seed)
effect of SD 1.5 shared by every checkpoint, run-to-run SD `--run-sd` per run and category, 5
fine-tuning seeds, 4-6 learning rates) of one 610m @ 42k group, with the category differences of
the paper's Table/Fig. (docs/../shared/design/study.md): MLM-40 minus CLM: SC +3.42, TC -0.48,
QA +20.68, IR +3.35; 25 % split minus MLM-40: +0.85 / +0.86 / +5.00 / +0.33 (the 50 % split as MLM
+0.5); continued from CLM minus from MLM: +0.93 / +0.59 / -1.04 / +0.25. Power = the share of
studies whose verdict is the paper's (findings 1, 4 'supports'; finding 5 'supports'). With one run
per configuration the verdict is about two checkpoints (its power is not an objective's).

Time: the paper's fine-tuning grid shape, 50 checkpoints x 12 tasks x 6 learning rates x 5 seeds =
18,000 trial rows, through what `sweeper report` runs for the findings: the dense grid from the
rows, the five verdicts, and the robustness card (target: under 30 s).

    .venv/bin/python benchmarks/verdict_power.py [--studies 200] [--replicates 1 2 3 5] [--run-sd 0.5]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from verdict_simulation import GROUPS, Scenario, simulate, trial_rows

from sweeper.report import findings, robustness
from sweeper.spec.study import PAPER_STABILITY_RANGE

MLM = {"SC": 3.42, "QA": 20.68, "IR": 3.35}
PAPER_EFFECTS = {
    "mlm40": MLM, "clm": {"TC": 0.48},
    "split25": {"SC": MLM["SC"] + 0.85, "TC": 0.86, "QA": MLM["QA"] + 5.00, "IR": MLM["IR"] + 0.33},
    "split50": {c: MLM.get(c, 0.0) + 0.5 for c in ("SC", "TC", "QA", "IR")},
    "cpt-clm": {"SC": 0.93, "TC": 0.59, "QA": -1.04, "IR": 0.25},
}
FINDINGS = (1, 4, 5)


def power(replicates: int, studies: int, run_sd: float, seed: int) -> dict[int, float]:
    rng = np.random.default_rng(seed)
    scenario = Scenario(groups=GROUPS[:1], effects=PAPER_EFFECTS, run_sd=run_sd, replicates=replicates, rates=4)
    hits = dict.fromkeys(FINDINGS, 0)
    for _ in range(studies):
        for verdict in findings.judge_grid(*simulate(rng, scenario)):
            if verdict.number in hits and verdict.verdict == "supports":
                hits[verdict.number] += 1
    return {f: hits[f] / studies for f in FINDINGS}


def report_time() -> tuple[int, float, float, int]:
    groups = tuple((size, budget) for size in ("150m", "610m") for budget in (12000, 22000, 42000))
    scenario = Scenario(groups=groups, tasks_per_category=3, rates=6)
    grid, runs = simulate(np.random.default_rng(0), scenario)
    rows = trial_rows(grid, runs)
    rows = rows[rows["checkpoint_id"].isin(rows["checkpoint_id"].unique()[:50])]
    started = time.perf_counter()
    study = findings.study_grid(rows)
    verdicts = findings.judge_grid(*study)
    judged = time.perf_counter() - started
    card = robustness.robustness_card(*study, verdicts, PAPER_STABILITY_RANGE)
    return len(rows), judged, time.perf_counter() - started, len(card)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=200)
    parser.add_argument("--replicates", type=int, nargs="+", default=[1, 2, 3, 5])
    parser.add_argument("--run-sd", type=float, default=0.5)
    args = parser.parse_args()
    rows, judged, total, variants = report_time()
    print(f"report verdicts on {rows:,} trial rows: {judged:.1f} s; with the robustness card ({variants} variants): "
          f"{total:.1f} s (target < 30 s)")
    table = pd.DataFrame({r: power(r, args.studies, args.run_sd, seed=r) for r in args.replicates}).T
    table.index.name = "runs per configuration"
    table.columns = [f"finding {f}" for f in FINDINGS]
    print(f"\npower ('supports') at the paper's 610m effects, {args.studies} studies each, run SD {args.run_sd:g}:")
    print((table * 100).round(0).astype(int).astype(str).add(" %").to_string())


if __name__ == "__main__":
    main()
