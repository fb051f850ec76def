"""Shards follow checkpoint readiness: a ready checkpoint's trials run first, whatever shard the plan
put them in, while the trials of checkpoints not yet written wait; and the driver's state for the
paper's 18,000 trials stays small."""
from __future__ import annotations

import json
import pickle
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime, UTC
from pathlib import Path

import pytest
from ray.tune.search import Searcher

from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study
from sweeper.run.idle_workers import IdleWorkers
from sweeper.run.pipeline import Pipeline
from sweeper.run.shards import EvaluationSets, grid_shards, optuna_shards
from sweeper.store.layout import CHECKPOINT_MARKER, StudyLayout

from conftest import ROOT


def one_task_spec(trials_per_shard: int):
    """The smoke study's 4 checkpoints, one task, 2 seeds: 2 trials per checkpoint, one shard each
    when `trials_per_shard` is 2."""
    spec = load_study(ROOT / "search_spaces" / "smoke.yaml").spec
    return replace(spec, finetuning=replace(spec.finetuning, tasks=["wordnet-supersense-cls"]),
                   resources=replace(spec.resources, trials_per_shard=trials_per_shard))


class CountedRelease(IdleWorkers):
    """Counts the searcher's requests to free idle workers (`IdleWorkers.release`)."""

    def __init__(self, pipeline: Pipeline):
        super().__init__(pipeline)
        self.asked = 0

    def release(self) -> None:
        self.asked += 1


class WrittenCheckpoints:
    """A pretraining grid as the pipeline loop drives it: a checkpoint is ready once its marker is
    in the study's run folder, as the grid judges local-mode checkpoints. `poll()` stands for
    training: it writes the `later` checkpoints once `until()` holds or `deadline_s` has passed,
    and the grid is finished then."""

    def __init__(self, layout: StudyLayout, later: list, until=lambda: False, deadline_s: float = 60.0):
        self.layout, self.later, self.until = layout, later, until
        self.deadline = time.time() + deadline_s
        self.failed: set[str] = set()
        self.written_at: datetime | None = None

    def write(self, checkpoint) -> None:
        folder = Path(self.layout.checkpoint(checkpoint.run.name, checkpoint.step))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / CHECKPOINT_MARKER).write_text(json.dumps({"run_key": checkpoint.run.run_key}))

    def start(self) -> None:
        pass

    def poll(self, timeout: float = 0.0) -> None:
        if self.written_at is None and (self.until() or time.time() > self.deadline):
            for checkpoint in self.later:
                self.write(checkpoint)
            self.written_at = datetime.now(UTC)
        elif self.written_at is None:
            time.sleep(timeout)  # as a grid waits for a run to end

    @property
    def finished(self) -> bool:
        return self.written_at is not None

    def checkpoint_ready(self, run, step: int) -> bool:
        return step in self.layout.run(run.name).saved_checkpoints()


def test_a_grid_shard_takes_the_trials_of_the_checkpoint_written_first_whatever_its_plan_position(tmp_path):
    spec = one_task_spec(trials_per_shard=2)
    plan = plan_study(spec)
    layout = StudyLayout(str(tmp_path))
    shards = grid_shards(list(plan.trials), layout, {(None, "wordnet-supersense-cls"): "unused"}, 2)
    assert len(shards) == 4
    first, *others, last = plan.checkpoints
    pretraining = WrittenCheckpoints(layout, later=[first, *others])
    pretraining.write(last)
    pipeline = Pipeline(pretraining, plan.checkpoints)
    pipeline.step(0)

    searcher = shards[0].tuner_args(spec, pipeline)["search_alg"]
    taken = [shards[0].trial(searcher.suggest(f"t{n}")) for n in range(2)]
    assert {t.checkpoint.checkpoint_id for t in taken} == {last.checkpoint_id}
    assert searcher.suggest("t2") == Searcher.FINISHED  # the shard is full

    # The next shard waits while nothing it could take is written (freeing Tune's idle workers for
    # pretraining each time), then takes them in plan order.
    idle_workers = CountedRelease(pipeline)
    searcher = shards[1].tuner_args(spec, pipeline, idle_workers)["search_alg"]
    assert searcher.suggest("u0") is None and idle_workers.asked == 1
    pretraining.until = lambda: True
    assert searcher.suggest("u1") is None, "a searcher reads what the pipeline loop published, nothing else"
    assert not pipeline.step(0), "the grid is finished"
    assert shards[1].trial(searcher.suggest("u2")).checkpoint == first


