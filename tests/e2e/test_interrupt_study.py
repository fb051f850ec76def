"""SIGINT to a study's driver on a real local Ray cluster: it stops, keeps what finished, says so
in one line and exits 130, at any stage; a rerun then records every planned trial once."""
from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, table_dir

from conftest import ROOT, run_sweeper
from test_resume import finished_output, raw_trials, start_sweeper, wait_for

pytestmark = pytest.mark.e2e
SPEC = ROOT / "tests" / "specs" / "resume.yaml"


def interrupted(output: str, returncode: int, spec: Path = SPEC) -> int:
    """The number of trials the one line says were recorded; fails on anything else a researcher
    should not see at an interrupt."""
    assert returncode == 130, output[-4000:]
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output[-4000:]
    assert "Tuner.restore" not in output and "[study] finished" not in output, output[-4000:]
    lines = re.findall(r"^interrupted: (\d+) of (\d+) trials recorded; `sweeper run (\S+)` resumes$", output, re.M)
    assert len(lines) == 1 and lines[0][2] == str(spec), output[-4000:]
    return int(lines[0][0])


def test_sigint_during_finetuning_records_what_finished_and_a_rerun_completes(ray_head, tmp_path):
    study_dir = tmp_path / "study"
    plan = plan_study(load_study(SPEC).spec)
    table = Path(table_dir(StudyLayout(str(study_dir)), TRIALS))
    driver = start_sweeper("run", str(SPEC), "--storage", str(study_dir), address=ray_head[0])
    wait_for(lambda: list(table.rglob("part-*.parquet")) if table.exists() else None,
             timeout=300, what="the first batch of trial rows", process=driver)
    driver.send_signal(signal.SIGINT)
    recorded = interrupted(finished_output(driver, 120, ray_head[0]), driver.returncode)
    rows = raw_trials(study_dir)
    assert 0 < recorded == len(rows) < len(plan.trials), "the line counts the rows the store holds"

    rerun = run_sweeper("run", str(SPEC), "--storage", str(study_dir), address=ray_head[0])
    assert rerun.returncode == 0, rerun.stdout[-4000:] + rerun.stderr[-3000:]
    assert f"{recorded} already recorded" in rerun.stdout
    after = raw_trials(study_dir)
    assert sorted(after["trial_key"]) == sorted(t.trial_key for t in plan.trials), "every planned trial once"


def test_sigint_during_task_preparation_prints_no_traceback(ray_head, tmp_path):
    study_dir = tmp_path / "study"
    driver = start_sweeper("run", str(SPEC), "--storage", str(study_dir), address=ray_head[0])
    wait_for(lambda: (study_dir / "cache" / "tasks").exists(), timeout=300, what="task preparation",
             process=driver, poll_s=0.05)
    driver.send_signal(signal.SIGINT)
    assert interrupted(finished_output(driver, 120, ray_head[0]), driver.returncode) == 0


def test_an_optuna_search_interrupted_in_its_startup_draws_resumes_without_repeating_a_point(ray_head, tmp_path):
    """Every sample of a cell is a start-up (random) draw here: a resumed sampler seeded as a fresh
    cell's would draw the points of the samples recorded before the interrupt again."""
    spec = tmp_path / "optuna.yaml"
    # resume.yaml's study (trials long enough that the interrupt comes with samples still to run)
    # searched by Optuna: 2 cells x 4 samples x 2 seeds, every sample a start-up draw.
    spec.write_text(SPEC.read_text().replace("study: resume", "study: optuna-resume")
                    .replace("{objective: mlm, mask_ratio: [0.4]}", "{objective: mlm, mask_ratio: [0.4], "
                                                                    "checkpoint_steps: [10]}")
                    .replace("  tasks: [wordnet-supersense-cls, wordnet-supersense-tag]",
                             "  tasks: [wordnet-supersense-cls]")
                    .replace("  learning_rates: [0.001, 0.003, 10000.0]   # the last one diverges\n",
                             "  search: optuna\n  optuna: {samples: 4, lr_min: 0.0001, lr_max: 0.01, "
                             "startup_samples: 4}\n")
                    .replace("seeds: [0, 1, 2, 3]", "seeds: [0, 1]"))
    study_dir = tmp_path / "study"
    planned = plan_study(load_study(spec).spec).trials
    table = Path(table_dir(StudyLayout(str(study_dir)), TRIALS))
    driver = start_sweeper("run", str(spec), "--storage", str(study_dir), address=ray_head[0])
    wait_for(lambda: list(table.rglob("part-*.parquet")) if table.exists() else None,
             timeout=300, what="the first sample's rows", process=driver)
    driver.send_signal(signal.SIGINT)
    recorded = interrupted(finished_output(driver, 120, ray_head[0]), driver.returncode, spec)
    assert 0 < recorded < len(planned)

    rerun = run_sweeper("run", str(spec), "--storage", str(study_dir), address=ray_head[0])
    assert rerun.returncode == 0, rerun.stdout[-4000:] + rerun.stderr[-3000:]
    rows = raw_trials(study_dir)
    assert sorted(rows["trial_key"]) == sorted(t.trial_key for t in planned)
    samples = rows.groupby(["checkpoint_id", "task", "sample"])["learning_rate"].agg(set)
    assert (samples.map(len) == 1).all(), "a sample's seeds share its point"
    points = samples.map(lambda rates: next(iter(rates))).groupby(level=["checkpoint_id", "task"])
    assert (points.nunique() == points.size()).all(), samples
