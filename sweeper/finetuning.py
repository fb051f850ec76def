"""Schedule the fine-tuning grid on Ray Tune and record every finished trial in the store.

Built for the paper's ~18,000 trials from the start:
- plain function trainables (Train-in-Tune costs ~15 s a trial), `reuse_actors=True` (2 s -> 0.05 s
  of Tune overhead per trial), and Tune's per-trial loggers off: the Parquet store is the record;
- the pending trials (planned minus already recorded) are split into shards of
  `trials_per_shard`, one Tuner run each, so the driver's memory stays bounded;
- trials are ordered by checkpoint then task, so a reused worker keeps the same backbone and
  tokenised data in its cache from one trial to the next;
- a Tune callback buffers results and writes them in batches (one Parquet file per batch).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import time
from datetime import datetime, timezone
from pathlib import Path

import ray
from ray import tune

from sweeper.catalog import task_dict
from sweeper.pretraining import checkpoint_path
from sweeper.progress import ProgressLine
from sweeper.plan import StudyPlan, Trial, finetune_protocol, stable_key
from sweeper.spec import StudySpec
from sweeper.store import TRIALS, finished_trial_keys, write_rows

# Tune's JSON/CSV/TensorBoard loggers write a directory per trial; the store replaces them.
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
# ...and without them Tune's result grid warns about every trial's missing metric files.
logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)


def finetune_trainable(config: dict, payloads: list[dict], protocol: dict) -> None:
    """The Tune function trainable; imports the worker side only inside the trial's process.

    A trial's Tune config is only its index into `payloads` (shipped once through the object
    store by `tune.with_parameters`): Tune keeps and rewrites every trial's config in its
    experiment state, so full payloads there would cost ~18 KB per trial.
    """
    from trainables.finetune_loop import tune_trainable

    tune_trainable(payloads[config["trial_index"]], protocol)


def prepare_task(task: dict, tokenizer_dir: str, max_length: int, out_dir: str, max_train, max_eval) -> dict:
    from trainables.tasks.data import prepare_task_data

    return prepare_task_data(task, tokenizer_dir, max_length, out_dir, max_train, max_eval)


def prepare_tasks(spec: StudySpec, study_dir: Path, tokenizer_dirs: dict) -> dict[tuple, str]:
    """Tokenise each task once per tokenizer and max length (Ray tasks, in parallel); return
    (tokenizer key, task) -> prepared dir. Every trial reads these; none tokenises."""
    ft = spec.finetuning
    dirs = {
        (tokenizer, task): str(study_dir / "cache" / "tasks" / (
            f"{task}-{stable_key({'tokenizer': tokenizer}) if tokenizer else 'study'}-len{ft.max_length}-"
            f"{ft.max_train_examples or 'all'}-{ft.max_eval_examples or 'all'}"))
        for tokenizer in tokenizer_dirs for task in ft.tasks
    }
    remote = ray.remote(prepare_task).options(num_cpus=1)
    metas = ray.get([
        remote.remote(task_dict(task), str(tokenizer_dirs[tokenizer]), ft.max_length, out,
                      ft.max_train_examples, ft.max_eval_examples)
        for (tokenizer, task), out in dirs.items()
    ])
    for meta in metas:
        print(f"[finetune] task {meta['task']}: {meta['sizes']} examples, {len(meta['labels'])} labels", flush=True)
    return dirs


def short_trial_dirname(trial) -> str:
    """Tune names trial folders after their whole config by default: long and useless here."""
    return f"trial-{trial.config['trial_index']:05d}"


def trial_payload(trial: Trial, study_dir: Path, task_dirs: dict[str, str]) -> dict:
    ckpt = trial.checkpoint
    return {
        "trial_key": trial.trial_key, "checkpoint_path": str(checkpoint_path(study_dir, ckpt.run, ckpt.step)),
        "task": task_dict(trial.task), "task_data_dir": task_dirs[(ckpt.run.tokenizer, trial.task)],
        "learning_rate": trial.learning_rate, "seed": trial.seed,
    }


def trial_row(study: str, trial: Trial, result: dict | None, status: str, error: str | None) -> dict:
    ckpt, run, task = trial.checkpoint, trial.checkpoint.run, task_dict(trial.task)
    result = result or {}
    return {
        "study": study, "trial_key": trial.trial_key, "run_name": run.name, "run_key": run.run_key,
        "checkpoint_id": ckpt.checkpoint_id, "objective": run.objective, "clm_fraction": run.clm_fraction,
        "mask_ratio": run.mask_ratio, "checkpoint_step": ckpt.step, "total_steps": run.total_steps,
        "init_from": run.init_from, "steps_before": run.steps_before,
        "tokens_seen": ckpt.tokens_seen, "task": trial.task, "task_family": task["family"],
        "task_category": task["category"], "metric": task["metric"], "search_mode": "grid",
        "learning_rate": trial.learning_rate, "seed": trial.seed, "status": status,
        "validation_score": result.get("validation_score"), "test_score": result.get("test_score"),
        "train_loss": result.get("train_loss"), "train_steps": result.get("train_steps"),
        "error": error, "wall_time_s": result.get("wall_time_s"),
        "finished_at": datetime.now(timezone.utc),
    }


class ResultsRecorder(tune.Callback):
    """Tune callback: turns finished trials into store rows, written in batches."""

    def __init__(self, study: str, study_dir: Path, trials: list[Trial], progress: ProgressLine,
                 flush_rows: int = 50, flush_seconds: float = 10.0):
        self.study, self.study_dir, self.trials, self.progress = study, study_dir, trials, progress
        # A killed driver loses at most the unflushed rows: those trials simply run again.
        self.flush_rows, self.flush_seconds = flush_rows, flush_seconds
        self.buffer: list[dict] = []
        self.last_flush = time.time()
        self.running = 0

    def _add(self, row: dict) -> None:
        self.buffer.append(row)
        self.running -= 1
        self.progress.advance(row["status"])
        if len(self.buffer) >= self.flush_rows or time.time() - self.last_flush > self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        write_rows(self.study_dir, TRIALS, self.buffer)
        self.buffer, self.last_flush = [], time.time()
        write_live_state(self.study_dir, self.running)

    def on_trial_start(self, iteration, trials, trial, **info):
        self.running += 1
        if time.time() - self.last_flush > 2.0:
            write_live_state(self.study_dir, self.running)

    def on_trial_complete(self, iteration, trials, trial, **info):
        result = trial.last_result or {}
        planned = self.trials[trial.config["trial_index"]]
        self._add(trial_row(self.study, planned, result, result.get("status", "failed"), None))

    def on_trial_error(self, iteration, trials, trial, **info):
        planned = self.trials[trial.config["trial_index"]]
        error = trial_error_text(trial)
        self._add(trial_row(self.study, planned, None, "failed", str(error)[-2000:]))

    def on_experiment_end(self, trials, **info):
        self.running = 0
        self.flush()


def trial_error_text(trial) -> str:
    """The trial's traceback. Tune writes it to the trial's local folder before calling back and
    syncs it to storage later, so `trial.get_error()` (which reads storage) can still be empty."""
    local = Path(trial.error_file) if trial.error_file else None
    if local is not None and local.exists():
        return local.read_text()
    return trial.get_error() or "trial raised an error (no traceback recorded)"


LIVE_FILE = "live.json"


def write_live_state(study_dir: Path, running_trials: int) -> None:
    """`live.json`: the driver's pid and trials in flight, for `sweeper status`."""
    tmp = study_dir / f".{LIVE_FILE}.tmp"
    tmp.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                               "running_trials": running_trials, "updated_at": time.time()}))
    tmp.replace(study_dir / LIVE_FILE)


