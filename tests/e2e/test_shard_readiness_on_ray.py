"""Shard readiness on a real local Ray head: split from tests/unit/run/test_shard_readiness.py."""
from __future__ import annotations


import pytest
import ray
from ray import tune

from sweeper.contract.configs import ShardTrials
from sweeper.plan.study_plan import plan_study
from sweeper.run.pipeline import Pipeline
from sweeper.run.shards import grid_shards
from sweeper.store.layout import StudyLayout
from sweeper.store.results import read_trials

from conftest import worker_pythonpath

from test_shard_readiness import WrittenCheckpoints, one_task_spec


def instant_trainable(config: dict, trials) -> None:
    assert isinstance(trials, ShardTrials), "the shard stays on the driver: its workers get contract types"
    trial = trials.config_at(config)
    tune.report({"trial_key": trial.trial_key, "status": "ok", "validation_score": 50.0, "test_score": 50.0,
                 "train_loss": 1.0, "train_steps": 1, "wall_time_s": 0.0, "search_score": 50.0, "curve": []})


@pytest.mark.e2e
def test_the_last_shards_ready_checkpoint_is_recorded_before_any_trial_of_an_unwritten_one(ray_head, tmp_path,
                                                                                          capsys):
    from sweeper.run.tune_grid import run_shards

    spec = one_task_spec(trials_per_shard=2)
    *earlier, last = plan_study(spec).checkpoints[:3]
    trials = [t for t in plan_study(spec).trials if t.checkpoint in (*earlier, last)]
    layout = StudyLayout(str(tmp_path / "study"))
    shards = grid_shards(trials, layout, {(None, "wordnet-supersense-cls"): "unused"}, 2)
    assert len(shards) == 3  # the plan puts each checkpoint's 2 trials in a shard of its own
    last_keys = {t.trial_key for t in trials if t.checkpoint == last}

    def last_recorded() -> bool:
        try:
            return last_keys <= set(read_trials(layout).column("trial_key").to_pylist())
        except Exception:  # no table yet
            return False

    # The other checkpoints are written once the last one's trials are in the store; for a grid that
    # runs its shards in plan order, only after the deadline (and then the last one's trials run last).
    pretraining = WrittenCheckpoints(layout, later=earlier, until=last_recorded, deadline_s=180.0)
    pretraining.write(last)
    # Workers import this module by name to find the trainable.
    ray.init(
        address=ray_head[0], log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": worker_pythonpath(__file__)}}
    )
    try:
        pipeline = Pipeline(pretraining, [*earlier, last], poll_every_s=0.5)
        pipeline.start()
        tally = run_shards(spec, shards, layout, trainable_fn=instant_trainable, pipeline=pipeline)
        assert pipeline.wait() == []
    finally:
        ray.shutdown()
    assert tally == {"ok": 6}
    rows = read_trials(layout).to_pandas()
    assert len(rows) == 6 and set(rows["status"]) == {"ok"}
    first = rows[rows["checkpoint_id"] == last.checkpoint_id]
    rest = rows[rows["checkpoint_id"] != last.checkpoint_id]
    assert pretraining.written_at is not None
    assert (first["finished_at"] < pretraining.written_at).all(), (
        first["finished_at"].tolist(),
        pretraining.written_at,
    )
    assert (rest["finished_at"] > pretraining.written_at).all()
    assert first["finished_at"].max() < rest["finished_at"].min()
    assert "6/6 trials" in capsys.readouterr().out
