"""`sweeper status` (sweeper.report.status): what it says of runs not yet started."""
from __future__ import annotations

from conftest import ROOT

from sweeper.plan.load import load_study
from sweeper.report.status import study_status
from sweeper.store.layout import CHECKPOINT_MARKER, StudyLayout


def test_status_shows_a_pending_branch_waiting_for_its_trunk(tmp_path):
    study = load_study(ROOT / "search_spaces" / "smoke.yaml")
    layout = StudyLayout(str(tmp_path / "study"))
    assert (
        "nano-clm-20-mlm40-40 (waits for nano-clm-40 to reach step 20)"
        in study_status(layout, study)["runs"]["pending"]
    )
    point = tmp_path / "study" / "pretraining" / "nano-clm-40" / "step-20"
    point.mkdir(parents=True)
    (point / CHECKPOINT_MARKER).write_text("{}")
    assert "nano-clm-20-mlm40-40" in study_status(layout, study)["runs"]["pending"]


def test_status_shows_the_running_drivers_eta(tmp_path, capsys):
    import json
    import os
    import socket
    import time

    from sweeper.report.status import print_status

    study = load_study(ROOT / "search_spaces" / "smoke.yaml")
    layout = StudyLayout(str(tmp_path / "study"))
    (tmp_path / "study").mkdir()
    beat = {"pid": os.getpid(), "host": socket.gethostname(), "running_trials": 2, "updated_at": time.time() - 30,
            "eta_s": 750.0, "stage": "finetune"}
    (tmp_path / "study" / "live.json").write_text(json.dumps(beat))
    eta = study_status(layout, study)["eta"]
    assert 715 <= eta["seconds_left"] <= 721 and eta["age_s"] >= 29  # the beat's estimate, less its age
    print_status(layout, study)
    assert "ETA: ~11m" in capsys.readouterr().out
    (tmp_path / "study" / "live.json").write_text(json.dumps({**beat, "eta_s": None}))
    print_status(layout, study)
    assert "ETA: not yet" in capsys.readouterr().out
    (tmp_path / "study" / "live.json").unlink()
    print_status(layout, study)
    assert "ETA: none" in capsys.readouterr().out



def test_status_counts_a_runs_preemptions_apart_from_its_failures(tmp_path, capsys):
    """interruptions.json (the loop's preemption notices, the driver's failures and lost nodes) as
    counts per run; a damaged one is named and read as none."""
    from sweeper.report.status import print_status

    study = load_study(ROOT / "search_spaces" / "smoke.yaml")
    layout = StudyLayout(str(tmp_path / "study"))
    run = layout.run("nano-clm-40")
    for kind in ("preemption", "failure", "node lost", "preemption"):
        run.record_interruption(kind, step=7)
    assert [e["kind"] for e in run.interruptions()] == ["preemption", "failure", "node lost", "preemption"]
    assert study_status(layout, study)["interrupted"] == {"nano-clm-40": {"preemption": 2, "failure": 1,
                                                                          "node lost": 1}}
    print_status(layout, study)
    assert "interrupted nano-clm-40: 2 preemptions, 1 failures, 1 lost nodes" in capsys.readouterr().out
    (tmp_path / "study" / "pretraining" / "nano-clm-40" / "interruptions.json").write_text('{"kind": 1}')
    status = study_status(layout, study)
    assert status["interrupted"] == {}
    assert any("interruptions.json" in location for location in status["damaged_markers"])


def test_status_counts_requeued_trials_apart_from_failed_ones(tmp_path, capsys):
    """trial_interruptions.json (fine-tuning trials run again after a preemption or a lost node,
    sweeper.run.recording) is a count of its own: no trial is failed, pending trials stay pending."""
    from sweeper.plan.study_plan import plan_study
    from sweeper.report.status import print_status
    from sweeper.run.recording import record_trial_interruption

    study = load_study(ROOT / "search_spaces" / "smoke.yaml")
    layout = StudyLayout(str(tmp_path / "study"))
    (tmp_path / "study").mkdir()
    trial = plan_study(study.spec).trials[0]
    for kind in ("preemption", "node lost", "preemption"):
        record_trial_interruption(layout, trial, kind, "Traceback ...\nThe actor died because its node has died.")
    status = study_status(layout, study)
    assert status["trial_interruptions"] == {"preemption": 2, "node lost": 1}
    assert status["trials"]["failed"] == 0 and status["trials"]["pending"] == status["trials"]["planned"]
    print_status(layout, study)
    assert "requeued trials: 2 after preemptions, 1 after lost nodes" in capsys.readouterr().out
    (tmp_path / "study" / "trial_interruptions.json").write_text('{"kind": 1}')
    status = study_status(layout, study)
    assert status["trial_interruptions"] == {}
    assert any("trial_interruptions.json" in location for location in status["damaged_markers"])
