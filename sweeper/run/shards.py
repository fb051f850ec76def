"""Shards: the batches of trials that one Tuner run executes, and the typed config of each trial.

A shard is a share of the call's pending work, not a fixed slice of the plan: the shards of one
call take from one `ReadyQueue` (sweeper.run.search), each up to its capacity, the work of written
checkpoints first. So the trials of a checkpoint written early run at once even when the plan
lists it last, and each Tuner's state stays bounded by `trials_per_shard`.

Tune keeps and rewrites every trial's config in its experiment state, so a trial's Tune config
only locates it in the call's work (~18 KB per trial saved on the paper's grid). The shard stays
on the driver (its searcher, scheduler and recorder read it); what crosses to the workers, once
per shard by `tune.with_parameters`, is `for_workers()`: a `ShardTrials` (sweeper.contract.configs)
holding the `TrialConfig` of every trial the shard may still take, which turns that location into
the trial's config. Two kinds, behind one small base class (`study_shards` picks per search mode):
- `GridShard` (grid, random): up to `capacity` planned trials; the config is the trial's index
  (`GridSearcher`);
- `OptunaShard`: up to `capacity` whole (checkpoint, task) cells searched by `CellSearcher`; the
  config is (cell, sample, seed index, point), the planned trial at that point is what runs and
  what is recorded (`plan.at_point`; the workers' `SearchedCell` builds the same config), and a
  sample's seeds are recorded together.

Evaluation-only retrieval sets (NQ, MLDR) are scored by the trial that trains their model (on
MS MARCO): `EvaluationSets` pairs each training trial with its companions' planned trials.
"""
from __future__ import annotations

import itertools
import json

from sweeper.plan.study_plan import StudyPlan, Trial, at_point
from sweeper.run.idle_workers import IdleWorkers
from sweeper.run.pipeline import Pipeline
from sweeper.run.search import CellSearch, CellSearcher, GridSearcher, ReadyQueue, search_score
from sweeper.run.task_prep import task_data_dir
from sweeper.contract import registry
from sweeper.spec import space as spaces
from sweeper.contract.registry import get_task
from sweeper.contract.configs import (CompanionSet, SearchedCell, ShardTrials, TaskInfo, TrialConfig, TrialRuntime,
                                      params_text)
from sweeper.spec.study import StudySpec
from sweeper.store import storage
from sweeper.store.layout import StudyLayout
from sweeper.store.results import read_trials


def trial_runtime(spec: StudySpec) -> TrialRuntime:
    """How trials run (never part of a key): micro batch, eval batch and curve, threads."""
    ft = spec.finetuning
    return TrialRuntime(micro_batch_size=ft.micro_batch_size, eval_batch_size=ft.eval_batch_size,
                        eval_every=ft.eval_every, keep_predictions=ft.keep_predictions,
                        threads=max(1, int(spec.resources.cpus_per_trial)))


class EvaluationSets:
    """Evaluation-only retrieval sets and the planned trials that ride along with a training trial:
    one Tune trial records the rows of all of them."""

    def __init__(self, plan: StudyPlan | None = None, tasks: list[str] = (), recorded: set[str] = frozenset()):
        self.recorded = recorded  # keys already in the store: a rerun records only the missing rows
        self.by_train_task: dict[str, list[str]] = {}
        for task in tasks:
            if get_task(task).train_task:
                self.by_train_task.setdefault(get_task(task).train_task, []).append(task)
        self.index = {self.cell(t, t.task): t for t in plan.trials} if self.by_train_task else {}

    @staticmethod
    def cell(trial: Trial, task: str) -> tuple:
        """Where a trial's companions sit: the same checkpoint, point and seed (in optuna and random
        modes the same sample: a searched point is the training task's)."""
        if trial.sample is not None:
            return trial.checkpoint.checkpoint_id, task, trial.sample, trial.seed
        return trial.checkpoint.checkpoint_id, task, trial.learning_rate, params_text(trial.params), trial.seed

    @staticmethod
    def evaluation_only(trial: Trial) -> bool:
        return get_task(trial.task).train_task is not None

    def companions(self, trial: Trial) -> list[Trial]:
        """The planned trials of the evaluation-only sets `trial`'s weights are scored on; at the
        point its search picked when it is an Optuna trial at one (`OptunaShard.trial`)."""
        found = [self.index[self.cell(trial, task)] for task in self.by_train_task.get(trial.task, [])]
        if trial.search_mode == "optuna" and trial.learning_rate is not None:
            point = {spaces.LEARNING_RATE: trial.learning_rate, **trial.params}
            found = [at_point(companion, point) for companion in found]
        return found

    def training_trials(self, trials: list[Trial], pending: list[Trial]) -> list[Trial]:
        """The trials to run: pending ones that train, and those whose companions are pending."""
        pending_keys = {t.trial_key for t in pending}
        return [t for t in trials if not self.evaluation_only(t)
                and (t.trial_key in pending_keys or any(c.trial_key in pending_keys for c in self.companions(t)))]


