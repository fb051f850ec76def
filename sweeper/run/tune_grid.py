"""Schedule the fine-tuning grid on Ray Tune: pending trials -> shards -> one Tuner run each.

Built for the paper's ~18,000 trials from the start:
- plain function trainables (Train-in-Tune costs ~15 s a trial), `reuse_actors=True` (2 s -> 0.05 s
  of Tune overhead per trial), and Tune's per-trial loggers off: the Parquet store is the record;
- the pending trials (planned minus already recorded) run in shards of `trials_per_shard`
  (sweeper.run.shards), one Tuner run each, so the driver's memory stays bounded; the shards take
  the trials as the pipeline loop publishes their checkpoints as written (sweeper.run.pipeline,
  sweeper.run.search), so with pretraining still
  running, a written checkpoint's trials run while those of unwritten ones wait, whatever their
  place in the plan;
- trials are handed out by checkpoint then task, so a reused worker keeps the same backbone and
  tokenised data in its cache from one trial to the next;
- a Tune callback records results in batches (sweeper.run.recording);
- under a trial scheduler (sweeper.run.early_stopping: optuna and random modes) a trial reports each
  curve point and may be stopped there, with the other seeds of its point; without one, a
  trial reports once, at its end.
Tasks are tokenised once before the grid (sweeper.run.task_prep).
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict
from functools import partial

from ray import tune

from sweeper.plan.cost import trial_flops
from sweeper.plan.study_plan import StudyPlan, protocol_text
from sweeper.run.early_stopping import make_scheduler
from sweeper.run.idle_workers import IdleWorkers, IdleWorkerScheduler
from sweeper.run.own_checkpoints import refuse_edited_checkpoints
from sweeper.run.checkpoint_import import import_external_checkpoints
from sweeper.run.pipeline import Pipeline
from sweeper.run.progress import ProgressLine
from sweeper.run.recording import FINAL, ResultsRecorder, trial_row
from sweeper.run.search import SEARCH_METRIC, search_score
from sweeper.run.ray_compat import count_preempted_trials
from sweeper.run.shards import EvaluationSets, Shard, study_shards
from sweeper.contract.configs import ShardTrials
from sweeper.contract.heavy_imports import imports_frozen
from sweeper.contract.registry import get_task
from sweeper.run.task_prep import corpus_tokenizers, prepare_tasks
from sweeper.contract.tracking import start_wandb
from sweeper.run.version import code_version
from sweeper.spec.study import StudySpec
from sweeper.store import storage
from sweeper.store.layout import CHECKPOINT_MARKER, StudyLayout
from sweeper.store.permanent_errors import cause_line
from sweeper.store.results import EVAL_CURVES, PREDICTIONS, TRIALS, compact, finished_trial_keys, write_rows


def finetune_trainable(config: dict, trials: ShardTrials, report_curve: bool = False) -> None:
    """The Tune function trainable; imports the worker side only inside the trial's process.
    `config` locates the trial in its shard's `trials` (`Shard.for_workers`, shipped once by
    `tune.with_parameters`).

    With `report_curve` (a trial scheduler watches the shard) each curve point is reported as it
    is measured, marked not final, with what recording a stopped trial needs; Tune stops the
    trial by raising SystemExit inside such a report. The final result is marked final. A
    checkpoint that does not load (trainables.backbones.CheckpointUnloadable) ends the trial as
    failed with that one line as its error, reported as its final result; so does a write no
    retry mends (a full disk in the node's cache: sweeper.store.permanent_errors)."""
    with imports_frozen():
        from trainables.backbones import CheckpointUnloadable
        from trainables.finetune_loop import run_trial

    trial, started = trials.config_at(config), time.time()

    def report_point(step: int, train_loss: float, validation_score: float) -> None:
        point = {"trial_key": trial.trial_key, "learning_rate": trial.learning_rate, "train_steps": step,
                 "train_loss": train_loss, "validation_score": validation_score,
                 "wall_time_s": time.time() - started, FINAL: False}
        tune.report({**point, SEARCH_METRIC: search_score(point)})

    try:
        result = run_trial(trial, report_point if report_curve else None)
    except Exception as error:  # one line in the trial's row, not a traceback on the console
        # A checkpoint that does not load, or a full disk (the node's cache): said in one line.
        line = str(error) if isinstance(error, CheckpointUnloadable) else cause_line(error)
        if line is None:
            raise
        result = {"trial_key": trial.trial_key, "learning_rate": trial.learning_rate, "status": "failed",
                  "error": line, "wall_time_s": time.time() - started}
    tune.report({**result, SEARCH_METRIC: search_score(result), FINAL: True})


def cell_of(shard: Shard, config: dict) -> tuple[str, str]:
    """The (checkpoint, task) cell of the trial at `config`: what a trial scheduler compares
    points within (sweeper.run.early_stopping)."""
    trial = shard.trial(config)
    return trial.checkpoint.checkpoint_id, trial.task


def short_trial_dirname(trial) -> str:
    """Tune names trial folders after their whole config by default: long and useless here."""
    return f"trial-{trial.trial_id}"


def quiet_tune() -> None:
    """Tune's JSON/CSV/TensorBoard loggers write a directory per trial, which the store replaces;
    without them its result grid warns about every trial's missing metric files."""
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)


