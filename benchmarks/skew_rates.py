"""The verdicts' false-verdict rates under centred-exponential run differences (one arm with
occasional bad runs, no source effect: the worst case of tests/support/part_simulation.py), per
test, parts of a finding and runs per arm, fixed design: the table `paired.SKEWED_RATES` holds
and the report's skew note quotes (Holm's rule; one part is the same under both rules), then the
sequential design's; and the co-primary rule at its least favourable configuration (one null part
among two clearly true), which a co-primary part's note bounds by the one-part row. 20,000
simulated findings per cell, seed 7 (the calibration's draws).

    PYTHONPATH=. .venv/bin/python benchmarks/skew_rates.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS / "support"), str(TESTS / "unit" / "report")]
from test_skew_calibration import DESIGN, fixed_rate, sequential_rate

from part_simulation import least_favourable

from sweeper.report.statistics import CO_PRIMARY, HOLM, VerdictConfig


def main() -> None:
    started = time.process_time()
    for test in ("skew-sign", "skew-t", "t"):
        for parts, rule, effects in ((1, HOLM, None), (3, HOLM, None), (3, CO_PRIMARY, least_favourable(3))):
            config = VerdictConfig(test=test, parts=rule)
            rates = [(n, round(100 * fixed_rate("centred-exponential", parts, n, config, source_sd=0.0,
                                                effects=effects), 1)) for n in (3, 6, 9, 12, 15)]
            sequential = 100 * sequential_rate("centred-exponential", parts, config, source_sd=0.0, effects=effects)
            what = "one null part of 3" if effects is not None else f"{parts} null part(s)"
            print(f"{test}, {rule}, {what}: fixed {rates}; sequential {DESIGN.looks()} {sequential:.1f}")
    print(f"{time.process_time() - started:.0f} CPU-s")


if __name__ == "__main__":
    main()
