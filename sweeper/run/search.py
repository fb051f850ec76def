"""What a shard's Tuner runs next: Tune searchers that hand out work as its checkpoint is written.

The work of a fine-tuning call waits in one `ReadyQueue`, by checkpoint; each shard's searcher
takes from it only the work of checkpoints the pipeline loop has published as written
(`sweeper.run.pipeline`), so fine-tuning follows pretraining whatever order the plan lists the
checkpoints in. Searchers only search: they never advance pretraining.
- Grid and random: `GridSearcher` hands out the shard's share of planned trials, one Tune trial each.
- Optuna: one TPE search per (checkpoint, task) cell over the learning rate and the fields the
  spec gives as distributions (sweeper.spec.space), the cells a shard takes multiplexed into its Tuner
  run by `CellSearcher`. Each cell is one Optuna study in the study's journal
  (`StudyLayout.optuna_journal`), driven by Optuna's ask and tell: a sample is asked once, run
  once per seed, and told the seed-averaged score, so `optuna.load_study` and `optuna-dashboard`
  read the searches as they are. Within a cell, samples run one after another (the seeds of a
  sample in parallel) so every TPE proposal sees the results before it; parallelism comes from
  running many cells at once.
- Resume: the results store is the record, the journal follows it (`CellSearcher.reconcile`):
  trials a killed driver left running are failed, recorded samples the study lacks are added
  (`optuna.trial.create_trial`), and a sample the study completed but the store never recorded (a
  driver killed between the two) is run again at its point. So a resumed search continues, and a
  rerun with more samples extends it. A journal Optuna cannot read (not JSON, not its records: a
  disk fault, a hand edit) is set aside in `quarantine/`, saying so, and the searches are rebuilt
  from the store the same way (`set_aside_damaged_journal`).
"""
from __future__ import annotations

import math
import time
import warnings
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from ray.tune.search import Searcher

from sweeper.run.idle_workers import IdleWorkers
from sweeper.run.pipeline import Pipeline
from sweeper.spec import space as spaces
from sweeper.store import folders, storage
from sweeper.store.layout import StudyLayout
from sweeper.store.state_files import set_aside_damaged_journal

SEARCH_METRIC = "search_score"


def search_score(result: dict) -> float:
    """What the search maximises: the validation score, and 0 (the worst) for a diverged trial,
    so a learning rate that blows up is avoided rather than ignored."""
    score = result.get("validation_score")
    return float(score) if score is not None and math.isfinite(score) else 0.0


@dataclass
class CellSearch:
    """What one cell still has to do, and its search."""

    samples_total: int
    seeds: int
    first_sample: int
    """Samples before this one are recorded already."""
    number: int = 0
    """The cell's position among the plan's cells (seeds its sampler)."""
    study_name: str = ""
    """Its Optuna study in the journal: `<checkpoint>/<task>/<search key>`."""
    space: dict = field(default_factory=dict)
    """Parameter -> sweeper.spec.parsing.Distribution: the learning rate's range and the searched fields."""
    evaluated: list[tuple[int, dict, float]] = field(default_factory=list)
    """(sample, point, seed-averaged search score) of the recorded samples."""
    issued: int = 0
    completed_groups: int = 0

    @property
    def trials_left(self) -> int:
        return (self.samples_total - self.first_sample) * self.seeds - self.issued


class OptunaJournal:
    """The study's Optuna journal as the driver opens it: a `JournalStorage` on a
    `JournalFileBackend` (appended under a file lock). In a local study that is the study's own
    file. An object store has no appends nor locks: the journal is a node-local copy, fetched
    from the study when opened and copied back (`save`) at most every `save_every_s` and when a
    searcher's work is done; the store is the record either way."""

    def __init__(self, location: str, save_every_s: float = 60.0, study: StudyLayout | None = None):
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        self.location, self.save_every_s = location, save_every_s
        self.remote = storage.is_remote(location)
        self.local = folders.in_cache("scratch", location) if self.remote else Path(location)
        self.local.parent.mkdir(parents=True, exist_ok=True)
        if study is not None:  # the study's own journal (`sweeper run` has set a damaged one aside already)
            set_aside_damaged_journal(study)
        if self.remote:  # the study's copy wins over whatever this node kept
            self.local.unlink(missing_ok=True)
            if storage.exists(location):
                self.local.write_bytes(storage.read_bytes(location))
        self.storage = JournalStorage(JournalFileBackend(str(self.local)))
        self.saved_at = time.time()

    def save(self, force: bool = False) -> None:
        if self.remote and (force or time.time() - self.saved_at >= self.save_every_s) and self.local.exists():
            storage.write_bytes(self.location, self.local.read_bytes())
            self.saved_at = time.time()


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

    def items(self) -> list[int]:
        """Every item no shard has taken yet, checkpoint by checkpoint."""
        return [index for _, items in self.by_checkpoint.values() for index in items]

    def take(self, pipeline: Pipeline) -> int | None:
        """The next item of the first written checkpoint (None: no checkpoint with work left is
        written yet); the items of checkpoints that will never be written are dropped."""
        for checkpoint_id, (checkpoint, items) in list(self.by_checkpoint.items()):
            state = pipeline.ready(checkpoint)
            if state is None:  # its run failed: never runnable in this call
                del self.by_checkpoint[checkpoint_id]
            elif state:
                index = items.popleft()
                if not items:
                    del self.by_checkpoint[checkpoint_id]
                return index
        return None

    def drop_never_ready(self, pipeline: Pipeline) -> None:
        for checkpoint_id, (checkpoint, _) in list(self.by_checkpoint.items()):
            if pipeline.ready(checkpoint) is None:
                del self.by_checkpoint[checkpoint_id]


