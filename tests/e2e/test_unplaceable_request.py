"""A trial asking for what no node of the cluster offers is refused within seconds of the start,
naming the request and the largest node, instead of waiting forever for Ray's autoscaler.

The driver starts its own local Ray here (no RAY_ADDRESS): a cluster whose nodes are all known.
`plan` does not check a spec that asks for a custom resource against this machine (such a spec
describes a cluster's node types), so the run's check is the one that speaks."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT

pytestmark = pytest.mark.e2e


def test_run_refuses_a_trial_no_node_can_host(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    started = time.time()
    run = subprocess.run([sys.executable, "-m", "sweeper", "run", str(ROOT / "tests" / "specs" / "resume.yaml"),
                          "resources.custom_resources_per_trial={trial_node: 1}", "--storage", str(tmp_path / "study")],
                         cwd=ROOT, env={**env, "RAY_AUTH_MODE": "disabled"}, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 2, run.stdout[-3000:] + run.stderr[-3000:]
    assert ("resources.custom_resources_per_trial.trial_node: a fine-tuning trial asks for 1 CPUs, 1 trial_node, "
            "and the largest node Ray reports offers ") in run.stderr, run.stderr
    assert ", 0 GPUs, 0 trial_node: it could never start" in run.stderr
    assert "[pretrain]" not in run.stdout and time.time() - started < 120
