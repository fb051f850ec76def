"""End to end on a real local Ray cluster: job submission, Parquet store, checkpoints, resume.

Every test that reads the session's smoke study lies here, so the whole suite, which hands out
each e2e file to one worker (`--dist loadfile`), builds the study once."""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pyarrow.dataset as ds
import pytest
import yaml
import torch
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM

from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study
from report_text import build_report
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, read_table

from conftest import ROOT, run_sweeper
from datetime import UTC

importlib.import_module("trainables.model")  # registers the architecture with AutoModel

pytestmark = pytest.mark.e2e
SMOKE = ROOT / "search_spaces" / "smoke.yaml"


def test_submitted_smoke_study_writes_one_row_per_planned_trial(smoke_study):
    study_dir, output = smoke_study
    plan = plan_study(load_study(SMOKE).spec)
    table = ds.dataset(study_dir / "results" / "trials", format="parquet").to_table()
    assert table.num_rows == len(plan.trials) == 4 * 5 * 2
    assert sorted(table.column("trial_key").to_pylist()) == sorted(t.trial_key for t in plan.trials)
    assert set(table.column("status").to_pylist()) == {"ok"}
    scores = table.column("validation_score").to_pylist() + table.column("test_score").to_pylist()
    assert all(0.0 <= s <= 100.0 for s in scores)
    report = (study_dir / "report.md").read_text()
    assert all(task in report for task in load_study(SMOKE).spec.finetuning.tasks)
    rows = ds.dataset(study_dir / "results" / "trials", format="parquet", partitioning="hive").to_table().to_pandas()
    assert set(rows["task_category"]) == {"SC", "TC", "QA", "IR"}
    # One bi-encoder per (checkpoint, LR, seed), scored on both retrieval sets without retraining:
    # the evaluation-only set's rows carry the training trial's loss and steps, their own scores.
    cell = ["checkpoint_id", "learning_rate", "seed"]
    trained = rows[rows.task == "wordnet-usage-retrieval"].set_index(cell)
    scored = rows[rows.task == "wordnet-definition-retrieval"].set_index(cell).loc[trained.index]
    assert (scored["train_loss"] == trained["train_loss"]).all() and (
        scored["train_steps"] == trained["train_steps"]
    ).all()
    assert (scored["test_score"] != trained["test_score"]).any()
    # 32 Tune trials: the evaluation-only retrieval set is scored by the retrieval trials' models.
    assert "[finetune] 32/32 trials" in output
    # Pretraining table: the training log of every run.
    pre = (
        ds.dataset(study_dir / "results" / "pretraining", format="parquet", partitioning="hive").to_table().to_pandas()
    )
    assert set(pre["run_name"]) == {r.name for r in plan.runs}


def test_checkpoints_load_with_auto_classes_and_share_one_architecture(smoke_study):
    study_dir, _ = smoke_study
    runs = study_dir / "pretraining"
    mlm, clm = runs / "nano-mlm40-40" / "step-40", runs / "nano-clm-40" / "step-40"
    for path in (mlm, clm, runs / "nano-mlm40-40" / "step-20", runs / "nano-clm-20-mlm40-40" / "step-40"):
        assert (path / "model.safetensors").exists() and (path / "tokenizer.json").exists()
    mlm_config = AutoConfig.from_pretrained(mlm).to_dict()
    clm_config = AutoConfig.from_pretrained(clm).to_dict()
    assert {k: v for k, v in mlm_config.items() if k != "_name_or_path"} == \
           {k: v for k, v in clm_config.items() if k != "_name_or_path"}
    mlm_model, clm_model = AutoModelForMaskedLM.from_pretrained(mlm), AutoModelForMaskedLM.from_pretrained(clm)
    mlm_shapes = {k: v.shape for k, v in mlm_model.state_dict().items()}
    assert mlm_shapes == {k: v.shape for k, v in clm_model.state_dict().items()}
    assert not torch.equal(mlm_model.lm_head.weight, clm_model.lm_head.weight), "different training"
    # What differs is recorded with the checkpoint, not in the architecture: objective and phase.
    markers = {p: json.loads((p / "sweeper_checkpoint.json").read_text()) for p in (mlm, clm)}
    assert markers[mlm]["objective"] == "mlm" and markers[clm]["objective"] == "clm"
    backbone = AutoModel.from_pretrained(clm)
    ids = torch.randint(5, 1000, (1, 12))
    changed = ids.clone()
    changed[0, 6:] = 7
    # Fine-tuning view of a CLM checkpoint is bidirectional: the future changes the past (0.13 to 0.27 a position).
    assert not torch.allclose(backbone(ids).last_hidden_state[0, :6], backbone(changed).last_hidden_state[0, :6],
                              atol=1e-3)


