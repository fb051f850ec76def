"""Pipelining: a checkpoint's fine-tuning trials run while the run that wrote it still trains.

The run is a Ray Train worker group (of one), as on a cluster: Ray uploads its checkpoints file
by file, so the driver counts one complete once the files its marker lists have arrived, not when
a later checkpoint (here the final one) shows its upload ended."""
from __future__ import annotations

import json
from datetime import datetime, UTC

import pytest

from sweeper.store.layout import StudyLayout
from sweeper.store.results import read_trials

from conftest import ROOT, run_sweeper

pytestmark = pytest.mark.e2e

STEPS = 140
"""The run's steps (pipeline.yaml's 200 cut here; its pinned keys stay): step 10's two trials were
recorded 18 s after its checkpoint, while the run took 87 s for the next 190 steps (0.46 s a step,
load 9-11 on 2 cores): about 40 steps' worth, against 130 left to train here."""


def test_intermediate_checkpoint_trials_finish_before_its_run_does(ray_head_two_cpus, tmp_path):
    study, spec = tmp_path / "study", tmp_path / "pipeline.yaml"
    spec.write_text((ROOT / "tests" / "specs" / "pipeline.yaml").read_text().replace("  steps: 200\n",
                                                                                      f"  steps: {STEPS}\n"))
    result = run_sweeper("run", str(spec), "--storage", str(study), address=ray_head_two_cpus[0])
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    run_dir = study / "pretraining" / f"tiny-mlm40-{STEPS}"
    run_finished = datetime.fromtimestamp((run_dir / "sweeper_done.json").stat().st_mtime, tz=UTC)
    final_written = datetime.fromtimestamp((run_dir / f"step-{STEPS}" / "sweeper_checkpoint.json").stat().st_mtime,
                                           tz=UTC)
    trials = read_trials(StudyLayout(str(study))).to_pandas()
    early = trials[trials["checkpoint_id"] == f"tiny-mlm40-{STEPS}-10"]
    assert len(early) == 2 and (early["status"] == "ok").all()
    # Recorded (so started, and finished) before the run wrote its final checkpoint.
    assert (early["finished_at"] < final_written).all(), (early["finished_at"].tolist(), final_written)
    assert final_written <= run_finished
    late = trials[trials["checkpoint_id"] == f"tiny-mlm40-{STEPS}"]
    assert len(late) == 2 and (late["finished_at"] > final_written).all()
    log = json.loads((run_dir / f"step-{STEPS}" / "train_log.json").read_text())
    assert log[-1]["step"] == STEPS
    # The margin STEPS leaves: how long before the final checkpoint step 10's trials were done.
    print(f"step 10's trials done {(final_written - early['finished_at'].max()).total_seconds():.1f} s "
          f"before step {STEPS}'s checkpoint")
