"""Optuna searches through moto's S3 server and on a real local Ray head: split from
tests/unit/run/test_optuna_search.py."""
from __future__ import annotations

import json
import math
from pathlib import Path

import optuna
import pandas as pd
import pyarrow.parquet as pq
import pytest

from conftest import nano_study
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, read_table, read_trials

from test_optuna_search import journal


def test_a_journal_in_an_object_store_is_a_local_copy_saved_back(object_store, tmp_path, monkeypatch):
    """An object store has no appends nor file locks: the driver works on a node-local copy and
    copies it back; the next driver (another node's cache) starts from the study's copy."""
    from sweeper.run.search import OptunaJournal
    from sweeper.store import storage

    root = storage.use_credentials(object_store("optuna-journal"))
    location = StudyLayout(root).optuna_journal
    monkeypatch.setenv("SWEEPER_CACHE", str(tmp_path / "node-a"))
    first = OptunaJournal(location, save_every_s=3600)
    study = optuna.create_study(study_name="c/t/k", storage=first.storage, direction="maximize")
    study.tell(study.ask({"x": optuna.distributions.FloatDistribution(0, 1)}), 1.0)
    first.save()  # within save_every_s: nothing uploaded yet
    assert not storage.exists(location)
    first.save(force=True)
    assert storage.exists(location) and first.local.is_relative_to(tmp_path / "node-a")

    monkeypatch.setenv("SWEEPER_CACHE", str(tmp_path / "node-b"))
    second = OptunaJournal(location)
    assert second.local != first.local
    trials = optuna.load_study(study_name="c/t/k", storage=second.storage).trials
    assert [(t.state.name, t.value) for t in trials] == [("COMPLETE", 1.0)]


E2E_SPEC = nano_study("optuna-joint", "    - {objective: mlm, checkpoint_steps: [6]}\n", """\
  tasks: [wordnet-supersense-cls]
  search: optuna
  optuna: {samples: 3, lr_min: 0.0001, lr_max: 0.01, startup_samples: 2}
  weight_decay: {uniform: [0.0, 0.2]}
  scheduler: {kind: asha, grace_period: 1}
  eval_every: 2
  seeds: [0, 1]
  batch_size: 8
  micro_batch_size: 8
  max_steps: 6
  max_length: 32
  max_train_examples: 64
  max_eval_examples: 32
""")


def check_studies_match_the_store(study: Path, rows: pd.DataFrame, samples: int) -> None:
    """Each cell's Optuna study holds one finished trial per recorded sample, at its point, told
    the seed-averaged search score of its rows (0 for a diverged or failed seed)."""
    storage = journal(study)
    names = optuna.get_all_study_names(storage)
    cells = rows.groupby(["checkpoint_id", "task"])
    assert len(names) == cells.ngroups
    for (checkpoint, task), cell in cells:
        name, = [n for n in names if n.startswith(f"{checkpoint}/{task}/")]
        trials = optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
        assert [t.state.name for t in trials] == ["COMPLETE"] * samples, name
        assert sorted(t.user_attrs["sample"] for t in trials) == list(range(samples))
        for trial in trials:
            recorded = cell[cell["sample"] == trial.user_attrs["sample"]]
            assert recorded["seed"].tolist() == [0, 1]
            # The same float64 values through the journal and the store, the same mean: approx's default.
            assert trial.params["learning_rate"] == pytest.approx(recorded["learning_rate"].iloc[0])
            assert trial.params["weight_decay"] == pytest.approx(recorded["weight_decay"].iloc[0])
            scores = recorded["validation_score"].map(lambda v: v if v is not None and math.isfinite(v) else 0.0)
            assert trial.value == pytest.approx(scores.mean())


def check_stopped_rows(study: Path, rows: pd.DataFrame, max_steps: int, eval_every: int) -> None:
    """Stopped rows have no test score and end at their last curve point, finished rows ran every
    step, and a sample is one point: its seeds all finished, or were all stopped."""
    stopped, ok = rows[rows["status"] == "stopped"], rows[rows["status"] == "ok"]
    assert stopped["test_score"].isna().all() and ok["test_score"].notna().all()
    assert set(stopped["train_steps"]) <= set(range(eval_every, max_steps, eval_every))
    assert set(ok["train_steps"]) == {max_steps}
    curves = pq.read_table(study / "results" / "eval_curves").to_pandas()
    for row in stopped.itertuples():  # the row's score is its last curve point
        mine = curves[curves["trial_key"] == row.trial_key].sort_values("step")
        assert mine["step"].iloc[-1] == row.train_steps and mine["validation_score"].iloc[-1] == row.validation_score
        assert mine["step"].tolist() == list(range(eval_every, row.train_steps + 1, eval_every))
    by_sample = rows.groupby(["checkpoint_id", "task", "sample"])["status"].agg(lambda s: "/".join(sorted(set(s))))
    assert set(by_sample) <= {"ok", "stopped"}, rows[["sample", "seed", "status", "train_steps"]]


