"""Recording: finished Tune trials -> rows of the results store, written in batches.

A trial row is the mark that a trial is done: rows are buffered and written in batches (one
Parquet file per batch, every 50 rows or within 10 s of a trial's end, whichever comes first,
even while no other trial finishes), its eval-curve points and (`finetuning.keep_predictions`)
its predictions first. An Optuna
sample's seeds are held until all are done, so the store only holds whole samples. `live.json`
is the driver's heartbeat for `sweeper status`.

Under a trial scheduler (sweeper.run.early_stopping) a trial reports each curve point, marked not
`final`, before its final result. A trial whose last result is such a point was stopped by the
scheduler: it is recorded as `stopped`, with that point's validation score, train loss and step,
no test score, and the curve points it reported (collected here as they come).

Three errors of a trial are interruptions, not failures, told apart by Ray's messages
(sweeper.run.ray_compat.trial_interruption): SIGTERM to the trial's worker or to its node (a
notice: a drained node stopped with SIGTERM is recorded by Ray 2.60 as terminated), the death of
a node Ray records as preempted (drained, then gone), and the loss of its node (raylet and
workers gone at once). Tune would requeue a preempted one by itself, with no cap; it is told to
count it as an error instead (`ray_compat.count_preempted_trials`), so all three come to
`on_trial_error`. Those trials get no row; each is appended to the study's
`trial_interruptions.json` (shown by `sweeper status`), and the fine-tuning loop runs them again,
same trial key and seed, from scratch (a trial keeps no checkpoint), after the shard, at most
`resources.max_preemptions` times (sweeper.run.tune_grid). Any other error is a failure,
recorded once.
"""
from __future__ import annotations

import os
import socket
import time
from datetime import datetime, UTC
from pathlib import Path

from ray import tune

from sweeper.plan.cost import parameter_count
from sweeper.plan.study_plan import EvaluatedCheckpoint, Trial
from sweeper.run.progress import ProgressLine
from sweeper.run.ray_compat import trial_interruption
from sweeper.contract.registry import get_task
from sweeper.contract.configs import params_text
from sweeper.store import storage
from sweeper.store.layout import StudyLayout
from sweeper.store.results import EVAL_CURVES, PREDICTIONS, PROTOCOL_COLUMNS, SCORE_COLUMNS, TRIALS, write_rows


PROTOCOL_NAMES = tuple(name for name, _ in PROTOCOL_COLUMNS)
SCORE_NAMES = tuple(name for name, _ in SCORE_COLUMNS)

FINAL = "final"
"""Result field: False on a curve point reported under a trial scheduler, True on a trial's
final result (absent from the results of trainables that report once: final)."""


def checkpoint_columns(ckpt: EvaluatedCheckpoint) -> dict:
    """What a row says of its checkpoint: its run's objective and schedule, or for a checkpoint
    from elsewhere its source and what its `meta` states (None where unstated); `source` is
    `study` for the study's own; `parameters` counts the backbone with its embedding, no LM head
    (an external one's from its config.json's sizes unless its meta states it); `replicate` and
    `arm` say which training of its configuration it is (sweeper.plan.replicates; an external
    checkpoint is replicate 0 of its own arm)."""
    if ckpt.run is None:
        external, meta = ckpt.external, ckpt.external.meta
        parameters = meta.parameters or (parameter_count(external.sizes) if external.sizes
                                         else None)
        return {"run_name": external.name, "run_key": external.key, "objective": meta.objective, "clm_fraction": None,
                "mask_ratio": meta.mask_ratio, "checkpoint_step": 0, "total_steps": None, "init_from": None,
                "steps_before": None, "tokens_seen": meta.tokens_seen, "source": storage.redact(external.source),
                "parameters": parameters, "replicate": 0, "arm": ckpt.arm}
    run = ckpt.run
    return {"run_name": run.name, "run_key": run.run_key, "objective": run.objective, "clm_fraction": run.clm_fraction,
            "mask_ratio": run.mask_ratio, "checkpoint_step": ckpt.step, "total_steps": run.total_steps,
            "init_from": run.init_from, "steps_before": run.steps_before, "tokens_seen": ckpt.tokens_seen,
            "source": "study", "parameters": parameter_count(run.model_config) if run.model_config else None,
            "replicate": run.replicate, "arm": ckpt.arm}


