"""The pretraining grid's bookkeeping (sweeper.run.train_grid.PretrainingGrid) that needs no run
started: a branch whose trunk failed before the branch step fails with the reason; one whose trunk
finished without its state there starts from a kept state, or from scratch, saying so; a lost node
is told from a failure and spends the preemptions' budget."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from conftest import ROOT

from sweeper.plan.branches import Branch
from sweeper.plan.load import load_study
from sweeper.run.train_grid import PretrainingGrid, budget_spent, interruption_kind
from sweeper.store import storage
from sweeper.store.layout import CHECKPOINT_MARKER, TRAINING_STATE, StudyLayout


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


def test_a_branch_of_a_trunk_finished_without_its_state_starts_from_a_kept_one_or_from_scratch(tmp_path, capsys):
    """Extending a study: the trunk finished before the study had this branch, so it kept no
    training state at the branch step. The latest state a finished run keeps within the steps it
    shares with the branch starts it (here the trunk's own at step 10 of 20); a state past the
    shared steps cannot; with none, it trains from scratch and says why."""
    study = load_study(ROOT / "search_spaces" / "smoke.yaml")
    runs = {run.name: run for run in study.plan.runs}
    trunk, branch = runs["nano-clm-40"], runs["nano-clm-20-mlm40-40"]
    layout = StudyLayout(str(tmp_path / "study"))
    storage.make_dirs(layout.run(trunk.name).root)
    storage.write_json(layout.run(trunk.name).done, {"run_key": trunk.run_key})
    for step, state in ((10, True), (30, True), (40, False)):
        folder = layout.checkpoint(trunk.name, step)
        storage.make_dirs(folder)
        storage.write_json(storage.join(folder, CHECKPOINT_MARKER), {"step": step})
        if state:
            (tmp_path / "study" / "pretraining" / trunk.name / Path(folder).name / TRAINING_STATE).write_bytes(b"state")
    grid = PretrainingGrid(study.spec, [trunk, branch], layout, corpus_dirs={})
    planned = grid.branches[branch.name]
    assert not grid.trunk_ready(planned)
    assert grid.kept_start(branch, planned) == Branch(branch.name, trunk.name, 10) == grid.branches[branch.name]
    assert ("nano-clm-20-mlm40-40 starts from nano-clm-40's kept training state at step 10 (its trunk nano-clm-40 "
            "finished without one at step 20; 10 shared steps trained again)") in capsys.readouterr().out
    storage.remove(storage.join(layout.checkpoint(trunk.name, 10), TRAINING_STATE))
    assert grid.kept_start(branch, planned) is None
    assert ("nano-clm-20-mlm40-40 trains from scratch: its trunk nano-clm-40 finished without a resumable checkpoint "
            "at step 20") in capsys.readouterr().out


def test_a_branch_does_not_wait_for_a_trunk_already_past_its_step(tmp_path, capsys):
    """The branch was added while its trunk trained (a killed driver, an extended spec): the
    trunk resumed past the branch step and will save nothing there, so the branch starts now; a
    trunk that has not reached the step yet is waited for."""
    study = load_study(ROOT / "search_spaces" / "smoke.yaml")
    runs = {run.name: run for run in study.plan.runs}
    trunk, branch = runs["nano-clm-40"], runs["nano-clm-20-mlm40-40"]
    layout = StudyLayout(str(tmp_path / "study"))
    grid = PretrainingGrid(study.spec, [trunk, branch], layout, corpus_dirs={})
    planned = grid.branches[branch.name]
    folder = layout.checkpoint(trunk.name, 10)
    storage.make_dirs(folder)
    storage.write_json(storage.join(folder, CHECKPOINT_MARKER), {"step": 10})
    assert not grid.trunk_past(planned)
    folder = layout.checkpoint(trunk.name, 30)
    storage.make_dirs(folder)
    storage.write_json(storage.join(folder, CHECKPOINT_MARKER), {"step": 30})
    grid.listings.clear()  # listed again now, not after the listing's 2 s
    assert grid.trunk_past(planned) and grid.kept_start(branch, planned) is None  # its trunk is not done
    assert ("trains from scratch: its trunk nano-clm-40 trained past that step without a resumable checkpoint at "
            "step 20") in capsys.readouterr().out


def test_a_lost_node_is_no_failure_and_spends_the_preemptions_budget():
    """Ray's NodeDiedError (the node's raylet unreachable) is a lost node; a worker that died on a
    node that lives on, or an exception of the run's, is a failure. Preemptions and lost nodes
    share `max_preemptions`; failures alone spend `max_failures`."""
    from ray.exceptions import NodeDiedError, RayTaskError, WorkerCrashedError

    assert interruption_kind(NodeDiedError("Task failed because the node it was running on is dead")) == "node lost"
    assert interruption_kind(WorkerCrashedError()) == "failure"
    assert interruption_kind(RayTaskError("fit_run", "Traceback ...", ValueError("bad batch"))) == "failure"
    assert interruption_kind(ValueError("bad batch")) == "failure"
    counts = Counter({"preemption": 3, "node lost": 2, "failure": 1})
    assert budget_spent(counts, "node lost") == ("max_preemptions", 5)
    assert budget_spent(counts, "preemption") == ("max_preemptions", 5)
    assert budget_spent(counts, "failure") == ("max_failures", 1)
