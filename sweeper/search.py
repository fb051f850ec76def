"""What a shard's Tuner runs next: Tune searchers that hand out work as its checkpoint is written.

The work of a fine-tuning call waits in one `ReadyQueue`, by checkpoint; each shard's searcher
takes from it only the work of written checkpoints (`Gate`), so fine-tuning follows pretraining
whatever order the plan lists the checkpoints in.
- Grid: `GridSearcher` hands out the shard's share of trials, one Tune trial each.
- Optuna: one TPE search over the learning rate per (checkpoint, task) cell, the cells a shard
  takes multiplexed into its Tuner run by `CellSearcher`. Each cell has its own
  `Repeater(OptunaSearch)`: a suggested learning rate is run once per seed and Optuna is told the
  seed-averaged score (`OptunaSearch` cannot take `tune.grid_search`, so the grid over cells lives
  here instead). Within a cell, samples run one after another (the seeds of a sample in parallel)
  so every TPE proposal sees the results before it; parallelism comes from running many cells at
  once. Samples already recorded in the store are fed back to the cell's sampler on resume
  (`add_evaluated_point`), so a resumed search continues, not restarts.
"""
from __future__ import annotations

import math
import time
from collections import deque
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
    number: int = 0
    """The cell's position among the plan's cells (seeds its sampler)."""
    evaluated: list[tuple[float, float]] = field(default_factory=list)
    """(learning rate, seed-averaged search score) of the recorded samples."""
    issued: int = 0
    completed_groups: int = 0

    @property
    def trials_left(self) -> int:
        return (self.samples_total - self.first_sample) * self.seeds - self.issued


class Gate:
    """Whether a checkpoint can be fine-tuned yet, while pretraining runs beside the grid.

    `ready(checkpoint)` is True (go), False (not yet) or None (never: its run failed); `poll()`
    lets the pretraining scheduler record finished runs and launch the next ones. Without a
    scheduler every checkpoint is ready."""

    def __init__(self, scheduler=None, poll_every_s: float = 2.0):
        self.scheduler, self.poll_every_s, self.last_poll = scheduler, poll_every_s, 0.0

    def poll(self) -> None:
        if self.scheduler is not None and time.time() - self.last_poll >= self.poll_every_s:
            self.last_poll = time.time()
            self.scheduler.poll()

    def ready(self, checkpoint) -> bool | None:
        if self.scheduler is None:
            return True
        if self.scheduler.checkpoint_ready(checkpoint.run, checkpoint.step):
            return True
        return None if self.scheduler.blocked(checkpoint.run) else False


class ReadyQueue:
    """The work of one fine-tuning call that no shard has taken yet, by checkpoint, in plan order.

    Every shard of the call takes from the same queue, and only the work of written checkpoints:
    a checkpoint's trials run in the first shard with room once it is written, whatever shard the
    plan's order would have put them in, while the trials of checkpoints not yet written wait. An
    item is an index into the call's list of work (grid: trials; Optuna: (checkpoint, task) cells).
    Readiness is asked once per checkpoint, not per item: the paper's grid has 360 trials each."""

    def __init__(self, checkpoints: list):
        """`checkpoints[i]`: the checkpoint item i fine-tunes (the list is in plan order)."""
        self.by_checkpoint: dict[str, tuple[object, deque[int]]] = {}
        for index, checkpoint in enumerate(checkpoints):
            self.by_checkpoint.setdefault(checkpoint.checkpoint_id, (checkpoint, deque()))[1].append(index)

    def __len__(self) -> int:
        return sum(len(items) for _, items in self.by_checkpoint.values())

    def take(self, gate: Gate) -> int | None:
        """The next item of the first written checkpoint (None: no checkpoint with work left is
        written yet); the items of checkpoints that will never be written are dropped."""
        for checkpoint_id, (checkpoint, items) in list(self.by_checkpoint.items()):
            state = gate.ready(checkpoint)
            if state is None:  # its run failed: never runnable in this call
                del self.by_checkpoint[checkpoint_id]
            elif state:
                index = items.popleft()
                if not items:
                    del self.by_checkpoint[checkpoint_id]
                return index
        return None

    def drop_never_ready(self, gate: Gate) -> None:
        for checkpoint_id, (checkpoint, _) in list(self.by_checkpoint.items()):
            if gate.ready(checkpoint) is None:
                del self.by_checkpoint[checkpoint_id]