def trial_row(study: str, trial: Trial, result: dict | None, status: str, error: str | None) -> dict:
    ckpt, task = trial.checkpoint, get_task(trial.task)
    result = result or {}
    return {
        "study": study, "trial_key": trial.trial_key, "checkpoint_id": ckpt.checkpoint_id,
        **checkpoint_columns(ckpt), "task": trial.task, "task_family": task.family,
        "task_category": task.category, "metric": result.get("metric") or task.metric,
        "search_mode": trial.search_mode,
        "learning_rate": trial.learning_rate,  # the planned trial's (at its searched point): the one copy
        "seed": trial.seed, "sample": trial.sample, **protocol_columns(trial), "status": status,
        "validation_score": result.get("validation_score"), "test_score": result.get("test_score"),
        **{name: result.get(name) for name in SCORE_NAMES},
        "train_loss": result.get("train_loss"), "train_steps": result.get("train_steps"),
        "error": storage.redact(error) if error else error, "wall_time_s": result.get("wall_time_s"),
        "packing": result.get("packing"),
        "finished_at": datetime.now(UTC),
    }


def protocol_columns(trial: Trial) -> dict:
    """The store's columns of the trial's fine-tuning settings (sweeper.store.results.PROTOCOL_COLUMNS):
    each sweepable field as its protocol has it (None where it does not reach the task), and the
    swept values of its point as JSON."""
    fields = trial.protocol.key_fields()
    return {**{name: fields.get(name) for name in PROTOCOL_NAMES if name != "params"},
            "params": params_text(trial.params)}


CURVE_SHARED = ("study", "trial_key", "checkpoint_id", "task", "learning_rate", "seed", *PROTOCOL_NAMES)
"""The trial row's columns every eval-curve point of the trial repeats."""


