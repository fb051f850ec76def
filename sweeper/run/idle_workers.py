"""No idle trial worker holds what pretraining waits for.

With `reuse_actors` (sweeper.run.tune_grid), Tune keeps a finished trial's worker, and the
resources it was placed with, for the next trial. While the searcher may still make trials it
keeps one such worker even when no trial waits for it (Ray 2.60's actor cache, `may_keep_one`),
and a fine-tuning searcher waits for pretraining to write checkpoints, sometimes for hours. A
pretraining run that needs that GPU (or custom resource) then waits for the worker, whose next
trial waits for the run: a deadlock, seen on a spot node that ran a run and trials one at a time.

So each time a shard's searcher answers "nothing yet" while pretraining trains, the idle workers
are stopped (a trial made later starts a fresh worker: about 2 s of Tune's, once). Once
pretraining is done, Tune's reuse is left as it is. While no trial is pending, running or paused,
Tune's controller does nothing but ask the searcher, once a second, so the searcher is where
this must happen; Tune hands its controller to schedulers only, so the shard's scheduler
(`IdleWorkerScheduler`, or sweeper.run.early_stopping's, built on it) passes it on.
"""
from __future__ import annotations

from ray.tune.schedulers import FIFOScheduler

from sweeper.run.pipeline import Pipeline
from sweeper.run.ray_compat import release_idle_actors


class IdleWorkers:
    """One shard's Tune controller, for its searcher to free the idle trial workers while it waits
    for `pipeline` (module docstring)."""

    def __init__(self, pipeline: Pipeline):
        self.pipeline, self.controller = pipeline, None

    def __getstate__(self) -> dict:
        # The Tuner pickles its searcher and scheduler before it starts; a copy frees nothing.
        return {**self.__dict__, "controller": None}

    def release(self) -> None:
        """Stop the idle workers if pretraining is under way (nothing before the first trial)."""
        if self.controller is not None and self.pipeline.training:
            release_idle_actors(self.controller)


class IdleWorkerScheduler(FIFOScheduler):
    """Tune's FIFO order, handing Tune's controller to `idle_workers` as trials are added."""

    def __init__(self, idle_workers: IdleWorkers | None = None):
        super().__init__()
        self.idle_workers = idle_workers

    def on_trial_add(self, tune_controller, trial) -> None:
        if self.idle_workers is not None:
            self.idle_workers.controller = tune_controller
