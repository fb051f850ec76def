"""Power and pretraining runs of the sequential design against the fixed design at its maximum,
by the number of parts of a finding and the effect (in SDs of one replicate's difference), at the
part level: each part a paired comparison whose differences are normal with the planted mean,
read by the verdicts' test (`VerdictConfig()`) and rule (`--parts-rule`: co-primary, or holm), for
the fixed design by `statistics.part_codes`, for the sequential design by `sequential.decide_look`
(its boundaries, the rule over looks and futility), as tests/unit/report/test_sequential_calibration.py
does. docs/statistics.md quotes the table.

    PYTHONPATH=. .venv/bin/python benchmarks/parts_power.py [--studies 400] [--parts-rule holm]
        [--test t --every-count]

`--test t --every-count`: the rule before the skew-corrected test and the looks that can decide
(a look at every count of the spec, 3 to 15).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS / "support"), str(TESTS / "unit" / "report")]
from test_sequential_calibration import DESIGN, one_finding

from sweeper.report.statistics import PART_RULES, SUPPORTS, VerdictConfig, finding_codes, paired_test, part_codes
from sweeper.spec.sequential import SequentialSpec


class EveryCount(SequentialSpec):
    """The default design with a look at every count of the spec (3, 6, ..., 15)."""

    def looks(self) -> tuple[int, ...]:
        return self.counts()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=400)
    parser.add_argument("--test", default=VerdictConfig().test)
    parser.add_argument("--every-count", action="store_true", help="a look at every count from `first`")
    parser.add_argument("--parts-rule", choices=PART_RULES, default=VerdictConfig().parts)
    args = parser.parse_args()
    config = VerdictConfig(test=args.test, parts=args.parts_rule)
    design = EveryCount() if args.every_count else DESIGN
    started = time.process_time()
    print(f"test {args.test}, parts {args.parts_rule}, looks {design.looks()}, {args.studies} findings per cell; "
          "power = every part supports")
    print("| parts | effect (SD) | power, sequential | power, fixed at 15 | runs, sequential / fixed |")
    print("|---|---|---|---|---|")
    for parts in (1, 3):
        for effect in (0.5, 0.75, 1.0):
            rng = np.random.default_rng(11)
            hits = fixed = used = 0
            for _ in range(args.studies):
                state = rng.bit_generator.state
                decisions, runs = one_finding(rng, np.full(parts, effect), design, config)
                hits += all(decisions.get(f"part {i}") == SUPPORTS for i in range(parts))
                used += runs
                rng.bit_generator.state = state  # the same replicates, read once at the maximum
                d = rng.normal(effect, 1.0, (parts, DESIGN.maximum))
                above, below = paired_test(d, 0.0, config)
                fixed += int(finding_codes(part_codes(above, below, config.alpha, config.parts)[0])) == 1
            print(f"| {parts} | {effect:g} | {hits / args.studies:.1%} | {fixed / args.studies:.1%} | "
                  f"{used / (args.studies * parts * DESIGN.maximum):.0%} |", flush=True)
    print(f"{time.process_time() - started:.0f} CPU-s")


if __name__ == "__main__":
    main()