RERUN = "rerun"
"""Tally key of `run_shards`: trials a SIGTERM or a lost node stopped, left unrecorded to run again."""


def run_finetuning(spec: StudySpec, plan: StudyPlan, layout: StudyLayout, corpus_dirs: dict, *,
                   pipeline: Pipeline | None = None, retry_failed: bool = False) -> dict[str, int]:
    """Fine-tune every planned trial not yet recorded (`finetuning_round`), again for the trials a
    SIGTERM to their worker or the loss of their node stopped (neither is the trial's failure), at
    most `resources.max_preemptions` times more; returns the tally of outcomes, where trials still
    stopped after those rounds count as failed (unrecorded: the next `sweeper run` runs them)."""
    tally = finetuning_round(spec, plan, layout, corpus_dirs, pipeline=pipeline, retry_failed=retry_failed)
    for again in range(1, spec.resources.max_preemptions + 1):
        if not tally.get(RERUN):
            break
        print(f"[finetune] running the {tally[RERUN]} trial(s) a preemption or a lost node stopped again "
              f"(round {again} of at most {spec.resources.max_preemptions}: resources.max_preemptions)", flush=True)
        tally.pop(RERUN)
        # Failures recorded so far are counted by the new round as failed before: its count is the total.
        later = finetuning_round(spec, plan, layout, corpus_dirs, pipeline=pipeline, retry_failed=False)
        tally = {**{k: n + later.get(k, 0) for k, n in tally.items() if k != "failed"},
                 **{k: n for k, n in later.items() if k not in tally or k == "failed"}}
    if stopped := tally.pop(RERUN, 0):
        print(f"[finetune] {stopped} trial(s) still stopped by preemptions or lost nodes after "
              f"resources.max_preemptions rounds: unrecorded, the next `sweeper run` runs them", flush=True)
        tally["failed"] = tally.get("failed", 0) + stopped
    return tally