def task_definitions(task_dirs: dict) -> dict[str, tuple[TaskInfo, str, tuple[str, ...]]]:
    """Task name -> (TaskInfo, family implementation, the family's encoding settings) of every
    prepared task, resolved on the driver: a plugin's tasks and families are registered there,
    not in the workers."""
    names = {key[1] for key in task_dirs}  # (tokenizer, task) or (tokenizer, task, data variant)
    families = {name: registry.family_of(get_task(name).family) for name in names}
    return {name: (get_task(name), family.implementation, family.encoding_settings)
            for name, family in families.items()}


def trial_config(trial: Trial, layout: StudyLayout, task_dirs: dict, sets: EvaluationSets,
                 runtime: TrialRuntime,
                 tasks: dict[str, tuple[TaskInfo, str, tuple[str, ...]]] | None = None) -> TrialConfig:
    """The typed config the worker runs: the planned trial with concrete locations, without
    credentials (`storage.strip_credentials`: workers use their own provider chain)."""
    ckpt = trial.checkpoint
    tasks = tasks or task_definitions(task_dirs)
    task, family, _ = tasks[trial.task]
    strip = storage.strip_credentials

    def data_dir(task_name: str, protocol) -> str:
        return strip(task_data_dir(task_dirs, ckpt.tokenizer, task_name, protocol, tasks[task_name][2]))
    return TrialConfig(
        trial_key=trial.trial_key, task=task, family=family,
        protocol=trial.protocol, seed=trial.seed, checkpoint_path=strip(
            layout.checkpoint(ckpt.run.name, ckpt.step) if ckpt.run is not None
            else layout.external_checkpoint(ckpt.external.name, ckpt.external.key)),
        task_data_dir=data_dir(trial.task, trial.protocol), runtime=runtime,
        companions=tuple(CompanionSet(trial_key=c.trial_key, task_data_dir=data_dir(c.task, c.protocol))
                         for c in sets.companions(trial)),
        params=trial.params,
    )


class Shard:
    """Trials for one Tuner run, taken from the call's `queue`. Subclasses say how Tune's config
    locates a trial (`trial`), what Tune searches over (`tuner_args`), and which trials are
    recorded together (`group`)."""

    group_size = 1
    """Trials whose rows are written together (an Optuna sample's seeds)."""

    def __init__(self, layout: StudyLayout, task_dirs: dict, sets: EvaluationSets | None, runtime: TrialRuntime,
                 queue: ReadyQueue):
        # A shard is shipped to the workers: its locations hold no credentials (sweeper.store.storage).
        self.layout = layout.without_credentials()
        self.task_dirs = {key: storage.strip_credentials(location) for key, location in task_dirs.items()}
        self.runtime = runtime
        self.sets = sets or EvaluationSets()
        self.tasks = task_definitions(task_dirs)
        self.queue = queue

    def __len__(self) -> int:
        """The trials this shard is expected to run: its share of the call's (the progress total)."""
        raise NotImplementedError

    def has_work(self, pipeline: Pipeline) -> bool:
        """Whether anything is left for it: earlier shards took the rest, or it belongs to runs
        that failed (no Tuner is started for nothing)."""
        self.queue.drop_never_ready(pipeline)
        return bool(self.queue)

    def tuner_args(self, spec: StudySpec, pipeline: Pipeline, idle_workers: IdleWorkers | None = None) -> dict:
        """`param_space`, `search_alg` and `num_samples` of the Tuner; the searcher frees
        `idle_workers` while it waits for `pipeline` (sweeper.run.idle_workers)."""
        raise NotImplementedError

    def trial(self, config: dict) -> Trial:
        raise NotImplementedError

    def config_of(self, trial: Trial) -> TrialConfig:
        return trial_config(trial, self.layout, self.task_dirs, self.sets, self.runtime, self.tasks)

    def trial_config(self, config: dict) -> TrialConfig:
        """The config of the trial Tune's `config` locates, built on the driver."""
        return self.config_of(self.trial(config))

    def for_workers(self) -> ShardTrials:
        """What `tune.with_parameters` ships to the shard's workers: the configs of the work still
        in the queue (earlier shards took the rest), contract types only."""
        raise NotImplementedError

    def group(self, config: dict):
        """Key of the group the trial's rows are held in until all of it is done (None: none)."""
        return None

    def point(self, config: dict) -> tuple:
        """The point the trial is a seed of, which a trial scheduler judges and stops as one
        (sweeper.run.early_stopping): its cell, sample, learning rate and swept values."""
        trial = self.trial(config)
        return (trial.checkpoint.checkpoint_id, trial.task, trial.sample, trial.learning_rate,
                params_text(trial.params))