def run_finetuning(spec: StudySpec, plan: StudyPlan, study_dir: Path, tokenizer_dirs: dict, *,
                   skip_runs: set[str] = frozenset(), retry_failed: bool = False) -> dict[str, int]:
    """Run every planned trial not yet recorded; returns the tally of outcomes of this call."""
    done = finished_trial_keys(study_dir, include_failed=not retry_failed)
    blocked = [t for t in plan.trials if t.trial_key not in done and t.checkpoint.run.name in skip_runs]
    pending = [t for t in plan.trials if t.trial_key not in done and t.checkpoint.run.name not in skip_runs]
    print(f"[finetune] {len(plan.trials)} trials: {len(plan.trials) - len(pending) - len(blocked)} already "
          f"recorded, {len(blocked)} blocked by failed runs, {len(pending)} to run", flush=True)
    if not pending:
        return {}
    needed = {t.checkpoint.run.tokenizer for t in pending}
    task_dirs = prepare_tasks(spec, study_dir, {k: v for k, v in tokenizer_dirs.items() if k in needed})
    res = spec.resources
    protocol = {**finetune_protocol(spec), "micro_batch_size": spec.finetuning.micro_batch_size,
                "eval_batch_size": spec.finetuning.eval_batch_size, "threads": max(1, int(res.cpus_per_trial))}
    progress = ProgressLine("finetune", len(pending), unit="trials")
    shard_size = res.trials_per_shard
    for first in range(0, len(pending), shard_size):
        shard = pending[first:first + shard_size]
        payloads = [trial_payload(t, study_dir, task_dirs) for t in shard]
        trainable = tune.with_resources(
            tune.with_parameters(finetune_trainable, payloads=payloads, protocol=protocol),
            {"cpu": res.cpus_per_trial, "gpu": res.gpus_per_trial},
        )
        recorder = ResultsRecorder(spec.study, study_dir, shard, progress)
        name = f"finetune-shard-{first // shard_size:04d}"
        tuner = tune.Tuner(
            trainable,
            param_space={"trial_index": tune.grid_search(list(range(len(shard))))},
            tune_config=tune.TuneConfig(reuse_actors=True, max_concurrent_trials=res.max_concurrent_trials,
                                        trial_dirname_creator=short_trial_dirname),
            run_config=tune.RunConfig(
                name=name, storage_path=str(study_dir / "tune"),
                callbacks=[recorder], verbose=0, failure_config=tune.FailureConfig(max_failures=0),
            ),
        )
        tuner.fit()
        # Every outcome is in the store now; Tune's own state (an empty folder per trial and a
        # JSON rewritten as trials finish) is no record and is not kept.
        shutil.rmtree(study_dir / "tune" / name, ignore_errors=True)
    progress.finish()
    return dict(progress.tally)