def test_an_optuna_shard_takes_a_ready_cell_whatever_its_plan_position(tmp_path):
    spec = load_study(ROOT / "tests" / "specs" / "optuna.yaml").spec
    spec = replace(spec, resources=replace(spec.resources, trials_per_shard=4))  # one cell (2 samples x 2 seeds)
    plan = plan_study(spec)
    layout = StudyLayout(str(tmp_path))
    tasks = spec.finetuning.tasks
    sets = EvaluationSets(plan, tasks)
    shards = optuna_shards(spec, plan, list(plan.trials), set(), layout, {(None, t): "unused" for t in tasks}, sets)
    assert len(shards) == 4  # 2 checkpoints x 2 tasks, a cell each
    early, late = plan.checkpoints
    pretraining = WrittenCheckpoints(layout, later=[early])
    pretraining.write(late)
    pipeline = Pipeline(pretraining, plan.checkpoints)
    pipeline.step(0)
    idle_workers = CountedRelease(pipeline)
    searcher = shards[0].tuner_args(spec, pipeline, idle_workers)["search_alg"]
    config = searcher.suggest("t0")
    trial = shards[0].trial(config)
    assert (trial.checkpoint, trial.task, trial.sample) == (late, tasks[0], 0)
    assert 1e-4 <= trial.learning_rate <= 1e-2 and "learning_rate" not in config  # the point travels once
    second = shards[0].trial(searcher.suggest("t1"))  # the sample's other seed, same cell
    assert (second.checkpoint, second.task, second.sample, second.seed) == (late, tasks[0], 0, 1)
    assert searcher.suggest("t2") is None  # sample 1 waits for sample 0's results, no other cell taken
    assert idle_workers.asked == 1, "Tune's idle workers freed for pretraining as the searcher waits"


def test_idle_workers_are_freed_only_while_pretraining_trains_and_never_from_a_copy():
    """`IdleWorkers.release` reaches Tune's controller only once a trial handed it over and while
    the pipeline trains; the pickled copy a Tuner keeps holds no controller."""
    class Training(Pipeline):
        training = True

    class NoController:
        """Any use of it fails: what reached Tune's controller shows."""

    idle_workers = IdleWorkers(Pipeline())
    idle_workers.release()  # no controller yet
    idle_workers.controller = NoController()
    idle_workers.release()  # pretraining not under way: the controller is not touched
    assert pickle.loads(pickle.dumps(idle_workers)).controller is None
    idle_workers.pipeline = Training()
    with pytest.raises(AttributeError, match="_cleanup_cached_actors"):
        idle_workers.release()


def test_the_pipeline_loop_publishes_on_its_own_thread_and_an_error_in_it_stops_the_grid(tmp_path):
    spec = one_task_spec(trials_per_shard=2)
    plan = plan_study(spec)
    layout = StudyLayout(str(tmp_path))
    first, *others = plan.checkpoints
    released = []
    pretraining = WrittenCheckpoints(layout, later=[first], until=lambda: bool(released))
    pipeline = Pipeline(pretraining, plan.checkpoints, poll_every_s=0.01)
    pipeline.start()
    assert pipeline.ready(first) is False
    released.append(True)
    assert pipeline.wait() == [] and pipeline.ready(first) is True, "published by the loop, not asked for"
    assert pipeline.ready(others[0]) is False

    class BrokenGrid(WrittenCheckpoints):
        def poll(self, timeout: float = 0.0) -> None:
            raise OSError("the study's storage went away")

    broken = Pipeline(BrokenGrid(layout, later=[]), plan.checkpoints, poll_every_s=0.01)
    broken.start()
    with pytest.raises(OSError, match="went away"):
        broken.wait()
    with pytest.raises(RuntimeError, match="pipeline loop stopped") as stopped:
        broken.ready(others[0])  # a searcher waiting on it stops at once
    assert isinstance(stopped.value.__cause__, OSError)
    assert Pipeline().ready(others[0]) is True, "without pretraining every checkpoint is ready"


MEMORY_SCRIPT = """
import sys
sys.path.insert(0, {root!r})
from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study
import sweeper.run.tune_grid  # the driver's imports: Ray Tune included
from sweeper.run.pipeline import Pipeline
from sweeper.run.shards import EvaluationSets, grid_shards, trial_runtime
from sweeper.store.layout import StudyLayout

spec = load_study({root!r} + "/search_spaces/paper.yaml").spec
plan = plan_study(spec)
sets = EvaluationSets(plan, spec.finetuning.tasks)
training = sets.training_trials(list(plan.trials), list(plan.trials))
task_dirs = {{(c.run.tokenizer, task): "/unused" for c in plan.checkpoints for task in spec.finetuning.tasks}}
shards = grid_shards(training, StudyLayout("/tmp/unused-study"), task_dirs, spec.resources.trials_per_shard, sets,
                     trial_runtime(spec))
handed = 0
for shard in shards:  # every searcher built and drained, as the grid does shard by shard
    shipped = shard.for_workers()  # what run_shards hands tune.with_parameters: the queue's trials
    searcher = shard.tuner_args(spec, Pipeline())["search_alg"]
    while isinstance(config := searcher.suggest(str(handed)), dict):
        shipped.config_at(config)
        handed += 1
# VmHWM, this process's own peak: ru_maxrss would carry the parent's (exec keeps the pre-exec
# peak), and the test suite's process is itself ~1 GiB by the time this runs.
peak_kib = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(len(plan.trials), len(training), handed, peak_kib // 1024)
"""


@pytest.mark.long  # a fresh interpreter plans the paper's 18,000 trials: 7-8 s
def test_the_driver_plans_and_shards_the_papers_18000_trials_in_under_1_gib():
    measured = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT.format(root=str(ROOT))], capture_output=True,
                              text=True, timeout=300, cwd=ROOT)
    assert measured.returncode == 0, measured.stderr[-3000:]
    planned, training, handed, peak_mib = map(int, measured.stdout.split())
    print(f"paper plan: {planned} trials, {training} Tune trials, driver peak RSS {peak_mib} MiB")
    assert planned == 18_360 and handed == training
    assert peak_mib < 1024