class GridShard(Shard):
    """Up to `capacity` of the call's pending `trials`: Tune's config is the trial's index there.
    Alone (no `queue`), a shard runs all of `trials`."""

    def __init__(self, trials: list[Trial], layout: StudyLayout, task_dirs: dict, sets: EvaluationSets | None = None,
                 runtime: TrialRuntime = TrialRuntime(), queue: ReadyQueue | None = None, capacity: int | None = None):
        if queue is None:  # alone: a queue of its own
            queue = ReadyQueue([t.checkpoint for t in trials])
        super().__init__(layout, task_dirs, sets, runtime, queue)
        self.trials = trials
        self.capacity = len(trials) if capacity is None else capacity

    def __len__(self) -> int:
        return self.capacity

    def tuner_args(self, spec: StudySpec, pipeline: Pipeline, idle_workers: IdleWorkers | None = None) -> dict:
        return {"param_space": {}, "search_alg": GridSearcher(self.queue, self.capacity, pipeline, idle_workers),
                "num_samples": self.capacity}

    def trial(self, config: dict) -> Trial:
        return self.trials[config["trial_index"]]

    def for_workers(self) -> ShardTrials:
        return ShardTrials(trials={index: self.trial_config({"trial_index": index})
                                   for index in sorted(self.queue.items())})


class OptunaShard(Shard):
    """Up to `capacity` whole cells of the call's `cells`, searched by `CellSearcher`: Tune's
    config is (cell, sample, seed index, point). Alone (no `queue`), a shard searches all of `cells`.

    Rows of a sample are recorded together once all its seeds are done, so the store only ever
    holds whole samples, which is what lets a resumed search warm-start from them."""

    def __init__(self, cells: list[list[list[Trial]]], searches: list[CellSearch], layout: StudyLayout,
                 task_dirs: dict, sets: EvaluationSets, runtime: TrialRuntime = TrialRuntime(),
                 queue: ReadyQueue | None = None, capacity: int | None = None, expected_trials: int | None = None,
                 data_fields: tuple[str, ...] = ()):
        if queue is None:  # alone: a queue of its own
            queue = ReadyQueue([cell[0][0].checkpoint for cell in cells])
        super().__init__(layout, task_dirs, sets, runtime, queue)
        self.cells = cells  # cells[c][sample][seed index] -> planned trial
        self.searches = searches
        self.data_fields = data_fields  # FinetuningSpec.data_fields(): a point's value picks the task data
        self.group_size = len(cells[0][0])
        self.capacity = len(cells) if capacity is None else capacity
        self.expected_trials = (sum(search.trials_left for search in searches) if expected_trials is None
                                else expected_trials)

    def __len__(self) -> int:
        return self.expected_trials

    def tuner_args(self, spec: StudySpec, pipeline: Pipeline, idle_workers: IdleWorkers | None = None) -> dict:
        optuna = spec.finetuning.optuna
        # The searcher runs in the driver: it opens the journal there (self.layout holds no credentials,
        # the driver reaches an object store through its environment).
        searcher = CellSearcher(self.searches, self.queue, self.capacity, self.layout, optuna.seed,
                                optuna.startup_samples, pipeline=pipeline, idle_workers=idle_workers)
        # Which cells it takes is known only as they are written: at most every trial left.
        return {"param_space": {}, "search_alg": searcher,
                "num_samples": sum(search.trials_left for search in self.searches)}

    def trial(self, config: dict) -> Trial:
        """The planned trial at the point its search picked: what runs and what is recorded."""
        return at_point(self.cells[config["cell"]][config["sample"]][config["seed_index"]], config["point"])

    def group(self, config: dict):
        return config["cell"], config["sample"]

    def for_workers(self) -> ShardTrials:
        return ShardTrials(cells={number: self.searched_cell(number) for number in sorted(self.queue.items())})

    def searched_cell(self, number: int) -> SearchedCell:
        """Cell `number`'s trials at the plan's point, and the task data folders (its own and its
        companions') of each value of its searched data fields, found as `trial_config` finds them
        at a point. A cell's trials share a checkpoint, a task and so these folders."""
        space, samples = self.searches[number].space, self.cells[number]
        names = tuple(name for name in space if name in self.data_fields)
        data_dirs = {}
        for values in itertools.product(*(spaces.planning_values(space[name]) for name in names)):
            # Any rate but None (None would leave the companions at the plan's point): the folders depend
            # on the data fields alone.
            point = {spaces.LEARNING_RATE: 1.0, **dict(zip(names, values))}
            at = self.trial_config({"cell": number, "sample": 0, "seed_index": 0, "point": point})
            data_dirs[values] = at.task_data_dir, tuple(companion.task_data_dir for companion in at.companions)
        return SearchedCell(trials=tuple(tuple(map(self.config_of, sample)) for sample in samples),
                            data_fields=names, data_dirs=data_dirs)

    def point(self, config: dict) -> tuple:
        return self.group(config)  # a sample is one point run with every seed