class ResultsRecorder(tune.Callback):
    """Tune callback: turns finished trials into store rows, written in batches."""

    def __init__(self, study: str, layout: StudyLayout, shard, progress: ProgressLine,
                 flush_rows: int = 50, flush_seconds: float = 10.0, extra: dict | None = None, tracker=None):
        self.study, self.layout, self.shard, self.progress = study, layout, shard, progress
        self.tracker = tracker
        self.extra = extra or {}  # columns every row shares: resources, code version
        self.groups: dict[object, list[dict]] = {}
        # A killed driver loses at most the unflushed rows: those trials simply run again.
        self.flush_rows, self.flush_seconds = flush_rows, flush_seconds
        self.buffer: list[dict] = []
        self.last_flush = time.time()
        self.running = 0
        self.curves: dict[str, list[dict]] = {}  # Tune trial id -> curve points reported so far
        self.rerun = 0  # trials stopped by a preemption or a lost node, unrecorded: run again

    def add_rows(self, config: dict, result: dict, status: str, error: str | None) -> None:
        """Rows of one finished Tune trial: its own and its companions' (evaluation-only sets
        scored with its weights), less those a previous run already recorded."""
        planned = self.shard.trial(config)
        row = trial_row(self.study, planned, result, status, error)
        row["_curve"] = result.get("curve", [])
        rows = [row]
        for companion in self.shard.sets.companions(planned):
            scores = result.get("also_evaluated", {}).get(companion.trial_key, {})
            rows.append(trial_row(self.study, companion, {
                **result, **scores, "validation_score": scores.get("validation"), "test_score": scores.get("test")},
                status, error))
        predictions = result.get("predictions") or []  # finetuning.keep_predictions: every row's examples
        for r in rows:
            r["_predictions"] = [{**p, "task": r["task"], "finished_at": r["finished_at"]}
                                 for p in predictions if p["trial_key"] == r["trial_key"]]
        rows = [r for r in rows if r["trial_key"] not in self.shard.sets.recorded]
        for row in rows:
            row.update(self.extra)
            if self.tracker is not None:  # one W&B run for the whole grid, a row per trial
                self.tracker.log({k: v for k, v in row.items() if isinstance(v, (int, float, str, bool))})
        self.running -= 1
        self.tell_progress(row, status, error)
        self.progress.advance(status)
        group = self.shard.group(config)
        if group is None:
            self.buffer += rows
        else:  # held until every seed of the sample is done
            trials = self.groups.setdefault(group, [])
            trials.append(rows)
            if len(trials) == self.shard.group_size:
                self.buffer += [r for trial_rows in self.groups.pop(group) for r in trial_rows]
        if len(self.buffer) >= self.flush_rows or time.time() - self.last_flush > self.flush_seconds:
            self.flush()

    def tell_progress(self, row: dict, status: str, error: str | None) -> None:
        """The trial's validation score for its cell's best so far, or its failure, one line."""
        cell = f"{row['checkpoint_id']} / {row['task']}"
        point = f"LR {row['learning_rate']:g}" + (f", {row['params']}" if row.get("params") not in (None, "{}") else "")
        if status == "failed":
            self.progress.failed(f"{cell}, {point}, seed {row['seed']}", error)
        elif status == "ok":
            self.progress.scored(cell, row["validation_score"], f"validation, {point}, seed {row['seed']}")

    def flush(self) -> None:
        # Curves and predictions first: a trial row is the mark that a trial is done, so it goes
        # last. A trial run again after a write but before its row (a killed driver) writes them
        # again: readers and compaction keep one row per key, the latest (sweeper.store.results).
        write_rows(self.layout, PREDICTIONS, [p for row in self.buffer for p in row.pop("_predictions", [])])
        write_rows(self.layout, EVAL_CURVES, [
            {**{k: row[k] for k in CURVE_SHARED}, **point}
            for row in self.buffer for point in row.pop("_curve", [])
        ])
        write_rows(self.layout, TRIALS, self.buffer)
        self.buffer, self.last_flush = [], time.time()
        write_live_state(self.layout, self.running, self.progress)

    def on_step_end(self, iteration, trials, **info):
        # Tune calls this on every turn of its loop, finished trials or not: rows held back by the
        # batching (a trial done while the others run for minutes) reach the store within
        # flush_seconds, and live.json keeps beating.
        if time.time() - self.last_flush > self.flush_seconds:
            if self.buffer:
                self.flush()
            else:
                self.last_flush = time.time()
                write_live_state(self.layout, self.running, self.progress)

    def on_trial_start(self, iteration, trials, trial, **info):
        self.running += 1
        if time.time() - self.last_flush > 2.0:
            write_live_state(self.layout, self.running, self.progress)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result.get(FINAL) is False:
            self.curves.setdefault(trial.trial_id, []).append(
                {"step": result["train_steps"], "train_loss": result.get("train_loss"),
                 "validation_score": result.get("validation_score")})

    def on_trial_complete(self, iteration, trials, trial, **info):
        result = trial.last_result or {}
        curve = self.curves.pop(trial.trial_id, [])
        if result.get(FINAL) is False:  # stopped by the scheduler at its last curve point
            self.add_rows(trial.config, {**result, "curve": curve}, "stopped", None)
        else:
            self.add_rows(trial.config, result, result.get("status", "failed"), result.get("error"))
        result.pop("predictions", None)  # recorded: Tune's experiment state need not carry them

    def on_trial_error(self, iteration, trials, trial, **info):
        error = trial_error_text(trial)
        self.curves.pop(trial.trial_id, None)
        if (kind := trial_interruption(error)) is not None:  # no row, a record, one line
            self.running -= 1
            planned = self.shard.trial(trial.config)
            record_trial_interruption(self.layout, planned, kind, error)
            self.rerun += 1
            print(f"[finetune] {kind}: {planned.checkpoint.checkpoint_id} / {planned.task}, "
                  f"LR {planned.learning_rate:g}, seed {planned.seed}: run again after this shard", flush=True)
            return
        self.add_rows(trial.config, {}, "failed", error[-2000:])

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


def record_trial_interruption(layout: StudyLayout, trial: Trial, kind: str, error: str) -> None:
    """Append an interrupted trial (`kind`: "preemption" or "node lost") to the study's
    `trial_interruptions.json` (the driver is its one writer), with the last line of Ray's error."""
    last = (error or "").strip().splitlines()[-1:] or [""]
    entries = storage.read_json(layout.trial_interruptions, kind=list) or []
    storage.write_json(layout.trial_interruptions, [*entries, {
        "kind": kind, "at": time.time(), "trial_key": trial.trial_key, "checkpoint_id": trial.checkpoint.checkpoint_id,
        "task": trial.task, "seed": trial.seed, "error": storage.redact(last[0])[:300]}])


def write_live_state(layout: StudyLayout, running_trials: int, progress: ProgressLine | None = None) -> None:
    """`live.json`: the driver's pid, trials in flight and (with `progress`) its fine-tuning ETA in
    seconds (null before the first trial is done), for `sweeper status`."""
    eta = progress.seconds_left() if progress is not None else None
    storage.write_json(layout.live, {
        "pid": os.getpid(), "host": socket.gethostname(), "running_trials": running_trials,
        "updated_at": time.time(), "eta_s": eta, "stage": progress.stage if progress is not None else None},
        indent=None)
