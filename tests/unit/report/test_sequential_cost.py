"""`sweeper plan` on a sequential plan (`pretraining.sequential`): the real command line, in a
child process, on the end-to-end test's spec (tests/test_sequential_e2e.py; no Ray) prints the
first look's runs and the sequential lines: the looks, and the first-look, expected and maximum
pretraining GPU-hours beside the fixed design at the maximum."""
from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import ROOT
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from test_sequential_study import planted_study  # noqa: E402 (the e2e study's spec, planned here)


def test_plan_prints_the_looks_and_the_expected_and_maximum_cost(tmp_path):
    spec, _, env = planted_study(tmp_path, effect=30.0)
    printed = subprocess.run([sys.executable, "-m", "sweeper", "plan", str(spec)], capture_output=True, text=True,
                             cwd=ROOT, env={**os.environ, **env})
    assert printed.returncode == 0, printed.stdout + printed.stderr
    out = printed.stdout
    assert "pretraining runs:       6 = 2 configurations x 3 replicates" in out, out
    assert "sequential replicates:  looks at 3, 4 runs per configuration (alpha 0.05 per finding" in out, out
    cost = next(line for line in out.splitlines() if "pretraining GPU-h: first look" in line)
    assert "; expected " in cost and "runs per configuration if its comparisons differ by 1 points" in cost, cost
    assert "(8 runs, the fixed design at 4)" in cost, cost
    expected = float(re.search(r"expected [0-9.]+ \(([0-9.]+) runs per configuration", cost).group(1))
    assert 3 <= expected <= 4, cost
