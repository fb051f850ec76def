"""End to end: a study run with command-line overrides records them. (`sweeper plan SPEC
--storage STUDY` against the finished smoke study is in test_smoke_study.py, with the other
readers of that study.)"""
from __future__ import annotations

import pytest

from conftest import run_sweeper
from sweeper.store.layout import StudyLayout
from sweeper.store.results import read_trials
from sweeper.store.spec_history import entries

pytestmark = pytest.mark.e2e

ONE_SEED = ["finetuning.seeds=[0]", "finetuning.tasks=[wordnet-supersense-cls]"]
"""The smoke study with one seed (and, to keep the test light, one task)."""


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

