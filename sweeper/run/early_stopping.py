"""Early stopping: the Tune trial scheduler of a fine-tuning search (ASHA, median stopping).

A trial under a scheduler reports each point of its validation curve (every
`finetuning.eval_every` steps) to Tune, then its final result (sweeper.run.tune_grid); the
scheduler may stop it at any curve point, and it is recorded as `stopped` with its last point
(sweeper.run.recording). Grid mode never has a scheduler (the spec refuses one).

- What is judged: a point (checkpoint, task, learning rate and swept values: an Optuna sample,
  a random-mode draw), on the mean of its seeds' validation at equal steps, and its seeds are
  stopped together. The search's objective and selection (sweeper.report.analysis) are the
  seed-averaged score; judging each seed as its own trial let ASHA's first rung keep a third of
  the seeds, so almost no point finished every seed and selection had only survivor-biased
  means to choose from (docs/benchmarks.md section 10). The inner Tune scheduler sees one
  `PointEntity` per point. The point's result at step t is handed to it once every seed of
  the point that is running has reported step t (a seed that has ended, one still waiting for
  a worker, or one recorded before a resume, which never runs, does not hold it back; the values
  of one that ended stay in the mean). A seed that reports t before its siblings is held there
  (its worker waits inside `tune.report`) and resumes, or is stopped, with the point: so the
  seeds of a stopped point stop at the same step, and none of them has run to its end. A point
  is handed each step once: a seed that starts after its siblings passed step t (fewer workers
  than seeds) is not judged again there; and a point one of whose seeds reached its end is
  never stopped (that seed is recorded ok, its siblings run to their end too).
- Metric: `search_score` (sweeper.run.search.SEARCH_METRIC, maximised), the score the search
  itself is told, so the searcher and the scheduler judge a point on the same number.
- Time: the trial's optimizer step (`train_steps` in every report). Not the count of reports:
  points of one cell may have different step budgets (epochs, max_steps or batch size searched,
  a per-task budget), and a trial's final report lands at its budget, not on the eval_every
  grid, so counting reports would compare a short point's final weights with a long point's
  weights half way. At equal steps, two points have taken the same number of updates. The
  spec's grace period is in curve points; here it is `grace_period * eval_every` steps.
- One inner scheduler per (checkpoint, task) cell (`CellScheduler`): a shard's Tuner multiplexes
  many cells, whose scores are not comparable (another task's metric, a weaker checkpoint).
  Stopping a point because another cell scores higher would starve whole cells.
- Never a pause: a function trainable has no checkpoint to resume from, so a paused trial
  would start over. The median rule is built so that it never pauses, and `CellScheduler`
  turns any pause into a continue.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import partial

from ray.tune.schedulers import ASHAScheduler, MedianStoppingRule, TrialScheduler

from sweeper.run.idle_workers import IdleWorkers, IdleWorkerScheduler
from sweeper.run.ray_compat import require_tested_ray, resume_held_trial
from sweeper.run.recording import FINAL
from sweeper.run.search import SEARCH_METRIC
from sweeper.spec.finetuning import FinetuningSpec

TIME_ATTR = "train_steps"
"""The result field the schedulers read as time: the optimizer steps the trial has taken."""

STEP_BOUND = 10**9
"""ASHA's max_t: above any trial's step budget, so ASHA never cuts a point at a step of its
own; a point that survives every rung it reaches ends at its budget, as without a scheduler."""


def make_scheduler(finetuning: FinetuningSpec, cell_of: Callable[[dict], Hashable] | None = None,
                   point_of: Callable[[dict], Hashable] | None = None,
                   idle_workers: IdleWorkers | None = None) -> TrialScheduler | None:
    """The spec's scheduler (None: `scheduler.kind: none`), one per cell, judging points:
    `cell_of(config)` is the cell of the trial whose Tune config that is (None: all trials are
    one cell), `point_of(config)` its point (None: each trial is a point of its own). It hands
    Tune's controller to `idle_workers` (sweeper.run.idle_workers)."""
    spec = finetuning.scheduler
    if spec.kind == "none":
        return None
    grace_steps = spec.grace_period * finetuning.eval_every
    # A partial: what each cell's scheduler is built with stays readable (`.func`, `.keywords`).
    if spec.kind == "asha":
        build = partial(ASHAScheduler, time_attr=TIME_ATTR, metric=SEARCH_METRIC, mode="max", max_t=STEP_BOUND,
                        grace_period=grace_steps, reduction_factor=spec.reduction_factor)
    elif spec.kind == "median":
        # min_time_slice infinite: never yield the trial's place to a waiting one (a pause).
        build = partial(MedianStoppingRule, time_attr=TIME_ATTR, metric=SEARCH_METRIC, mode="max",
                        grace_period=grace_steps, min_samples_required=spec.min_samples_required,
                        min_time_slice=float("inf"), hard_stop=True)
    else:
        raise ValueError(f"unknown scheduler kind {spec.kind!r}")
    return CellScheduler(build, cell_of or (lambda config: None), point_of, idle_workers)


