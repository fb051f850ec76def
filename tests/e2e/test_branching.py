"""A branch (PretrainConfig.branch_from) trained for real: its weights are those of the same run
trained from scratch, byte for byte, and it logs nothing before its branch point; a study that
branches, its driver killed while trunk and branch train, resumes to the same weights."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import ROOT, nano_study, run_sweeper

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


STEPS = 600
SWITCH = 100
STUDY = nano_study("branching", f"    - {{objective: clm}}\n    - {{objective: clm-mlm, switch_steps: "
                                f"[{SWITCH}]}}\n", """\
  tasks: [wordnet-supersense-cls]
  learning_rates: [0.001]
  seeds: [0]
  batch_size: 8
  max_steps: 2
""").replace("  steps: 12\n", f"  steps: {STEPS}\n  save_every: 50\n").replace("  log_every: 6\n", "  log_every: 10\n")
"""A CLM trunk and its CLM -> MLM branch from step SWITCH: the trunk trains on long enough for the
branch to start beside it (a Ray worker's start) and the driver to be killed while both train."""


def table(study: Path, name: str):
    import pyarrow.dataset as ds

    return ds.dataset(study / "results" / name, format="parquet", partitioning="hive").to_table().to_pandas()


@pytest.mark.e2e
def test_a_killed_driver_resumes_trunk_and_branch_to_the_weights_of_runs_from_scratch(ray_head_two_cpus, tmp_path):
    """The driver is killed while the trunk and its branch both train; the rerun loses and
    duplicates nothing, and both runs end with the weights of the same study with
    `share_prefixes: false`."""
    address = ray_head_two_cpus[0]
    spec = tmp_path / "spec.yaml"
    spec.write_text(STUDY)
    study = tmp_path / "study"
    trunk, branch = f"nano-clm-{STEPS}", f"nano-clm-{SWITCH}-mlm40-{STEPS}"
    env = {**os.environ, "RAY_ADDRESS": address, "PYTHONUNBUFFERED": "1"}
    driver = subprocess.Popen([sys.executable, "-m", "sweeper", "run", str(spec), "--storage", str(study)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT,
                              start_new_session=True)
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(driver.stdout), daemon=True)
    reader.start()
    branch_progress = study / "pretraining" / branch / "progress.json"
    try:
        deadline = time.time() + 600
        while not branch_progress.exists() and driver.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert branch_progress.exists(), "".join(seen[-80:])
        status = run_sweeper("status", str(study), address=address).stdout
    finally:
        try:
            os.killpg(driver.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        driver.wait()
        reader.join(timeout=10)
        driver.stdout.close()
    assert json.loads(branch_progress.read_text())["started_from"] == SWITCH
    assert not (study / "pretraining" / trunk / f"step-{STEPS}").exists(), "killed before the trunk finished"
    assert f"{trunk} (step" in status, status  # both running when killed

    rerun = run_sweeper("run", str(spec), "--storage", str(study), address=address)
    assert rerun.returncode == 0, rerun.stdout[-5000:] + rerun.stderr[-3000:]
    rows = table(study, "pretraining")
    assert not rows.duplicated(["run_name", "step"]).any(), "each step recorded once"
    assert sorted(rows.loc[rows["run_name"] == branch, "step"]) == list(range(SWITCH + 10, STEPS + 1, 10))
    assert sorted(rows.loc[rows["run_name"] == trunk, "step"]) == list(range(10, STEPS + 1, 10))
    # the branch point's optimizer state is dropped once the branch is done; its weights stay
    point = study / "pretraining" / trunk / f"step-{SWITCH}"
    assert (point / "model.safetensors").exists() and not (point / "training_state.pt").exists()

    alone = tmp_path / "alone.yaml"
    alone.write_text(STUDY.replace("  save_every: 50\n", "  save_every: 50\n  share_prefixes: false\n"))
    scratch = tmp_path / "scratch"
    result = run_sweeper("run", str(alone), "--storage", str(scratch), address=address)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    for name in (trunk, branch):
        ours, theirs = (
            folder / "pretraining" / name / f"step-{STEPS}" / "model.safetensors" for folder in (study, scratch)
        )
        assert ours.read_bytes() == theirs.read_bytes(), name
    assert set(table(scratch, "trials")["status"]) == {"ok"} == set(table(study, "trials")["status"])
