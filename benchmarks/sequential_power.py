"""Benchmark: a sequential replicate plan (`pretraining.sequential`) against the fixed design at
its maximum: the false-verdict rate over all looks under nulls, power at the paper's 610m
effects, and the pretraining runs it trains (sweeper.report.sequential).

Simulated studies (tests/support/verdict_simulation.py: continued-pretraining replicates carry
their own source replicate's effect, as the plan builds them) of one 610m @ 42k group, each
configuration trained `maximum` times; a sequential study reads only the replicates its looks ask for (the
first `first`, then `step` more for the configurations of the comparisons still open), which is
what the driver would have trained. The fixed design reads all of them (`findings.judge_grid`).
The paper's effects are benchmarks/verdict_power.py's. `--effect E` adds studies whose every
two-arm part claims E points (`verdict_simulation.uniform_effects`): the world `sweeper plan`'s
expected cost models (sweeper.design.sequential_cost). The runs trained are given as a share of the
fixed design's, with its Monte Carlo SE and 10th-90th percentiles over the studies.
docs/statistics.md quotes the figures.

    .venv/bin/python benchmarks/sequential_power.py [--studies 400] [--first 3 --step 3 --maximum 12]
        [--parts-rule holm] [--effect 1.0 ...]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from verdict_power import PAPER_EFFECTS
from verdict_simulation import GROUPS, Scenario, simulate, uniform_effects

from sweeper.report.findings import judge_grid
from sweeper.report.sequential import run_looks
from sweeper.report.statistics import PART_RULES, VerdictConfig
from sweeper.spec.sequential import SequentialSpec

FINDINGS = (1, 2, 3, 4, 5)
PAPER_CLAIMS = (1, 4, 5)
"""The findings the paper's 610m effects support (benchmarks/verdict_power.py)."""


def simulate_designs(scenario: Scenario, design: SequentialSpec, studies: int, seed: int,
                     config: VerdictConfig = VerdictConfig()) -> pd.DataFrame:
    """One row per study: each finding's verdict under the sequential plan and the fixed design at
    the maximum, and the runs each trained."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(studies):
        grid, runs = simulate(rng, scenario)
        outcome = run_looks(grid, runs, design, config=config)
        fixed = judge_grid(grid, runs, config=config)
        row = {"runs": outcome.runs_trained(), "runs_fixed": outcome.runs_fixed(), "looks": len(outcome.counts)}
        row |= {f"seq{v.number}": v.verdict for v in outcome.verdicts}
        row |= {f"fix{v.number}": v.verdict for v in fixed}
        rows.append(row)
    return pd.DataFrame(rows)


def runs_share(studies: pd.DataFrame) -> str:
    """The runs trained over the fixed design's: mean (its Monte Carlo SE) and 10th-90th
    percentiles over the studies, what `sweeper plan`'s expected-runs line estimates."""
    share = studies["runs"] / studies["runs_fixed"]
    low, high = np.percentile(share, [10, 90])
    return (f"{share.mean():.1%} of the fixed design's (SE {share.std(ddof=1) / np.sqrt(len(share)):.1%}; "
            f"10-90 %: {low:.1%}-{high:.1%})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=400)
    parser.add_argument("--first", type=int, default=SequentialSpec().first)
    parser.add_argument("--step", type=int, default=SequentialSpec().step)
    parser.add_argument("--maximum", type=int, default=SequentialSpec().maximum)
    parser.add_argument("--futility", type=float, default=SequentialSpec().futility)
    parser.add_argument("--run-sd", type=float, default=0.5)
    parser.add_argument("--parts-rule", choices=PART_RULES, default=VerdictConfig().parts)
    parser.add_argument("--effect", type=float, nargs="*", default=[],
                        help="also: studies whose every two-arm comparison claims this many points "
                             "(verdict_simulation.uniform_effects), `sweeper plan`'s cost model's world")
    args = parser.parse_args()
    config = VerdictConfig(parts=args.parts_rule)
    design = SequentialSpec(first=args.first, step=args.step, maximum=args.maximum, futility=args.futility)
    print(f"design: looks at {design.looks()} replicates per configuration, alpha {design.alpha}, "
          f"futility below {design.futility:.0%} conditional power; parts {config.parts}; {args.studies} studies "
          "per scenario")
    started = time.perf_counter()

    def one_group(seed: int, **effects) -> pd.DataFrame:
        """`args.studies` studies of one 610m @ 42k group with these planted effects, both designs."""
        scenario = Scenario(groups=GROUPS[:1], run_sd=args.run_sd, replicates=design.maximum, rates=4, **effects)
        return simulate_designs(scenario, design, args.studies, seed=seed, config=config)

    null = one_group(seed=1)
    false = pd.DataFrame({f"finding {f}": [(null[f"{d}{f}"] != "cannot tell").mean() * 100 for d in ("seq", "fix")]
                          for f in FINDINGS}, index=["sequential", "fixed at maximum"])
    print(f"\nnull (equal objectives, run SD {args.run_sd:g}): false verdicts over all looks, %")
    print(false.round(1).to_string())
    print(f"runs trained: {runs_share(null)}")
    paper = one_group(seed=2, effects=PAPER_EFFECTS)
    power = pd.DataFrame({f"finding {f}": [(paper[f"{d}{f}"] == "supports").mean() * 100 for d in ("seq", "fix")]
                          for f in PAPER_CLAIMS}, index=["sequential", "fixed at maximum"])
    print("\nthe paper's 610m effects: power ('supports'), %")
    print(power.round(1).to_string())
    print(f"runs trained: {runs_share(paper)} (looks: mean {paper['looks'].mean():.2f})")
    for seed, effect in enumerate(args.effect, start=3):
        uniform = one_group(seed=seed, effects=uniform_effects(effect))
        print(f"\nevery two-arm comparison at an effect of {effect:g} (points): runs trained: {runs_share(uniform)}")
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
