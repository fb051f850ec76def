"""Early stopping: the Tune trial scheduler of a fine-tuning search (ASHA, median stopping).

A trial under a scheduler reports each point of its validation curve (every
`finetuning.eval_every` steps) to Tune, then its final result (sweeper.finetuning); the
scheduler may stop it at any curve point, and it is recorded as `stopped` with its last point
(sweeper.recording). Grid mode never has a scheduler (the spec refuses one).

- Metric: `search_score` (sweeper.search.SEARCH_METRIC, maximised), the score the search
  itself is told, so the searcher and the scheduler judge a trial on the same number.
- Time: the trial's optimizer step (`train_steps` in every report). Not the count of reports:
  trials of one cell may have different step budgets (epochs, max_steps or batch size searched,
  a per-task budget), and a trial's final report lands at its budget, not on the eval_every
  grid, so counting reports would compare a short trial's final weights with a long trial's
  weights half way. At equal steps, two trials have taken the same number of updates. The
  spec's grace period is in curve points; here it is `grace_period * eval_every` steps.
- One scheduler per (checkpoint, task) cell (`CellScheduler`): a shard's Tuner multiplexes many
  cells, whose scores are not comparable (another task's metric, a weaker checkpoint). Stopping
  a trial because another cell scores higher would starve whole cells, not prune bad points.
- Never a pause: a function trainable has no checkpoint to resume from, so a paused trial
  would start over. The median rule is built so that it never pauses, and `CellScheduler`
  turns any pause into a continue.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable

from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, MedianStoppingRule, TrialScheduler

from sweeper.search import SEARCH_METRIC
from sweeper.spec import FinetuningSpec

TIME_ATTR = "train_steps"
"""The result field the schedulers read as time: the optimizer steps the trial has taken."""

STEP_BOUND = 10**9
"""ASHA's max_t: above any trial's step budget, so ASHA never cuts a trial at a step of its
own; a trial that survives every rung it reaches ends at its budget, as without a scheduler."""


def make_scheduler(finetuning: FinetuningSpec, cell_of: Callable[[dict], Hashable] | None = None
                   ) -> TrialScheduler | None:
    """The spec's scheduler (None: `scheduler.kind: none`), one per cell: `cell_of(config)` is
    the cell of the trial whose Tune config that is (None: all trials are one cell)."""
    spec = finetuning.scheduler
    if spec.kind == "none":
        return None
    grace_steps = spec.grace_period * finetuning.eval_every
    if spec.kind == "asha":
        def build() -> TrialScheduler:
            return ASHAScheduler(time_attr=TIME_ATTR, metric=SEARCH_METRIC, mode="max", max_t=STEP_BOUND,
                                 grace_period=grace_steps, reduction_factor=spec.reduction_factor)
    elif spec.kind == "median":
        def build() -> TrialScheduler:
            # min_time_slice infinite: never yield the trial's place to a waiting one (a pause).
            return MedianStoppingRule(time_attr=TIME_ATTR, metric=SEARCH_METRIC, mode="max",
                                      grace_period=grace_steps, min_samples_required=spec.min_samples_required,
                                      min_time_slice=float("inf"), hard_stop=True)
    else:
        raise ValueError(f"unknown scheduler kind {spec.kind!r}")
    return CellScheduler(build, cell_of or (lambda config: None))


class CellScheduler(FIFOScheduler):
    """Runs trials in the order the searcher makes them (FIFO) and hands each trial's results to
    the scheduler of its cell, made on the cell's first trial."""

    def __init__(self, build: Callable[[], TrialScheduler], cell_of: Callable[[dict], Hashable]):
        super().__init__()
        self.build, self.cell_of = build, cell_of
        self.by_cell: dict[Hashable, TrialScheduler] = {}
        self.cell_of_trial: dict[str, Hashable] = {}
        self._metric = SEARCH_METRIC  # what Tune checks every result for

    def set_search_properties(self, metric, mode, **spec) -> bool:
        return True  # fixed at construction (sweeper.search's metric and mode)

    def inner(self, trial) -> TrialScheduler:
        if trial.trial_id not in self.cell_of_trial:
            self.cell_of_trial[trial.trial_id] = self.cell_of(trial.config)
        cell = self.cell_of_trial[trial.trial_id]
        if cell not in self.by_cell:
            self.by_cell[cell] = self.build()
        return self.by_cell[cell]

    def on_trial_add(self, tune_controller, trial) -> None:
        self.inner(trial).on_trial_add(tune_controller, trial)

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        decision = self.inner(trial).on_trial_result(tune_controller, trial, result)
        return TrialScheduler.CONTINUE if decision == TrialScheduler.PAUSE else decision

    def on_trial_complete(self, tune_controller, trial, result: dict) -> None:
        self.inner(trial).on_trial_complete(tune_controller, trial, result)
        self.cell_of_trial.pop(trial.trial_id, None)

    def on_trial_error(self, tune_controller, trial) -> None:
        self.inner(trial).on_trial_error(tune_controller, trial)
        self.cell_of_trial.pop(trial.trial_id, None)

    def on_trial_remove(self, tune_controller, trial) -> None:
        self.inner(trial).on_trial_remove(tune_controller, trial)
        self.cell_of_trial.pop(trial.trial_id, None)

    def debug_string(self) -> str:
        return f"Early stopping per cell ({len(self.by_cell)} cells)"