def test_biphasic_run_switches_at_the_planned_step(smoke_study):
    study_dir, _ = smoke_study
    pre = (
        ds.dataset(study_dir / "results" / "pretraining", format="parquet", partitioning="hive").to_table().to_pandas()
    )
    biphasic = pre[pre["run_name"] == "nano-clm-20-mlm40-40"].sort_values("step")
    # It shares its CLM steps with nano-clm-40 (pretraining.share_prefixes, `plan -v`: from
    # nano-clm-40 at step 20): it logs only what it trains itself, from its switch on; the first
    # 20 steps are the trunk's rows. Rows summarise the steps up to `step`, in that step's phase.
    assert biphasic["step"].tolist() == [30, 40]
    assert biphasic["phase"].tolist() == ["mlm", "mlm"]
    trunk = pre[(pre["run_name"] == "nano-clm-40") & (pre["step"] <= 20)].sort_values("step")
    assert trunk["step"].tolist() == [10, 20] and set(trunk["phase"]) == {"clm"}
    marker = json.loads((study_dir / "pretraining" / "nano-clm-20-mlm40-40" / "step-40" /
                         "sweeper_checkpoint.json").read_text())
    assert marker["switch_step"] == 20


def test_rerunning_the_study_redoes_nothing(smoke_study, ray_jobs_head):
    study_dir, _ = smoke_study
    trials_before = sorted(p.name for p in (study_dir / "results" / "trials").rglob("*.parquet"))
    checkpoint = study_dir / "pretraining" / "nano-mlm40-40" / "step-40" / "model.safetensors"
    mtime = os.stat(checkpoint).st_mtime_ns
    result = run_sweeper("run", str(SMOKE), "--storage", str(study_dir), address=ray_jobs_head[0])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "3 already done, 0 failed before (--retry-failed reruns them), 0 to train" in result.stdout
    assert "32 already recorded, 0 blocked by failed runs, 0 to run" in result.stdout  # trials, not rows
    assert sorted(p.name for p in (study_dir / "results" / "trials").rglob("*.parquet")) == trials_before
    assert os.stat(checkpoint).st_mtime_ns == mtime


def test_a_checkpoint_step_added_to_a_finished_run_is_refused_naming_the_run_and_step(
    smoke_study, ray_jobs_head, tmp_path
):
    """It used to plan trials on `step-10`, which the finished run never wrote: each one failed."""
    study_dir, _ = smoke_study
    spec = yaml.safe_load(SMOKE.read_text())
    spec["pretraining"]["runs"][1]["checkpoint_steps"] = [10]  # the CLM run, finished at 40 steps
    edited = tmp_path / "smoke.yaml"
    edited.write_text(yaml.safe_dump(spec))
    trials_before = sorted(p.name for p in (study_dir / "results" / "trials").rglob("*.parquet"))
    result = run_sweeper("run", str(edited), "--storage", str(study_dir), address=ray_jobs_head[0])
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-3000:]
    assert (f"{edited}: pretraining.runs[1].checkpoint_steps: run nano-clm-40 has already finished without a "
            "checkpoint at step 10") in result.stderr
    assert "Traceback" not in result.stderr and not result.stdout.strip()
    assert sorted(p.name for p in (study_dir / "results" / "trials").rglob("*.parquet")) == trials_before