def finetuning_round(spec: StudySpec, plan: StudyPlan, layout: StudyLayout, corpus_dirs: dict, *,
                     pipeline: Pipeline | None = None, retry_failed: bool = False) -> dict[str, int]:
    """Run every planned trial not yet recorded; returns the tally of outcomes of this call,
    where trials recorded as failed before and not retried count as failed (as failed runs do:
    the study is still incomplete, `sweeper run` exits 1 and says `--retry-failed` reruns them).
    `corpus_dirs`: tokenizer key -> prepared corpus (whose tokenizer encodes the tasks).

    With the `pipeline` loop still pretraining, trials start as it publishes their checkpoints;
    trials of checkpoints that will never be written (their run failed) are skipped."""
    recorded = finished_trial_keys(layout)
    planned_keys = {t.trial_key for t in plan.trials}
    failed_before = (recorded - finished_trial_keys(layout, include_failed=False)) & planned_keys
    done = recorded - failed_before if retry_failed else recorded
    pipeline = pipeline or Pipeline()
    blocked = [t for t in plan.trials if t.trial_key not in done and pipeline.ready(t.checkpoint) is None]
    blocked_keys = {t.trial_key for t in blocked}
    pending = [t for t in plan.trials if t.trial_key not in done and t.trial_key not in blocked_keys]
    # Counted in trials (models trained), as the progress lines count: a row of an evaluation-only
    # set is its training trial's.
    sets = EvaluationSets(plan, spec.finetuning.tasks, done)
    trained = [t for t in plan.trials if not sets.evaluation_only(t)]
    to_run = sets.training_trials(trained, pending)
    blocked_trials = len(sets.training_trials(trained, blocked))
    skipped_failures = 0 if retry_failed else len(sets.training_trials(
        trained, [t for t in plan.trials if t.trial_key in failed_before]))
    print(f"[finetune] {len(trained)} trials: {len(trained) - len(to_run) - blocked_trials} already recorded"
          + (f" ({skipped_failures} failed before: --retry-failed reruns them)" if skipped_failures else "")
          + f", {blocked_trials} blocked by failed runs, {len(to_run)} to run", flush=True)
    earlier = {"failed": skipped_failures} if skipped_failures else {}
    if not pending:
        return earlier
    not_imported, not_prepared, refused = {}, {}, {}
    # The study's own checkpoints written before this run: a config.json edited since is refused here, once.
    refuse_edited_checkpoints([t.checkpoint for t in pending if pipeline.ready(t.checkpoint)], layout, refused)
    imported = import_external_checkpoints([t.checkpoint for t in pending], layout, not_imported)
    not_imported |= refused
    tokenizers = {**corpus_tokenizers(corpus_dirs),
                  **{t.checkpoint.tokenizer: (imported[t.checkpoint.checkpoint_id], CHECKPOINT_MARKER)
                     for t in pending if t.checkpoint.checkpoint_id in imported}}
    needed = {t.checkpoint.tokenizer for t in pending if t.checkpoint.checkpoint_id not in not_imported}
    task_dirs = prepare_tasks(spec, layout, {k: v for k, v in tokenizers.items() if k in needed}, not_prepared)
    unrunnable = record_unrunnable(spec, layout, pending, not_imported, not_prepared)
    if unrunnable:
        pending = [t for t in pending if t.trial_key not in unrunnable]
        to_run = [t for t in to_run if t.trial_key not in unrunnable]
    shards = study_shards(spec, plan, pending, done, layout, task_dirs, sets) if pending else []
    tally = run_shards(spec, shards, layout, pipeline=pipeline, work=planned_work(spec, to_run)) if shards else {}
    if unrunnable:
        failed = len(sets.training_trials(trained, [t for t in plan.trials if t.trial_key in unrunnable]))
        tally = {**tally, "failed": tally.get("failed", 0) + failed}
    return {**tally, "failed": tally.get("failed", 0) + skipped_failures} if skipped_failures else tally


def record_unrunnable(spec: StudySpec, layout: StudyLayout, pending: list, not_imported: dict[str, str],
                      not_prepared: dict[tuple, str]) -> set[str]:
    """Record as failed, with one line of reason, each pending trial whose checkpoint could not be
    imported, or was refused (`not_imported`: checkpoint id -> reason, the study's own ones among
    them: sweeper.run.own_checkpoints), or whose task data (or that of a set it is scored on) could
    not be prepared; returns their trial keys."""
    rows = []
    for trial in pending:
        tokenizer, task = trial.checkpoint.tokenizer, trial.task
        reason = not_imported.get(trial.checkpoint.checkpoint_id)
        if reason is None:
            tasks = (task, get_task(task).train_task,
                     *(t for t in spec.finetuning.tasks if get_task(t).train_task == task))
            reason = next((f"task data of {t} not prepared: {not_prepared[(tokenizer, t)]}" for t in tasks
                           if (tokenizer, t) in not_prepared), None)
        elif trial.checkpoint.run is not None:  # the study's own, refused (sweeper.run.own_checkpoints)
            reason = f"checkpoint {trial.checkpoint.checkpoint_id} refused: {reason}; nothing from its folder ran"
        else:
            reason = f"checkpoint {trial.checkpoint.checkpoint_id} not imported: {reason}"
        if reason is not None:
            rows.append(trial_row(spec.study, trial, None, "failed", reason))
    write_rows(layout, TRIALS, rows)
    return {row["trial_key"] for row in rows}


def planned_work(spec: StudySpec, trials: list) -> dict[str, tuple[int, float]]:
    """task -> (trials, mean FLOPs of one) over `trials`, from the plan's cost model: how the
    fine-tuning ETA weighs trials before their timings are known (sweeper.run.progress). A
    trial whose backbone is sized at run time counts as its task's mean (else all trials')."""
    flops: dict[tuple, float | None] = {}
    by_task: dict[str, list[float | None]] = {}
    for trial in trials:
        key = (trial.task, protocol_text(trial.protocol), trial.checkpoint.checkpoint_id)
        if key not in flops:
            flops[key] = trial_flops(spec, trial)
        by_task.setdefault(trial.task, []).append(flops[key])
    known = [f for values in by_task.values() for f in values if f is not None]
    fallback = sum(known) / len(known) if known else 1.0
    work = {}
    for task, values in by_task.items():
        sized = [f for f in values if f is not None]
        work[task] = (len(values), sum(sized) / len(sized) if sized else fallback)
    return work