class StoreRecordSearcher(Searcher):
    """A searcher whose state the study keeps elsewhere: the results store (and for Optuna its
    journal) is the record a rerun resumes from, so Tune's experiment snapshots hold nothing of
    it (and Tune has no "save not implemented" to say)."""

    def save(self, checkpoint_path: str) -> None:
        """Nothing to write (see the class docstring)."""

    def restore(self, checkpoint_path: str) -> None:
        """Nothing to read (see the class docstring)."""

    idle_workers: IdleWorkers | None = None

    def waiting(self) -> None:
        """`suggest`'s answer while no trial can start yet (Tune asks again): None, once the idle
        trial workers are freed for pretraining if it is under way (sweeper.run.idle_workers)."""
        if self.idle_workers is not None:
            self.idle_workers.release()
        return None


class GridSearcher(StoreRecordSearcher):
    """Hands a grid shard `capacity` trials of the call's queue, each as soon as its checkpoint
    exists, so fine-tuning fills in while pretraining still runs (the data-efficiency
    checkpoints first). Tune's config is the trial's index in the call's pending trials."""

    def __init__(self, queue: ReadyQueue, capacity: int, pipeline: Pipeline, idle_workers: IdleWorkers | None = None):
        super().__init__(metric=SEARCH_METRIC, mode="max")
        self.queue, self.capacity, self.pipeline, self.idle_workers = queue, capacity, pipeline, idle_workers
        self.issued = 0

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True

    def suggest(self, trial_id: str):
        if self.issued == self.capacity:
            return Searcher.FINISHED
        index = self.queue.take(self.pipeline)
        if index is not None:
            self.issued += 1
            return {"trial_index": index}
        return self.waiting() if self.queue else Searcher.FINISHED

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        """Nothing to learn: the grid's trials are fixed (the results recorder writes the outcome)."""


