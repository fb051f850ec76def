"""End to end: a study run with command-line overrides records them, and `sweeper plan SPEC
--storage STUDY` says what an edit would do to a finished study without running anything."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT, run_sweeper
from sweeper.store.layout import StudyLayout
from sweeper.store.results import read_trials
from sweeper.store.spec_history import entries

pytestmark = pytest.mark.e2e

ONE_SEED = ["finetuning.seeds=[0]", "finetuning.tasks=[wordnet-supersense-cls]"]
"""The smoke study with one seed (and, to keep the test light, one task)."""


def plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sweeper", "plan", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


def test_a_one_seed_smoke_study_from_overrides_records_them(ray_head, tmp_path):
    study = tmp_path / "study"
    done = run_sweeper("run", "search_spaces/smoke.yaml", *ONE_SEED, "--storage", str(study), address=ray_head[0])
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    rows = read_trials(StudyLayout(str(study))).to_pandas()
    assert set(rows["seed"]) == {0} and set(rows["task"]) == {"wordnet-supersense-cls"} and len(rows) == 4
    (entry,) = entries(StudyLayout(str(study)))
    assert entry.plan["overrides"] == ONE_SEED
    assert "#   finetuning.seeds=[0]" in (study / "spec.yaml").read_text()
    status = run_sweeper("status", str(study), address=ray_head[0])
    assert f"last run with overrides: {' '.join(ONE_SEED)}" in status.stdout and "4 ok" in status.stdout, status.stdout


def test_plan_against_a_finished_study_lists_the_trials_a_new_seed_adds_and_nothing_else(smoke_study):
    study_dir, _ = smoke_study
    before = sorted(p.name for p in study_dir.rglob("*"))
    out = plan("search_spaces/smoke.yaml", "finetuning.seeds=[0,1,2]", "--storage", str(study_dir))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("against the study at", 1)[1].splitlines()
    add = lines.index("  add:       20 trials, 0 pretraining runs")  # 4 checkpoints x 5 tasks x the new seed
    listed = lines[add + 1:add + 21]
    assert len(listed) == 20 and all(line.endswith(" / seed 2") for line in listed), listed
    assert lines[add + 21:] == ["  keep:      40 trials, 3 pretraining runs", "  recompute: 0 trials, 0 pretraining runs",
                                "  refuse:    0"], lines
    assert sorted(p.name for p in study_dir.rglob("*")) == before  # nothing run, nothing written
