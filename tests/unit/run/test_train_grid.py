"""The pretraining grid's bookkeeping of branches (sweeper.run.train_grid.PretrainingGrid) that
needs no run started: a branch whose trunk failed before the branch step fails with the reason."""
from __future__ import annotations

import json

from conftest import ROOT

from sweeper.plan.load import load_study
from sweeper.run.train_grid import PretrainingGrid
from sweeper.store import storage
from sweeper.store.layout import StudyLayout


def test_a_branch_whose_trunk_failed_before_its_step_fails_with_the_reason(tmp_path):
    study = load_study(ROOT / "search_spaces" / "smoke.yaml")
    runs = {run.name: run for run in study.plan.runs}
    trunk, branch = runs["nano-clm-40"], runs["nano-clm-20-mlm40-40"]
    layout = StudyLayout(str(tmp_path / "study"))
    storage.make_dirs(layout.run(trunk.name).root)
    storage.write_json(layout.run(trunk.name).failed, {"run_key": trunk.run_key, "error": "boom", "failed_at": 0.0})
    grid = PretrainingGrid(study.spec, [trunk, branch], layout, corpus_dirs={})
    assert grid.failed == {trunk.name} and [run.name for run in grid.waiting] == [branch.name]
    grid.start()  # nothing to launch: the branch fails, no Ray task is started
    assert grid.failed == {trunk.name, branch.name} and grid.finished
    marker = json.loads((tmp_path / "study" / "pretraining" / branch.name / "sweeper_failed.json").read_text())
    assert marker["run_key"] == branch.run_key
    assert marker["error"] == "its trunk nano-clm-40 failed before step 20, where this run starts from it"