class PointEntity:
    """What the inner Tune scheduler sees of a point: a trial-like object with a stable id and
    the config of its first seed (ASHA keys on `trial_id`, the median rule hashes the object)."""

    def __init__(self, trial_id: str, config: dict):
        self.trial_id, self.config = trial_id, config

    def __repr__(self) -> str:
        return self.trial_id


def started(trial) -> bool:
    """Whether the trial's worker runs (a pending seed, waiting for a worker, holds nobody back)."""
    return getattr(trial, "status", "RUNNING") == "RUNNING"


@dataclass
class Point:
    """The seeds of one point and their curves, and what has been handed to the inner scheduler."""
    entity: PointEntity
    inner: TrialScheduler
    running: dict = field(default_factory=dict)  # trial id -> trial: its seeds not ended
    held: dict = field(default_factory=dict)  # trial id -> trial: seeds waiting for their siblings
    curves: dict = field(default_factory=dict)  # trial id -> {step: score}, kept when a seed ends
    handed: float = -math.inf  # the last step the inner scheduler was given
    added: bool = False  # met by the inner scheduler
    completed: bool = False  # a seed reached its end: the point is never stopped after that
    stopped: bool = False

    def last_step(self, trial_id: str) -> float:
        return max(self.curves.get(trial_id, {}), default=-math.inf)

    def reached(self) -> float:
        """The step every started seed still running has reported (inf: none is running)."""
        return min((self.last_step(t) for t, trial in self.running.items() if started(trial)), default=math.inf)

    def mean_at(self, step) -> float:
        """The seeds' mean at `step`: each seed's score at its last report up to `step`."""
        values = [curve[max(s for s in curve if s <= step)] for curve in self.curves.values()
                  if any(s <= step for s in curve)]
        return sum(values) / len(values)

    def ready_steps(self) -> list:
        """Steps not yet handed that every started seed still running has reached."""
        reached = self.reached()
        return sorted({s for curve in self.curves.values() for s in curve if self.handed < s <= reached})