def test_a_damaged_part_and_markers_are_set_aside_and_the_rerun_redoes_exactly_their_trials(smoke_study, ray_jobs_head):
    """A truncated Parquet part, an empty done marker and an empty live.json: the rerun names and
    quarantines the part, records exactly its trials again, and retrains nothing."""
    from datetime import datetime

    import pyarrow.parquet as pq

    study_dir, _ = smoke_study
    planned = {t.trial_key for t in plan_study(load_study(SMOKE).spec).trials}
    (part,) = (study_dir / "results" / "trials" / "task=wordnet-supersense-cls").glob("part-*.parquet")
    lost = set(pq.read_table(part).column("trial_key").to_pylist())
    assert 0 < len(lost) < len(planned)
    part.write_bytes(part.read_bytes()[:part.stat().st_size // 2])
    done_marker = study_dir / "pretraining" / "nano-mlm40-40" / "sweeper_done.json"
    done_marker.write_text("")
    (study_dir / "live.json").write_text("")
    between = datetime.now(UTC)

    status = run_sweeper("status", str(study_dir), address=ray_jobs_head[0])
    assert status.returncode == 0 and part.name in status.stdout + status.stderr, status.stdout + status.stderr
    rerun = run_sweeper("run", str(SMOKE), "--storage", str(study_dir), address=ray_jobs_head[0])
    assert rerun.returncode == 0, rerun.stdout[-4000:] + rerun.stderr[-3000:]
    trained = [t for t in plan_study(load_study(SMOKE).spec).trials if t.task != "wordnet-definition-retrieval"]
    assert f"{len(trained)} trials: {len(trained) - len(lost)} already recorded" in rerun.stdout  # SC: a row a trial
    rows = read_table(StudyLayout(str(study_dir)), TRIALS).to_pandas()  # every row written, none deduplicated
    assert rows["trial_key"].is_unique and set(rows["trial_key"]) == planned
    assert set(rows.loc[rows["finished_at"] > between, "trial_key"]) == lost, "the lost trials, no more, no fewer"
    assert (study_dir / "quarantine" / "trials" / "task=wordnet-supersense-cls" / part.name).exists()
    assert json.loads(done_marker.read_text())["run_key"], "the run was marked done again"
    assert "## Damaged files" in (study_dir / "report.md").read_text()


def test_smoke_report_figures_and_values_match_the_parquet_rows(smoke_study):
    from matplotlib.image import imread

    study_dir, _ = smoke_study
    text, made = build_report(StudyLayout(str(study_dir)))
    expected = {"category_scores.png", "stability.png", "data_efficiency.png", "biphasic.png", "pretraining_loss.png"}
    assert {p.name for p in made} == expected  # one LR: no LR-sensitivity plot; no CPT runs
    for path in made:
        image = imread(path)
        assert path.stat().st_size > 10_000 and image.shape[0] > 200 and image.std() > 0.01, path
        assert f"(figures/{path.name})" in text
    assert "learning-rate sensitivity: fewer than two learning rates" in text
    # The comparisons the spec makes lead, with intervals; a task at chance is flagged.
    assert text.index("## The comparisons this study makes") < text.index("## Category averages")
    # Recompute the per-task table from the raw Parquet rows with pandas alone.
    rows = ds.dataset(study_dir / "results" / "trials", format="parquet", partitioning="hive").to_table().to_pandas()
    rows = rows[rows["status"] == "ok"]
    for (checkpoint, task), cell in rows.groupby(["checkpoint_id", "task"]):
        by_lr = cell.groupby("learning_rate").agg(val=("validation_score", "mean"), test=("test_score", "mean"))
        best_lr = by_lr["val"].idxmax()
        line = next(row for row in text.splitlines() if row.startswith(f"| {checkpoint} |") and f"{best_lr:.1e}" in row
                    and task in text.split(row)[0].rsplit("### ", 1)[1])
        assert f"| {by_lr.loc[best_lr, 'test']:.2f} |" in line, line


def test_plan_against_a_finished_study_lists_the_trials_a_new_seed_adds_and_nothing_else(smoke_study):
    """`sweeper plan SPEC --storage STUDY` says what an edit would do to a finished study without
    running anything."""
    study_dir, _ = smoke_study
    before = sorted(p.name for p in study_dir.rglob("*"))
    out = subprocess.run([sys.executable, "-m", "sweeper", "plan", "search_spaces/smoke.yaml",
                          "finetuning.seeds=[0,1,2]", "--storage", str(study_dir)],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("against the study at", 1)[1].splitlines()
    add = lines.index("  add:       20 trials, 0 pretraining runs")  # 4 checkpoints x 5 tasks x the new seed
    listed = lines[add + 1:add + 21]
    assert len(listed) == 20 and all(line.endswith(" / seed 2") for line in listed), listed
    assert lines[add + 21 :] == [
        "  keep:      40 trials, 3 pretraining runs",
        "  recompute: 0 trials, 0 pretraining runs",
        "  refuse:    0",
    ], lines
    assert sorted(p.name for p in study_dir.rglob("*")) == before  # nothing run, nothing written