class CellSearcher(StoreRecordSearcher):
    """Searches up to `capacity` cells of the call's queue, taking a cell once its checkpoint
    exists and the cells already taken have no trial to start (each waits for its running
    sample's results). Tune's config is (cell index in the call's cells, sample, seed index, the
    sample's point: learning rate and searched fields)."""

    def __init__(self, cells: list[CellSearch], queue: ReadyQueue, capacity: int, study: StudyLayout, seed: int,
                 startup_samples: int, pipeline: Pipeline | None = None, idle_workers: IdleWorkers | None = None):
        super().__init__(metric=SEARCH_METRIC, mode="max")
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.cells, self.queue, self.capacity, self.pipeline = cells, queue, capacity, pipeline or Pipeline()
        self.idle_workers = idle_workers
        self.seed, self.startup_samples = seed, startup_samples
        self.journal = OptunaJournal(study.optuna_journal, study=study)
        self.studies: dict[int, optuna.Study] = {}  # cell index -> its study, for the cells taken, in that order
        self.rerun: dict[int, dict[int, dict]] = {}  # cell index -> sample -> Optuna params to run again
        self.asked: dict[tuple[int, int], tuple[int, dict]] = {}  # (cell, sample) -> (Optuna trial, point)
        self.scores: dict[tuple[int, int], list[float]] = {}
        self.trial_sample: dict[str, tuple[int, int]] = {}

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True  # fixed at construction

    def distributions(self, cell: CellSearch) -> dict:
        return {name: spaces.optuna_distribution(dist) for name, dist in cell.space.items()}

    def start_cell(self, index: int) -> None:
        """The cell's study, made or loaded from the journal and reconciled with the store, and
        its TPE sampler (`sampler`)."""
        import optuna

        cell = self.cells[index]
        study = optuna.create_study(study_name=cell.study_name, storage=self.journal.storage,
                                    direction="maximize", load_if_exists=True)
        self.rerun[index] = self.reconcile(study, cell)
        study.sampler = self.sampler(cell, len(study.get_trials(deepcopy=False)))
        self.studies[index] = study

    def sampler(self, cell: CellSearch, stored: int):
        """A TPE sampler seeded by the cell's position in the plan and the trials its study holds
        already: the same proposals whichever shard takes the cell, and when. A resumed cell's
        sampler starts a new random stream: seeded as a fresh cell's, its start-up draws (random
        until `startup_samples` results) would begin again at the points the study already
        tried (issue #54). A fresh cell (`stored` 0) keeps the seed it always had."""
        import numpy as np
        import optuna

        seed = (self.seed * 1_000_003 + cell.number) % 2**32
        if stored:
            seed = int(np.random.SeedSequence([seed, stored]).generate_state(1)[0])
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=self.startup_samples)

    def reconcile(self, study, cell: CellSearch) -> dict[int, dict]:
        """Make the study agree with the store, the record: fail the trials a killed driver left
        running (or queued), add the recorded samples it lacks; returns the samples it completed
        that the store lacks (sample -> Optuna params), to be run again at the same point."""
        import optuna
        from optuna.trial import TrialState

        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            study.tell(trial.number, state=TrialState.FAIL)
        for _ in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            study.tell(study.ask(), state=TrialState.FAIL)
        completed = {t.user_attrs.get("sample"): t for t in study.get_trials(deepcopy=False,
                                                                              states=(TrialState.COMPLETE,))}
        distributions = self.distributions(cell)
        for sample, point, score in cell.evaluated:
            if sample not in completed:
                params = {name: spaces.to_optuna(dist, point[name]) for name, dist in cell.space.items()}
                study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, value=score,
                                                          user_attrs={"sample": sample, "from_store": True}))
        return {sample: dict(trial.params) for sample, trial in completed.items()
                if sample is not None and sample >= cell.first_sample}

    def ask(self, index: int, sample: int) -> tuple[int, dict]:
        """Sample `sample` of the cell: (its Optuna trial number, its point)."""
        cell, study = self.cells[index], self.studies[index]
        if (params := self.rerun[index].pop(sample, None)) is not None:
            study.enqueue_trial(params, user_attrs={"sample": sample})
        with warnings.catch_warnings():  # enqueued values are checked against the space: no news here
            warnings.simplefilter("ignore", UserWarning)
            trial = study.ask(self.distributions(cell))
        trial.set_user_attr("sample", sample)
        point = {name: spaces.from_optuna(dist, trial.params[name]) for name, dist in cell.space.items()}
        return trial.number, point

    def in_flight_samples(self, cell: CellSearch) -> int:
        return math.ceil(cell.issued / cell.seeds) - cell.completed_groups

    def issue(self, index: int, trial_id: str) -> dict:
        cell = self.cells[index]
        sample, seed_index = cell.first_sample + cell.issued // cell.seeds, cell.issued % cell.seeds
        if seed_index == 0:
            self.asked[(index, sample)] = self.ask(index, sample)
        _, point = self.asked[(index, sample)]
        cell.issued += 1
        self.trial_sample[trial_id] = (index, sample)
        # The point travels once: the shard turns it into the planned trial's settings (OptunaShard.trial).
        return {"cell": index, "sample": sample, "seed_index": seed_index, "point": point}

    def suggest(self, trial_id: str):
        waiting = False
        for index in self.studies:
            cell = self.cells[index]
            if cell.trials_left == 0:
                continue
            # A new sample only when the previous one is complete: TPE then sees every result.
            if cell.issued % cell.seeds == 0 and self.in_flight_samples(cell) > 0:
                waiting = True
                continue
            return self.issue(index, trial_id)
        if len(self.studies) < self.capacity:
            index = self.queue.take(self.pipeline)
            if index is not None:
                self.start_cell(index)
                return self.issue(index, trial_id)
            waiting = waiting or bool(self.queue)
        return self.waiting() if waiting else Searcher.FINISHED

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        index, sample = self.trial_sample.pop(trial_id)
        # A failed trial counts as the worst score, like a diverged one; a stopped one (a trial
        # scheduler) by its last curve point.
        score = float(result[SEARCH_METRIC]) if result and SEARCH_METRIC in result else 0.0
        scores = self.scores.setdefault((index, sample), [])
        scores.append(score)
        if len(scores) == self.cells[index].seeds:
            number, _ = self.asked.pop((index, sample))
            self.studies[index].tell(number, sum(scores) / len(scores))
            del self.scores[(index, sample)]
            self.cells[index].completed_groups += 1
            self.journal.save(force=self.done())

    def done(self) -> bool:
        """Whether this searcher has nothing left to ask or tell: its cells are searched to their
        end and it can take no other (the queue is empty, or it holds as many as it may)."""
        return (not self.asked and all(self.cells[i].trials_left == 0 for i in self.studies)
                and (not self.queue or len(self.studies) >= self.capacity))