class GridSearcher(Searcher):
    """Hands a grid shard `capacity` trials of the call's queue, each as soon as its checkpoint
    exists, so fine-tuning fills in while pretraining still runs (the data-efficiency
    checkpoints first). Tune's config is the trial's index in the call's pending trials."""

    def __init__(self, queue: ReadyQueue, capacity: int, gate: Gate):
        super().__init__(metric=SEARCH_METRIC, mode="max")
        self.queue, self.capacity, self.gate = queue, capacity, gate
        self.issued = 0

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True

    def suggest(self, trial_id: str):
        if self.issued == self.capacity:
            return Searcher.FINISHED
        self.gate.poll()
        index = self.queue.take(self.gate)
        if index is not None:
            self.issued += 1
            return {"trial_index": index}
        return None if self.queue else Searcher.FINISHED

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        self.gate.poll()


class CellSearcher(Searcher):
    """Searches up to `capacity` cells of the call's queue, taking a cell once its checkpoint
    exists and the cells already taken have no trial to start (each waits for its running
    sample's results). Tune's config is (cell index in the call's cells, sample, seed index, lr)."""

    def __init__(self, cells: list[CellSearch], queue: ReadyQueue, capacity: int, lr_min: float, lr_max: float,
                 seed: int, startup_samples: int, gate: Gate | None = None):
        super().__init__(metric=SEARCH_METRIC, mode="max")
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.cells, self.queue, self.capacity, self.gate = cells, queue, capacity, gate or Gate()
        self.lr_min, self.lr_max, self.seed, self.startup_samples = lr_min, lr_max, seed, startup_samples
        self.searchers: dict[int, Repeater] = {}  # cell index -> its search, for the cells taken, in that order
        self.trial_sample: dict[str, tuple[int, int]] = {}
        self.reported: dict[tuple[int, int], int] = {}

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True  # fixed at construction

    def start_cell(self, index: int) -> None:
        """The cell's TPE search, warm-started with its recorded samples. Seeded by the cell's
        position in the plan: the same proposals whichever shard takes the cell, and when."""
        import optuna

        cell = self.cells[index]
        sampler = optuna.samplers.TPESampler(seed=self.seed * 1_000_003 + cell.number,
                                             n_startup_trials=self.startup_samples)
        inner = OptunaSearch(space={"learning_rate": tune.loguniform(self.lr_min, self.lr_max)},
                             metric=SEARCH_METRIC, mode="max", sampler=sampler)
        for lr, score in cell.evaluated:
            inner.add_evaluated_point({"learning_rate": lr}, score)
        self.searchers[index] = Repeater(inner, repeat=cell.seeds, set_index=True)

    def in_flight_samples(self, cell: CellSearch) -> int:
        return math.ceil(cell.issued / cell.seeds) - cell.completed_groups

    def issue(self, index: int, trial_id: str) -> dict:
        cell = self.cells[index]
        config = self.searchers[index].suggest(trial_id)
        sample = cell.first_sample + cell.issued // cell.seeds
        cell.issued += 1
        self.trial_sample[trial_id] = (index, sample)
        return {"cell": index, "sample": sample, "seed_index": config["__trial_index__"],
                "learning_rate": config["learning_rate"]}

    def suggest(self, trial_id: str):
        self.gate.poll()
        waiting = False
        for index in self.searchers:
            cell = self.cells[index]
            if cell.trials_left == 0:
                continue
            # A new sample only when the previous one is complete: TPE then sees every result.
            if cell.issued % cell.seeds == 0 and self.in_flight_samples(cell) > 0:
                waiting = True
                continue
            return self.issue(index, trial_id)
        if len(self.searchers) < self.capacity:
            index = self.queue.take(self.gate)
            if index is not None:
                self.start_cell(index)
                return self.issue(index, trial_id)
            waiting = waiting or bool(self.queue)
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
