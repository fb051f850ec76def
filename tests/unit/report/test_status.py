"""`sweeper status` (sweeper.report.status): what it says of runs not yet started."""
from __future__ import annotations

from conftest import ROOT

from sweeper.plan.load import load_study
from sweeper.report.status import study_status
from sweeper.store.layout import CHECKPOINT_MARKER, StudyLayout


def test_status_shows_a_pending_branch_waiting_for_its_trunk(tmp_path):
    study = load_study(ROOT / "search_spaces" / "smoke.yaml")
    layout = StudyLayout(str(tmp_path / "study"))
    assert "nano-clm-20-mlm40-40 (waits for nano-clm-40 to reach step 20)" in study_status(layout, study)["runs"]["pending"]
    point = tmp_path / "study" / "pretraining" / "nano-clm-40" / "step-20"
    point.mkdir(parents=True)
    (point / CHECKPOINT_MARKER).write_text("{}")
    assert "nano-clm-20-mlm40-40" in study_status(layout, study)["runs"]["pending"]
