"""Preemption notices on a real local Ray cluster: a local-mode run told by SIGTERM saves a resume
state at the next step boundary, stops, and is relaunched from that step, counted apart from
failures (trainables.preemption, sweeper.run.train_grid)."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from sweeper.store import storage
from sweeper.store.layout import RunLayout

from conftest import ROOT, run_sweeper
from in_process_run import trained_in_process
from test_resume import finished_output, start_sweeper, wait_for

pytestmark = pytest.mark.e2e
SPECS = ROOT / "tests" / "specs"
RUN = "tiny-clm-30-mlm40-60"
PREEMPTIONS = 5


def test_five_preemptions_with_one_failure_allowed_finish_as_the_undisturbed_run(ray_head, tmp_path):
    """SIGTERM to the training process five times (each once it has trained a step past where it
    last started) with `max_failures: 1`: every notice is a resume state at the step it was seen
    (between the periodic ones, `save_every: 10`), the run finishes, and its weights and loss log
    are those of the same run trained without a stop."""
    study_dir = tmp_path / "study"
    spec = tmp_path / "preemption.yaml"
    spec.write_text((SPECS / "worker_kill.yaml").read_text()
                    + "resources: {pretraining_workers: 0, max_failures: 1}\n")
    run_dir = str(study_dir / "pretraining" / RUN)
    driver = start_sweeper("run", str(spec), "--storage", str(study_dir), address=ray_head[0])
    started_from, stops = 0, []
    try:
        for _ in range(PREEMPTIONS):
            def training(since=started_from):
                progress = storage.read_json(storage.join(run_dir, "progress.json"))
                return progress if progress and progress["started_from"] == since \
                    and progress["step"] > since and progress["step"] < 55 else None
            progress = wait_for(training, timeout=300, what=f"training on from step {started_from}",
                                process=driver, poll_s=0.05)
            os.kill(progress["pid"], signal.SIGTERM)
            notices = wait_for(lambda n=len(stops): RunLayout(run_dir).interruptions()[n:], timeout=120,
                               what="the notice's resume state", process=driver, poll_s=0.05)
            started_from = notices[0]["step"]
            stops.append(started_from)
    finally:
        output = finished_output(driver, 900, ray_head[0], run_dir)
    assert driver.returncode == 0, output[-5000:]
    events = RunLayout(run_dir).interruptions()
    assert [e["kind"] for e in events] == ["preemption"] * PREEMPTIONS, events
    assert [e["step"] for e in events] == stops and stops == sorted(stops), events
    assert any(step % 10 for step in stops), f"every notice fell on a periodic checkpoint: {stops}"
    assert f"preemption {PREEMPTIONS} of 20: resources.max_preemptions" in output, output[-5000:]
    final = storage.read_json(storage.join(run_dir, "progress.json"))
    assert final["step"] == 60 and final["started_from"] == stops[-1], final

    status = run_sweeper("status", str(study_dir), address=ray_head[0], timeout=300)
    assert f"interrupted {RUN}: {PREEMPTIONS} preemptions, 0 failures" in status.stdout, status.stdout

    reference = tmp_path / "reference"
    trained_in_process(spec, str(study_dir), str(reference), ray_head[0])
    ours = load_file(Path(run_dir) / "step-60" / "model.safetensors")
    theirs = load_file(reference / "pretraining" / RUN / "step-60" / "model.safetensors")
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[name], theirs[name]) for name in ours), "weights differ from the undisturbed run's"
    log = [(r["step"], r["loss"]) for r in storage.read_json(storage.join(run_dir, "step-60", "train_log.json"))]
    assert log == [(r["step"], r["loss"]) for r in storage.read_json(
        str(reference / "pretraining" / RUN / "step-60" / "train_log.json"))]
