"""The verdicts' cost per study: `judge_grid` on simulated studies of the calibration's largest
scenario (three groups of runs, three pretraining replicates), as shipped (the arms' run table
laid out by `statistics.selectable`: strings as Python objects, one block per dtype) and with
that table as it comes (Arrow-backed strings, a block per column), alternated in one process on
the same studies. The calibration (tests/unit/report, benchmarks/verdict_calibration.py) runs
thousands of these; a report runs one.

    .venv/bin/python benchmarks/verdict_speed.py [--studies 60] [--repeats 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from verdict_simulation import GROUPS, Scenario, simulate

from sweeper.report import statistics as verdict_statistics
from sweeper.report.findings import judge_grid


def judge_grid_as_it_comes(grid, runs):
    """judge_grid without the conversion: the baseline."""
    shipped = verdict_statistics.selectable
    verdict_statistics.selectable = lambda frame: frame
    try:
        return judge_grid(grid, runs)
    finally:
        verdict_statistics.selectable = shipped


def per_study_ms(judge_one, studies) -> float:
    started = time.process_time()
    for grid, runs in studies:
        judge_one(grid, runs)
    return (time.process_time() - started) / len(studies) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(2507)
    studies = [simulate(rng, Scenario(groups=GROUPS, run_sd=0.5, replicates=3)) for _ in range(args.studies)]
    for (grid, runs) in studies[:5]:  # the two paths decide alike
        assert [(v.verdict, v.evidence) for v in judge_grid(grid, runs)] == \
            [(v.verdict, v.evidence) for v in judge_grid_as_it_comes(grid, runs)]
    shipped, baseline = [], []
    for _ in range(args.repeats):  # alternated, so drift in the machine's speed hits both
        baseline.append(per_study_ms(judge_grid_as_it_comes, studies))
        shipped.append(per_study_ms(judge_grid, studies))
    print(f"{args.studies} studies, {args.repeats} repeats, CPU ms per study (median):")
    print(f"  as it comes (baseline)           {statistics.median(baseline):6.1f}  {[round(x, 1) for x in baseline]}")
    print(f"  selectable (shipped)             {statistics.median(shipped):6.1f}  {[round(x, 1) for x in shipped]}")
    print(f"  ratio shipped / baseline         {statistics.median(shipped) / statistics.median(baseline):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