@pytest.mark.e2e
def test_joint_optuna_search_with_asha_records_samples_extends_and_reads_back(ray_head, tmp_path):
    """A joint Optuna search (learning rate x weight decay) with ASHA through `sweeper run`: one row
    per cell x sample x seed, each cell's Optuna study matching the store; a fourth sample runs
    alone; the report's importances; stopped rows, the selection, `sweeper status` and a rerun.

    Merged here (#35) from test_an_optuna_search_with_asha_records_stopped_trials_and_a_rerun_adds_nothing
    (tests/test_early_stopping.py), which ran the same path (an Optuna search with ASHA through
    `sweeper run` on the test head) on a one-cell learning-rate search of 5 samples and checked
    what check_stopped_rows checks, that the best point is chosen among points that finished
    every seed, that `sweeper status` counts ok and stopped trials, and that a rerun adds nothing:
    all checked below on this search. That ASHA does stop a point's seeds together is shown on
    Tune itself by tests/e2e/test_early_stopping_on_ray.py."""
    from conftest import run_sweeper
    from sweeper.report import analysis

    spec, study = tmp_path / "joint.yaml", tmp_path / "study"
    spec.write_text(E2E_SPEC)
    first = run_sweeper("run", str(spec), "--storage", str(study), address=ray_head[0])
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-3000:]
    rows = read_trials(StudyLayout(str(study))).to_pandas()
    assert len(rows) == 2 * 3 * 2 == rows["trial_key"].nunique()  # cells x samples x seeds, one row each
    assert set(rows["search_mode"]) == {"optuna"} and set(rows["status"]) <= {"ok", "stopped"}
    per_sample = rows.groupby(["checkpoint_id", "task", "sample"])
    assert per_sample["learning_rate"].nunique().eq(1).all() and per_sample["weight_decay"].nunique().eq(1).all()
    assert all(sorted(seeds) == [0, 1] for _, seeds in per_sample["seed"])
    assert rows["learning_rate"].between(1e-4, 1e-2).all() and rows["weight_decay"].between(0.0, 0.2).all()
    assert (rows["params"].map(lambda p: json.loads(p)["weight_decay"]) == rows["weight_decay"]).all()
    assert rows.groupby(["checkpoint_id", "task"])["weight_decay"].nunique().eq(3).all(), "a joint search"
    stopped = rows[rows["status"] == "stopped"]
    assert (stopped["train_steps"] < 6).all() and stopped["validation_score"].notna().all()
    check_studies_match_the_store(study, rows, samples=3)

    # A fourth sample per cell: only it runs, each study goes on from its three, no row twice.
    more = tmp_path / "four.yaml"
    more.write_text(E2E_SPEC.replace("samples: 3", "samples: 4"))
    second = run_sweeper("run", str(more), "--storage", str(study), address=ray_head[0])
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-3000:]
    assert "12 already recorded, 0 blocked by failed runs, 4 to run" in second.stdout
    rows = read_trials(StudyLayout(str(study))).to_pandas()
    assert len(read_table(StudyLayout(str(study)), TRIALS)) == len(rows) == 16 == rows["trial_key"].nunique()
    assert len(pq.read_table(study / "results" / "trials")) == 16
    check_studies_match_the_store(study, rows, samples=4)
    report = (study / "report.md").read_text()
    assert "## Parameter importances" in report
    section = report.split("## Parameter importances")[1].split("\n## ")[0]
    assert "| task | objective | cells | learning_rate | weight_decay |" in section
    assert "| wordnet-supersense-cls | mlm | 2 |" in section

    check_stopped_rows(study, rows, max_steps=6, eval_every=2)
    ok = rows[rows["status"] == "ok"]
    best = analysis.best_params_table(rows)
    assert len(best) == 2 and (best["seeds"] == 2).all(), "selected among points that finished every seed"
    for chosen in best.itertuples():
        assert chosen.learning_rate in set(ok.loc[ok["checkpoint_id"] == chosen.checkpoint_id, "learning_rate"])
    status = run_sweeper("status", str(study), address=ray_head[0])
    stopped_count = len(rows) - len(ok)
    assert f"16 trials: {len(ok)} ok, {stopped_count} stopped, 0 running, 0 pending" in status.stdout, status.stdout
    again = run_sweeper("run", str(more), "--storage", str(study), address=ray_head[0])
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-3000:]
    assert "16 already recorded, 0 blocked by failed runs, 0 to run" in again.stdout
    assert len(read_table(StudyLayout(str(study)), TRIALS)) == 16
