"""Tune's idle trial worker and a pretraining run that needs its resources, on a real local Ray
cluster (sweeper.run.idle_workers)."""
from __future__ import annotations

import os
import threading
import time

import pytest
from ray.tune.search import Searcher

from sweeper.run.idle_workers import IdleWorkers, IdleWorkerScheduler
from sweeper.run.pipeline import Pipeline
from sweeper.run.search import StoreRecordSearcher

from test_preemption_on_ray import SpotNodes

CONTENDER_WAIT_S = 20
"""How long the run's stand-in may wait for the node's one `pretrain_node` after the first trial
ended: it starts in about a second once that resource is free."""


EVENTS = {"first done": threading.Event(), "released": threading.Event()}
"""The test's driver-side signals, module-level: Tune pickles its searcher, and a class that
closed over an event would not pickle."""


class OneThenWait(StoreRecordSearcher):
    """Makes a trial, then waits (with the grid's searchers' answer, as they wait for a
    checkpoint) until the test releases it, then makes one more."""

    def __init__(self, idle_workers: IdleWorkers):
        super().__init__(metric="score", mode="max")
        self.made, self.idle_workers = 0, idle_workers

    def suggest(self, trial_id):
        if self.made == 1 and not EVENTS["released"].is_set():
            return self.waiting()
        if self.made == 2:
            return Searcher.FINISHED
        self.made += 1
        return {"number": self.made}

    def on_trial_complete(self, trial_id, result=None, error=False):
        EVENTS["first done"].set()


class Training(Pipeline):
    """A pipeline whose pretraining is under way (the grid's view of it: `training`)."""

    training = True


@pytest.mark.parametrize("training", [True, False], ids=["pretraining", "done"])
def test_an_idle_trial_worker_leaves_its_resources_to_pretraining(ray_head, tmp_path, training):
    """One spot node with one `pretrain_node`, which trials and a pretraining run's stand-in (a
    Ray task) both need. The searcher makes a trial, then waits (for a checkpoint, as the grid's
    searchers wait for pretraining) until the stand-in has had its chance. While pretraining
    trains, Tune's idle worker is stopped and the stand-in runs at once; the next trial starts a
    fresh worker. Once pretraining is done, Tune keeps its idle worker for the next trial (same
    process) and the stand-in waits: the deadlock the release prevents."""
    import ray
    from ray import tune

    first_done, released = EVENTS["first done"], EVENTS["released"]
    first_done.clear(), released.clear()
    contender: dict = {}

    def trainable(config):  # local: Tune ships it by value (the workers cannot import this module)
        tune.report({"score": 1.0, "pid": os.getpid()})

    def stand_in():
        first_done.wait(timeout=300)
        began = time.time()
        ref = ray.remote(lambda: "ran").options(num_cpus=0, resources={"pretrain_node": 1}).remote()
        try:
            contender["result"] = ray.get(ref, timeout=CONTENDER_WAIT_S)
        except ray.exceptions.GetTimeoutError:
            ray.cancel(ref, force=True)
            contender["result"] = "waited"
        contender["seconds"] = time.time() - began
        released.set()

    idle_workers = IdleWorkers(Training() if training else Pipeline())
    ray.init(address=ray_head[0], log_to_driver=False)
    with SpotNodes(ray_head[0]) as spot:
        try:
            spot.start()
            thread = threading.Thread(target=stand_in, daemon=True)
            thread.start()
            results = tune.Tuner(
                tune.with_resources(trainable, {"cpu": 0, "pretrain_node": 1}),
                tune_config=tune.TuneConfig(search_alg=OneThenWait(idle_workers), num_samples=2, reuse_actors=True,
                                            scheduler=IdleWorkerScheduler(idle_workers)),
                run_config=tune.RunConfig(storage_path=str(tmp_path / "tune"), verbose=0),
            ).fit()
            thread.join(timeout=CONTENDER_WAIT_S + 60)
        finally:
            ray.shutdown()
    pids = [result.metrics["pid"] for result in results]
    assert len(pids) == 2 and not results.errors, results.errors
    print(f"training={training}: the stand-in {contender['result']} after {contender['seconds']:.1f} s; "
          f"trial processes {pids}")
    if training:
        assert contender["result"] == "ran", contender
        assert pids[0] != pids[1], "a fresh worker for the trial made after the release"
    else:
        assert contender["result"] == "waited", contender
        assert pids[0] == pids[1], "Tune's idle worker reused"
