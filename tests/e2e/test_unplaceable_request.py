"""A trial asking more CPUs than any node of the joined cluster offers is refused within seconds,
naming the request and the largest node, instead of waiting forever for Ray's autoscaler."""
from __future__ import annotations

import time

import pytest

from conftest import ROOT, run_sweeper

pytestmark = pytest.mark.e2e


def test_run_refuses_a_trial_larger_than_every_node(ray_head, tmp_path):
    started = time.time()
    run = run_sweeper("run", str(ROOT / "tests" / "specs" / "resume.yaml"), "resources.cpus_per_trial=2",
                      "--storage", str(tmp_path / "study"), address=ray_head[0], timeout=300)
    assert run.returncode == 2, run.stdout[-3000:] + run.stderr[-3000:]
    assert ("resources.cpus_per_trial: a fine-tuning trial asks for 2 CPUs, and the largest node Ray reports "
            "offers 1 CPUs, 0 GPUs: it could never start") in run.stderr, run.stderr
    assert "[pretrain]" not in run.stdout and time.time() - started < 120