class TrialClock(tune.Callback):
    """Tells the progress line when each trial of a shard starts and ends, and its task (the
    ETA's group). Listed before the results recorder, whose `advance` prints the line."""

    def __init__(self, shard: Shard, progress: ProgressLine):
        self.shard, self.progress = shard, progress

    def on_trial_start(self, iteration, trials, trial, **info):
        self.progress.begin(trial.trial_id)

    def on_trial_complete(self, iteration, trials, trial, **info):
        seconds = (trial.last_result or {}).get("wall_time_s")  # the trial's own: no worker start-up
        self.progress.end(trial.trial_id, self.shard.trial(trial.config).task, seconds)

    def on_trial_error(self, iteration, trials, trial, **info):
        self.progress.end(trial.trial_id, self.shard.trial(trial.config).task)


def run_shards(spec: StudySpec, shards: list[Shard], layout: StudyLayout, trainable_fn=finetune_trainable,
               pipeline: Pipeline | None = None, work: dict[str, tuple[int, float]] | None = None,
               **trainable_args) -> dict[str, int]:
    """One Tuner run per shard, outcomes recorded as they come; returns the tally. `work`: the
    ETA's estimate (`planned_work`). The benchmarks pass their own `trainable_fn` (and its
    `trainable_args`) to time this machinery with a fixed workload."""
    quiet_tune()
    count_preempted_trials()  # a preempted trial comes to the recorder, run again within max_preemptions
    pipeline = pipeline or Pipeline()
    res = spec.resources
    progress = ProgressLine("finetune", sum(len(shard) for shard in shards), unit="trials", work=work)
    rerun = 0  # trials stopped by SIGTERM or a lost node, unrecorded (sweeper.run.recording)
    tracker = start_wandb(spec.tracking, name=f"{spec.study}-trials", run_id=f"{spec.study}-trials",
                          location=layout.root, config=asdict(spec.finetuning))
    # Tune's own state goes to the study's filesystem (an object store included).
    tune_filesystem, tune_path = storage.filesystem(layout.tune)
    for number, shard in enumerate(shards):
        if not shard.has_work(pipeline):
            continue
        idle_workers = IdleWorkers(pipeline)  # freed while pretraining waits for them (sweeper.run.idle_workers)
        early_stopping = make_scheduler(spec.finetuning, cell_of=partial(cell_of, shard),
                                        point_of=shard.point, idle_workers=idle_workers)
        trainable = tune.with_resources(
            tune.with_parameters(trainable_fn, trials=shard.for_workers(), **trainable_args,
                                 **({"report_curve": True} if early_stopping is not None else {})),
            {"cpu": res.cpus_per_trial, "gpu": res.gpus_per_trial, **res.custom_resources_per_trial},
        )
        name = f"finetune-shard-{number:04d}"
        search = shard.tuner_args(spec, pipeline, idle_workers)
        recorder = ResultsRecorder(spec.study, layout, shard, progress, extra={
            "cpus": res.cpus_per_trial, "gpus": res.gpus_per_trial, "code_version": code_version()}, tracker=tracker)
        tuner = tune.Tuner(
            trainable,
            param_space=search.pop("param_space"),
            tune_config=tune.TuneConfig(reuse_actors=True, max_concurrent_trials=res.max_concurrent_trials,
                                        trial_dirname_creator=short_trial_dirname,
                                        scheduler=early_stopping or IdleWorkerScheduler(idle_workers),
                                        **search),
            run_config=tune.RunConfig(
                name=name, storage_path=tune_path, verbose=0,
                storage_filesystem=tune_filesystem if storage.is_remote(layout.root) else None,
                callbacks=[TrialClock(shard, progress), recorder],
                failure_config=tune.FailureConfig(max_failures=0),
            ),
        )
        try:
            tuner.fit()
        except KeyboardInterrupt:  # SIGINT/SIGTERM (sweeper.run.interrupts): the rows held back are finished trials
            recorder.flush()
            raise
        rerun += recorder.rerun
        # Every outcome is in the store now; Tune's own state (an empty folder per trial and a
        # JSON rewritten as trials finish) is no record and is not kept.
        storage.remove_tree(storage.join(layout.tune, name))
        for table in (TRIALS, EVAL_CURVES, PREDICTIONS):
            compact(layout, table)
    progress.finish()
    if tracker is not None:
        tracker.finish()
    return {**progress.tally, **({RERUN: rerun} if rerun else {})}
