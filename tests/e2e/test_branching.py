"""A branch (PretrainConfig.branch_from) trained for real: its weights are those of the same run
trained from scratch, byte for byte, and it logs nothing before its branch point."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from sweeper.plan.branches import prefix_branches
from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study
from sweeper.run.train_grid import pretrain_config
from sweeper.store.layout import StudyLayout

SPEC = ("study: branches\nmodel: {preset: nano}\ndata: {vocab_size: 512, seq_len: 32}\n"
        "pretraining:\n  steps: 12\n  global_batch_size: 4\n  warmup_steps: 2\n  decay_steps: 4\n  log_every: 1\n"
        "  runs:\n    - {objective: clm}\n    - {objective: clm-mlm, clm_fraction: [0.5]}\n"
        "    - {objective: mlm, steps: [12, 8]}\nfinetuning: {tasks: [wordnet-supersense-cls]}\n")
"""A CLM run, a CLM -> MLM run switching at half, an MLM run and its shorter twin."""


@pytest.mark.e2e
def test_branched_runs_train_the_weights_of_the_same_runs_from_scratch(ray_head, wordpiece_dir, tmp_path):
    import ray

    from sweeper.run.train_grid import fit_run

    spec_file = tmp_path / "branches.yaml"
    spec_file.write_text(SPEC)
    spec = load_study(spec_file).spec
    plan = plan_study(spec)
    by_name = {run.name: run for run in plan.runs}
    branches = prefix_branches(plan.runs)
    assert {b.run: (b.trunk, b.step) for b in branches.values()} == {
        "nano-clm-6-mlm40-12": ("nano-clm-12", 6), "nano-mlm40-8": ("nano-mlm40-12", 4)}
    corpus = str(Path(wordpiece_dir).parent)
    scratch, branched = StudyLayout(str(tmp_path / "scratch")), StudyLayout(str(tmp_path / "branched"))
    resources = {"cpus_per_worker": 1, "gpus_per_worker": 0, "max_failures": 0}
    ray.init(address=ray_head[0], log_to_driver=False)
    try:
        for run in plan.runs:  # trunks first (plan order): each branch's trunk step exists when it starts
            fit_run(pretrain_config(run, spec, scratch, corpus, by_name), resources)
            config = pretrain_config(run, spec, branched, corpus, by_name)
            steps = tuple(sorted(b.step for b in branches.values() if b.trunk == run.name))
            if branch := branches.get(run.name):
                config = replace(config, branch_from=branched.checkpoint(branch.trunk, branch.step),
                                 branch_step=branch.step)
            fit_run(replace(config, branch_steps=steps), resources)
    finally:
        ray.shutdown()
    for run in plan.runs:
        ours, theirs = (Path(layout.run(run.name).checkpoint(run.total_steps)) for layout in (branched, scratch))
        assert (ours / "model.safetensors").read_bytes() == (theirs / "model.safetensors").read_bytes(), run.name
        log = json.loads((ours / "train_log.json").read_text())
        first = branches[run.name].step + 1 if run.name in branches else 1
        assert [row["step"] for row in log] == list(range(first, run.total_steps + 1)), run.name
    # the trunk keeps its branch checkpoints whole (weights and training state)
    kept = Path(branched.run("nano-clm-12").checkpoint(6))
    assert (kept / "training_state.pt").exists() and (kept / "model.safetensors").exists()
