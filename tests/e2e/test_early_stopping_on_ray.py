"""Early stopping on a real local Ray head: split from tests/unit/run/test_early_stopping.py."""
from __future__ import annotations

from pathlib import Path

import pytest
import ray
from ray import tune
from ray.tune.search import Searcher

from conftest import worker_pythonpath
from sweeper.plan.load import load_study
from sweeper.run.early_stopping import TIME_ATTR, make_scheduler
from sweeper.run.ray_compat import resume_held_trial
from sweeper.run.progress import ProgressLine
from sweeper.run.recording import FINAL, ResultsRecorder
from sweeper.run.search import SEARCH_METRIC
from sweeper.store.results import EVAL_CURVES, read_table, read_trials

from test_early_stopping import es_spec, smoke_shard


def curve_trainable(config):
    """Reports a curve whose level is the config's `level`, one seed 5 above it and the other 5
    below: low levels are the points to stop. With `started` (a path prefix), each seed says its
    worker runs (`<started>-<seed>`) and reports only once its sibling's runs too, seed 1 a
    second after seed 0. So whichever step 2 Tune's controller takes first, the other seed is
    already RUNNING there (Tune sets that before a trial's first `train` call) and has not
    reported it: the scheduler must hold the first and later resume it. A seed that did not wait
    for its sibling could reach step 2 while the sibling's actor was still starting (not yet
    RUNNING) on a loaded machine, and run through unheld."""
    import time

    offset = 5.0 if config["seed"] else -5.0
    if config.get("started"):
        Path(f"{config['started']}-{config['seed']}").touch()
        sibling = Path(f"{config['started']}-{1 - config['seed']}")
        while not sibling.exists():
            time.sleep(0.05)
        if config["seed"]:
            time.sleep(1.0)
    for step in (2, 4, 6):
        tune.report({"trial_key": "x", "learning_rate": 0.001, TIME_ATTR: step, "train_loss": 1.0,
                     "validation_score": config["level"] + offset + step,
                     SEARCH_METRIC: config["level"] + offset + step, FINAL: False})
    tune.report({"status": "ok", TIME_ATTR: 8, "validation_score": config["level"] + offset + 8.0, "test_score": 1.0,
                 SEARCH_METRIC: config["level"] + offset + 8.0, "curve": [], FINAL: True})


class ListSearcher(Searcher):
    """Hands out the two seeds of each point of `levels` together, a point once the previous
    one completed, and keeps the result Tune gives each trial: what Optuna's searcher is told."""

    def __init__(self, levels: list[float], started: str | None = None):
        """`started`: the first point's seeds are handed it (curve_trainable's hold)."""
        super().__init__(metric=SEARCH_METRIC, mode="max")
        self.levels, self.issued, self.completed, self.started = levels, 0, {}, started

    def suggest(self, trial_id):
        if self.issued == 2 * len(self.levels):
            return Searcher.FINISHED
        if self.issued >= len(self.completed) + 2 or (self.issued % 2 == 0 and self.issued > len(self.completed)):
            return None
        self.issued += 1
        index = self.issued - 1
        return {"trial_index": index, "level": self.levels[index // 2], "seed": index % 2,
                "started": self.started if index < 2 else None}

    def on_trial_complete(self, trial_id, result=None, error=False):
        self.completed[result["config/trial_index"]] = result


@pytest.mark.e2e
def test_tune_stops_a_points_seeds_together_and_hands_their_last_point_to_the_searcher_and_the_store(
        ray_head_two_cpus, tmp_path, monkeypatch):
    """On Tune's real controller: a seed that reaches a step before its point's other seed is held
    there and resumed through Tune's private API (sweeper.run.ray_compat.resume_held_trial, counted
    here and called through), so a Ray upgrade that breaks it fails this test."""
    from sweeper.run import early_stopping

    resumed = []

    def counted(tune_controller, trial):
        resumed.append(trial.trial_id)
        resume_held_trial(tune_controller, trial)

    monkeypatch.setattr(early_stopping, "resume_held_trial", counted)
    trials, layout, shard = smoke_shard(tmp_path, 8)
    ft = load_study(es_spec(tmp_path)).spec.finetuning
    searcher = ListSearcher([50.0, 60.0, 10.0, 70.0], started=str(tmp_path / "seed-started"))
    ray.init(
        address=ray_head_two_cpus[0],
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": worker_pythonpath(__file__)}},
    )
    try:
        recorder = ResultsRecorder("smoke", layout, shard, ProgressLine("finetune", 8, unit="trials"))
        tune.Tuner(tune.with_resources(curve_trainable, {"cpu": 1}), tune_config=tune.TuneConfig(
            search_alg=searcher, num_samples=8, reuse_actors=True, max_concurrent_trials=2,
            scheduler=make_scheduler(ft, cell_of=lambda config: "one cell", point_of=lambda config: config["level"])),
            run_config=tune.RunConfig(storage_path=str(tmp_path / "tune"), callbacks=[recorder], verbose=0)).fit()
    finally:
        ray.shutdown()
    rows = {row["trial_key"]: row for row in read_trials(layout).to_pylist()}
    statuses = [rows[t.trial_key]["status"] for t in trials]
    # Point 10 (seeds at 7 and 17 at step 2) is below the rung's cutoff: both its seeds stop there.
    assert statuses == ["ok"] * 4 + ["stopped"] * 2 + ["ok"] * 2, statuses
    for seed, trial in enumerate(trials[4:6]):
        stopped = rows[trial.trial_key]
        level = 10.0 + (5.0 if seed else -5.0) + 2
        assert stopped["validation_score"] == level and stopped["train_steps"] == 2 and stopped["test_score"] is None
        # The searcher is told the stopped seed's last curve point, as the store records it.
        assert searcher.completed[4 + seed][SEARCH_METRIC] == level
    assert searcher.completed[0][SEARCH_METRIC] == 53.0
    assert resumed, "no seed was held and resumed: the private path did not run"
    curves = read_table(layout, EVAL_CURVES).to_pandas()
    for trial in trials[4:6]:
        assert curves[curves["trial_key"] == trial.trial_key]["step"].tolist() == [2]
