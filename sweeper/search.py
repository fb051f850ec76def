"""Optuna mode: one TPE search over the learning rate per (checkpoint, task) cell, all cells of a
shard multiplexed into one Tuner run.

Each cell has its own `Repeater(OptunaSearch)`: a suggested learning rate is run once per seed
and Optuna is told the seed-averaged score (`OptunaSearch` cannot take `tune.grid_search`, so the
grid over cells lives here instead). Within a cell, samples run one after another (the seeds of
a sample in parallel) so every TPE proposal sees the results before it; parallelism comes from
running many cells at once. Samples already recorded in the store are fed back to the cell's
sampler on resume (`add_evaluated_point`), so a resumed search continues, not restarts.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from ray import tune
from ray.tune.search import Repeater, Searcher
from ray.tune.search.optuna import OptunaSearch

SEARCH_METRIC = "search_score"


def search_score(result: dict) -> float:
    """What the search maximises: the validation score, and 0 (the worst) for a diverged trial,
    so a learning rate that blows up is avoided rather than ignored."""
    score = result.get("validation_score")
    return float(score) if score is not None and math.isfinite(score) else 0.0


@dataclass
class CellSearch:
    """What one cell still has to do."""

    samples_total: int
    seeds: int
    first_sample: int
    """Samples before this one are recorded already."""
    evaluated: list[tuple[float, float]] = field(default_factory=list)
    """(learning rate, seed-averaged search score) of the recorded samples."""
    issued: int = 0
    completed_groups: int = 0

    @property
    def trials_left(self) -> int:
        return (self.samples_total - self.first_sample) * self.seeds - self.issued


class Gate:
    """Whether a trial's checkpoint can be fine-tuned yet, while pretraining runs beside the grid.

    `ready(trial)` is True (go), False (not yet) or None (never: its run failed); `poll()` lets
    the pretraining scheduler record finished runs and launch the next ones. Without a
    scheduler every checkpoint is ready."""

    def __init__(self, scheduler=None, poll_every_s: float = 2.0):
        self.scheduler, self.poll_every_s, self.last_poll = scheduler, poll_every_s, 0.0

    def poll(self) -> None:
        if self.scheduler is not None and time.time() - self.last_poll >= self.poll_every_s:
            self.last_poll = time.time()
            self.scheduler.poll()

    def ready(self, trial) -> bool | None:
        if self.scheduler is None:
            return True
        run, step = trial.checkpoint.run, trial.checkpoint.step
        if self.scheduler.checkpoint_ready(run, step):
            return True
        return None if self.scheduler.blocked(run) else False


class GridSearcher(Searcher):
    """Hands out a grid shard's trials in plan order, each as soon as its checkpoint exists, so
    fine-tuning fills in while pretraining still runs (the data-efficiency checkpoints first)."""

    def __init__(self, trials: list, gate: Gate):
        super().__init__(metric=SEARCH_METRIC, mode="max")
        self.trials, self.gate = trials, gate
        self.pending = list(range(len(trials)))

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True

    def suggest(self, trial_id: str):
        self.gate.poll()
        for index in list(self.pending):
            state = self.gate.ready(self.trials[index])
            if state is None:  # its run failed: never runnable in this call
                self.pending.remove(index)
            elif state:
                self.pending.remove(index)
                return {"trial_index": index}
        return None if self.pending else Searcher.FINISHED

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        self.gate.poll()


class CellSearcher(Searcher):
    def __init__(self, cells: list[CellSearch], lr_min: float, lr_max: float, seed: int, startup_samples: int,
                 checkpoints: list | None = None, gate: Gate | None = None):
        super().__init__(metric=SEARCH_METRIC, mode="max")
        self.checkpoints, self.gate = checkpoints, gate or Gate()
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.cells = cells
        self.searchers = []
        for index, cell in enumerate(cells):
            sampler = optuna.samplers.TPESampler(seed=seed * 1_000_003 + index, n_startup_trials=startup_samples)
            inner = OptunaSearch(space={"learning_rate": tune.loguniform(lr_min, lr_max)}, metric=SEARCH_METRIC,
                                 mode="max", sampler=sampler)
            for lr, score in cell.evaluated:
                inner.add_evaluated_point({"learning_rate": lr}, score)
            self.searchers.append(Repeater(inner, repeat=cell.seeds, set_index=True))
        self.trial_sample: dict[str, tuple[int, int]] = {}
        self.reported: dict[tuple[int, int], int] = {}

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True  # fixed at construction

    def in_flight_samples(self, cell: CellSearch) -> int:
        return math.ceil(cell.issued / cell.seeds) - cell.completed_groups

    def suggest(self, trial_id: str):
        self.gate.poll()
        waiting = False
        for index, cell in enumerate(self.cells):
            if cell.trials_left == 0:
                continue
            state = self.gate.ready(self.checkpoints[index]) if self.checkpoints else True
            if state is None:  # the cell's run failed: nothing more to do for it
                cell.issued = (cell.samples_total - cell.first_sample) * cell.seeds
                continue
            if not state:
                waiting = True
                continue
            # A new sample only when the previous one is complete: TPE then sees every result.
            if cell.issued % cell.seeds == 0 and self.in_flight_samples(cell) > 0:
                waiting = True
                continue
            config = self.searchers[index].suggest(trial_id)
            sample = cell.first_sample + cell.issued // cell.seeds
            cell.issued += 1
            self.trial_sample[trial_id] = (index, sample)
            return {"cell": index, "sample": sample, "seed_index": config["__trial_index__"],
                    "learning_rate": config["learning_rate"]}
        return None if waiting else Searcher.FINISHED

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        index, sample = self.trial_sample.pop(trial_id)
        # A failed trial counts as the worst score, like a diverged one.
        reported = result if result and SEARCH_METRIC in result else {SEARCH_METRIC: 0.0}
        self.searchers[index].on_trial_complete(trial_id, reported)
        self.reported[(index, sample)] = self.reported.get((index, sample), 0) + 1
        if self.reported[(index, sample)] == self.cells[index].seeds:
            self.cells[index].completed_groups += 1
        self.gate.poll()