class CellScheduler(IdleWorkerScheduler):
    """Runs trials in the order the searcher makes them (FIFO); hands each point's seed-averaged
    curve to the scheduler of its cell (made on the cell's first trial) and stops a point's
    seeds together.

    A seed that reports a step some started sibling has not reached yet is held there (NOOP: no
    next `train` call, so its worker waits inside `tune.report`) until the last of them reports
    it; then the point is judged, and the held seeds resume or are stopped with it. So the
    seeds of a point stop at the same step, and a stopped point has no seed that ran to its
    end. A final report is never held: a seed that reached its end is recorded ok."""

    def __init__(self, build: Callable[[], TrialScheduler], cell_of: Callable[[dict], Hashable],
                 point_of: Callable[[dict], Hashable] | None = None, idle_workers: IdleWorkers | None = None):
        require_tested_ray()  # before the first trial: resuming a held seed is Tune's private API
        super().__init__(idle_workers)
        self.build, self.cell_of, self.point_of = build, cell_of, point_of
        self.by_cell: dict[Hashable, TrialScheduler] = {}
        self.points: dict[tuple, Point] = {}  # (cell, point) -> its state
        self.point_of_trial: dict[str, Point] = {}
        self.numbers = itertools.count()

    @property
    def metric(self) -> str:
        return SEARCH_METRIC  # what Tune checks every result for

    @property
    def supports_buffered_results(self) -> bool:
        return False  # a held seed's hold is one result's decision, not a buffer's

    def set_search_properties(self, metric, mode, **spec) -> bool:
        return True  # fixed at construction (sweeper.run.search's metric and mode)

    def point(self, trial) -> Point:
        """The point of `trial`, made (and added to its cell's scheduler) on its first seed."""
        if trial.trial_id in self.point_of_trial:
            return self.point_of_trial[trial.trial_id]
        cell = self.cell_of(trial.config)
        key = (cell, self.point_of(trial.config) if self.point_of else ("trial", trial.trial_id))
        if key not in self.points:
            if cell not in self.by_cell:
                self.by_cell[cell] = self.build()
            self.points[key] = Point(PointEntity(f"point-{next(self.numbers)}", trial.config), self.by_cell[cell])
        point = self.point_of_trial[trial.trial_id] = self.points[key]
        return point

    def on_trial_add(self, tune_controller, trial) -> None:
        super().on_trial_add(tune_controller, trial)
        point = self.point(trial)
        if not point.added:  # its first seed: the inner scheduler meets the point
            point.inner.on_trial_add(tune_controller, point.entity)
            point.added = True
        point.running[trial.trial_id] = trial
        point.curves.setdefault(trial.trial_id, {})

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        point = self.point(trial)
        if point.stopped:
            return TrialScheduler.STOP
        if TIME_ATTR not in result or SEARCH_METRIC not in result:
            return TrialScheduler.CONTINUE
        step = result[TIME_ATTR]
        point.curves.setdefault(trial.trial_id, {})[step] = result[SEARCH_METRIC]
        self.hand(tune_controller, point, current=trial)
        if point.stopped:
            return TrialScheduler.STOP
        if step > point.handed and result.get(FINAL) is False:  # a sibling is behind: wait for it
            point.held[trial.trial_id] = trial
            return TrialScheduler.NOOP
        return TrialScheduler.CONTINUE

    def hand(self, tune_controller, point: Point, current=None) -> None:
        """Give the inner scheduler the point's mean at every step its started seeds have all
        reached, in order, until it says stop (a pause is a continue); then resume the held
        seeds no sibling holds back any more, or stop them all with the point."""
        for step in point.ready_steps():
            point.handed = step
            decision = point.inner.on_trial_result(tune_controller, point.entity,
                                                   {TIME_ATTR: step, SEARCH_METRIC: point.mean_at(step)})
            if decision == TrialScheduler.STOP and not point.completed:
                point.stopped = True
                break
        for trial_id, trial in list(point.held.items()):
            if trial is current:
                continue
            if point.stopped:
                point.held.pop(trial_id)
                tune_controller.stop_trial(trial)  # recorded `stopped` at the point it is held at
            elif point.last_step(trial_id) <= point.handed:
                point.held.pop(trial_id)
                resume_held_trial(tune_controller, trial)

    def end(self, tune_controller, trial, result: dict | None = None, failed: bool = False) -> None:
        """A seed ended (its end, a stop, an error): it holds its point back no more. A failed
        seed's curve leaves the mean; an ended one's stays."""
        point = self.point(trial)
        point.running.pop(trial.trial_id, None)
        point.held.pop(trial.trial_id, None)
        if failed:
            point.curves.pop(trial.trial_id, None)
        elif result and TIME_ATTR in result and SEARCH_METRIC in result:
            point.curves.setdefault(trial.trial_id, {})[result[TIME_ATTR]] = result[SEARCH_METRIC]
            point.completed = point.completed or result.get(FINAL, True) is not False
        self.point_of_trial.pop(trial.trial_id, None)
        if not point.stopped:
            self.hand(tune_controller, point)

    def on_trial_complete(self, tune_controller, trial, result: dict) -> None:
        self.end(tune_controller, trial, result)

    def on_trial_error(self, tune_controller, trial) -> None:
        self.end(tune_controller, trial, failed=True)

    def on_trial_remove(self, tune_controller, trial) -> None:
        self.end(tune_controller, trial)

    def debug_string(self) -> str:
        return (f"Early stopping of points per cell ({len(self.by_cell)} cells, "
                f"{sum(p.stopped for p in self.points.values())} of {len(self.points)} points stopped)")
