"""Replicates trained on a real local Ray head: split from tests/unit/plan/test_replicates.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study
from sweeper.run.train_grid import pretrain_config
from sweeper.store.layout import StudyLayout
from sweeper.store.results import PRETRAINING, read_table


@pytest.mark.e2e
def test_two_replicates_trained_for_real_write_different_weights(ray_head, wordpiece_dir, tmp_path):
    """Both replicates of one nano MLM run, 6 steps each in Train's local mode: two checkpoints,
    different weights (init and data), each marked with its own name; rows of the pretraining
    table say which replicate."""
    import ray
    import torch
    from safetensors.torch import load_file

    from sweeper.run.train_grid import fit_run, record_finished_run

    spec_file = tmp_path / "rep.yaml"
    spec_file.write_text(
        "study: rep\nmodel: {preset: nano}\ndata: {vocab_size: 512, seq_len: 32}\n"
        "pretraining:\n  steps: 6\n  global_batch_size: 4\n  warmup_steps: 1\n  decay_steps: 2\n  log_every: 3\n"
        "  replicates: 2\n  runs:\n    - {objective: mlm}\nfinetuning: {tasks: [wordnet-supersense-cls]}\n")
    spec = load_study(spec_file).spec
    plan = plan_study(spec)
    layout = StudyLayout(str(tmp_path / "study"))
    by_name = {run.name: run for run in plan.runs}
    assert list(by_name) == ["nano-mlm40-6", "nano-mlm40-6-rep1"]
    ray.init(address=ray_head[0], log_to_driver=False)
    try:
        for run in plan.runs:
            outcome = fit_run(pretrain_config(run, spec, layout, str(Path(wordpiece_dir).parent), by_name),
                              {"cpus_per_worker": 1, "gpus_per_worker": 0, "max_failures": 0})
            record_finished_run(spec.study, layout, run, outcome["wall_time_s"])
    finally:
        ray.shutdown()
    steps = [Path(layout.run(name).checkpoint(6)) for name in by_name]
    markers = [json.loads((step / "sweeper_checkpoint.json").read_text()) for step in steps]
    assert [m["run_name"] for m in markers] == list(by_name)
    weights = [load_file(step / "model.safetensors") for step in steps]
    assert weights[0].keys() == weights[1].keys()
    assert all(not torch.equal(weights[0][key], weights[1][key]) for key in weights[0] if "norm" not in key)
    assert markers[0]["loss"] != markers[1]["loss"]
    table = read_table(layout, PRETRAINING).to_pandas()
    assert sorted(set(zip(table["run_name"], table["replicate"]))) == [("nano-mlm40-6", 0), ("nano-mlm40-6-rep1", 1)]