def grid_shards(pending: list[Trial], layout: StudyLayout, task_dirs: dict, size: int,
                sets: EvaluationSets | None = None, runtime: TrialRuntime = TrialRuntime()) -> list[GridShard]:
    """Shards of `size` trials (the last one the rest) that take the `pending` trials (in plan
    order) as their checkpoints are written."""
    queue = ReadyQueue([t.checkpoint for t in pending])
    return [GridShard(pending, layout, task_dirs, sets, runtime, queue, capacity=min(size, len(pending) - i))
            for i in range(0, len(pending), size)]


def study_shards(spec: StudySpec, plan: StudyPlan, pending: list[Trial], done: set[str], layout: StudyLayout,
                 task_dirs: dict, sets: EvaluationSets) -> list[Shard]:
    """The shards of a fine-tuning call, by search mode: planned trials (grid, random: the points
    are drawn at plan time) or whole cells searched as they run (optuna)."""
    if spec.finetuning.search == "optuna":
        return optuna_shards(spec, plan, pending, done, layout, task_dirs, sets)
    return grid_shards(sets.training_trials(list(plan.trials), pending), layout, task_dirs,
                       spec.resources.trials_per_shard, sets, trial_runtime(spec))


def recorded_point(row: dict) -> dict:
    """A recorded trial's point: its learning rate and its params' values."""
    return {spaces.LEARNING_RATE: float(row["learning_rate"]), **json.loads(row.get("params") or "{}")}


def optuna_shards(spec: StudySpec, plan: StudyPlan, pending: list[Trial], done: set[str], layout: StudyLayout,
                  task_dirs: dict, sets: EvaluationSets) -> list[Shard]:
    """Shards of `trials_per_shard` trials' worth of whole cells, that take the cells with work
    left as their checkpoints are written; each cell with the samples already recorded (its
    study is reconciled with them). An evaluation-only set has no search of its own: its rows
    follow its training cell's samples. (Random mode plans its trials: `study_shards` gives it
    grid shards, and so does this function for a caller that names no mode.)"""
    if spec.finetuning.search != "optuna":
        return study_shards(spec, plan, pending, done, layout, task_dirs, sets)
    pending_keys = {t.trial_key for t in sets.training_trials(list(plan.trials), pending)}
    cells: dict[tuple, list[Trial]] = {}
    for trial in plan.trials:
        if not sets.evaluation_only(trial):
            cells.setdefault((trial.checkpoint.checkpoint_id, trial.task), []).append(trial)
    recorded = read_trials(layout).to_pandas().set_index("trial_key") if done else None
    ft = spec.finetuning
    n_seeds, n_samples = len(ft.seeds), ft.optuna.samples_per_cell
    grids, searches = [], []
    for number, ((checkpoint_id, task), trials) in enumerate(cells.items()):
        if not pending_keys & {t.trial_key for t in trials}:
            continue
        by_sample = [trials[k * n_seeds:(k + 1) * n_seeds] for k in range(n_samples)]
        complete = 0
        while complete < n_samples and all(t.trial_key in done and all(c.trial_key in done for c in sets.companions(t))
                                           for t in by_sample[complete]):
            complete += 1
        evaluated = [(k, recorded_point(recorded.loc[by_sample[k][0].trial_key].to_dict()),
                      sum(search_score(recorded.loc[t.trial_key].to_dict()) for t in by_sample[k]) / n_seeds)
                     for k in range(complete)]
        first = trials[0]
        grids.append(by_sample)
        searches.append(CellSearch(samples_total=n_samples, seeds=n_seeds, first_sample=complete, number=number,
                                   study_name=f"{checkpoint_id}/{task}/{first.search_key[:8]}",
                                   space=plan.spaces[task],  # the plan's: the learning rate and the searched fields
                                   evaluated=evaluated))
    cells_per_shard = max(1, spec.resources.trials_per_shard // (n_samples * n_seeds))
    queue = ReadyQueue([grid[0][0].checkpoint for grid in grids])
    runtime = trial_runtime(spec)
    return [OptunaShard(grids, searches, layout, task_dirs, sets, runtime, queue, capacity=cells_per_shard,
                        expected_trials=sum(search.trials_left for search in searches[i:i + cells_per_shard]),
                        data_fields=ft.data_fields())
            for i in range(0, len(grids), cells_per_shard)]
