"""The verdicts' false-verdict rates at full size: the table of docs/statistics.md ("Calibration").

tests/unit/report/test_verdict_calibration.py checks the same scenarios on fewer studies (what its
bound needs, in the quick tier's time); this runs each scenario on `--studies` (600 for the
documented table), prints the false verdicts per finding and checks them against the bound that
this many studies gives: 5 % plus 2.33 binomial standard errors. Two processes, fixed seeds: the same counts on every
machine (~2 minutes of two cores at 600).

    .venv/bin/python benchmarks/verdict_calibration.py [--studies 600] [--seed 250700994]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS / "support"), str(TESTS / "unit" / "report")]
from test_verdict_calibration import FALSE_RATE, SCENARIOS, bound, false_verdicts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=600, help="simulated studies per scenario")
    parser.add_argument("--seed", type=int, default=2507_00994)
    args = parser.parse_args()
    most = bound(args.studies)
    print(f"{args.studies} studies per scenario; at most {most} false verdicts per finding "
          f"({most / args.studies:.1%}: {FALSE_RATE:.0%} plus 2.33 binomial standard errors)")
    failed = []
    for name, (scenario, checked) in SCENARIOS.items():
        started = time.time()
        counts = false_verdicts(scenario, checked, args.seed, args.studies)
        total = counts.sum(axis=1)
        print(f"\n{name} ({time.time() - started:.0f} s): false verdicts per finding\n{counts}")
        failed += [f"{name}: finding {n} ({v})" for n, v in total.items() if v > most]
    print("\nover the bound: " + ("; ".join(failed) if failed else "none"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
