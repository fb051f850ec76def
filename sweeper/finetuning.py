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

import logging
import os
import socket
import time
from datetime import datetime, timezone
from dataclasses import asdict
from pathlib import Path

import ray
from ray import tune

from sweeper import storage
from sweeper.catalog import task_dict
from sweeper.pretraining import checkpoint_path
from sweeper.progress import ProgressLine
from sweeper.plan import StudyPlan, Trial, finetune_protocol, stable_key, task_budget
from sweeper.spec import StudySpec
from sweeper.search import SEARCH_METRIC, CellSearch, CellSearcher, Gate, GridSearcher, search_score
from sweeper.store import EVAL_CURVES, TRIALS, compact, finished_trial_keys, read_trials, write_rows
from sweeper.version import code_version

# Tune's JSON/CSV/TensorBoard loggers write a directory per trial; the store replaces them.
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
# ...and without them Tune's result grid warns about every trial's missing metric files.
logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)


def finetune_trainable(config: dict, shard: "GridShard | OptunaShard", protocol: dict) -> None:
    """The Tune function trainable; imports the worker side only inside the trial's process.

    A trial's Tune config only locates it in the shard (shipped once through the object store
    by `tune.with_parameters`): Tune keeps and rewrites every trial's config in its experiment
    state, so full payloads there would cost ~18 KB per trial.
    """
    from trainables.finetune_loop import run_trial

    result = run_trial(shard.payload(config), protocol)
    tune.report({**result, SEARCH_METRIC: search_score(result)})


def prepare_task(task: dict, corpus_dir: str, max_length: int, out_dir: str, max_train, max_eval,
                 settings: dict) -> dict:
    """Ray task: tokenise one task with the tokenizer of the prepared corpus at `corpus_dir`."""
    from trainables.corpus import META_FILE
    from trainables.tasks.data import prepare_task_data

    tokenizer_dir = storage.local_copy(corpus_dir, META_FILE, only="tokenizer")
    return prepare_task_data(task, str(tokenizer_dir), max_length, out_dir, max_train, max_eval, settings)


def encoding_settings(spec: StudySpec, task: str) -> dict:
    """Family settings that change the tokenised data (QA windows), hence the cache folder."""
    return {"doc_stride": spec.finetuning.doc_stride} if task_dict(task)["family"] == "extractive_qa" else {}


def prepare_tasks(spec: StudySpec, study_dir: str, corpus_dirs: dict) -> dict[tuple, str]:
    """Tokenise each task once per tokenizer (the tokenizer of each prepared corpus in
    `corpus_dirs`) and max length, in parallel Ray tasks; return (tokenizer key, task) ->
    prepared dir. Every trial reads these; none tokenises."""
    ft = spec.finetuning
    dirs = {
        (tokenizer, task): storage.join(study_dir, "cache", "tasks", (
            f"{task}-{stable_key({'tokenizer': tokenizer}) if tokenizer else 'study'}-len{ft.max_length}-"
            f"{ft.max_train_examples or 'all'}-{ft.max_eval_examples or 'all'}"
            + "".join(f"-{key}{value}" for key, value in encoding_settings(spec, task).items())))
        for tokenizer in corpus_dirs for task in ft.tasks
    }
    remote = ray.remote(prepare_task).options(num_cpus=1)
    metas = ray.get([
        remote.remote(task_dict(task), corpus_dirs[tokenizer], ft.max_length, out,
                      ft.max_train_examples, ft.max_eval_examples, encoding_settings(spec, task))
        for (tokenizer, task), out in dirs.items()
    ])
    for meta in metas:
        detail = (f"{len(meta['labels'])} labels" if meta["labels"] else
                  f"{meta['windows']} windows" if "windows" in meta else f"document pools {meta['pool']}")
        print(f"[finetune] task {meta['task']}: {meta['sizes']} examples, {detail}", flush=True)
    return dirs


def short_trial_dirname(trial) -> str:
    """Tune names trial folders after their whole config by default: long and useless here."""
    return f"trial-{trial.trial_id}"


class EvaluationSets:
    """Evaluation-only retrieval sets (NQ, MLDR) are scored by the trial that trains their model
    (on MS MARCO): their planned trials ride along with that trial as its companions, and one
    Tune trial records the rows of all of them."""

    def __init__(self, plan: StudyPlan | None = None, tasks: list[str] = (), recorded: set[str] = frozenset()):
        self.recorded = recorded  # keys already in the store: a rerun records only the missing rows
        self.by_train_task: dict[str, list[str]] = {}
        for task in tasks:
            if task_dict(task)["train_task"]:
                self.by_train_task.setdefault(task_dict(task)["train_task"], []).append(task)
        self.index = {self.cell(t, t.task): t for t in plan.trials} if self.by_train_task else {}

    @staticmethod
    def cell(trial: Trial, task: str) -> tuple:
        return trial.checkpoint.checkpoint_id, task, trial.learning_rate, trial.sample, trial.seed

    @staticmethod
    def evaluation_only(trial: Trial) -> bool:
        return task_dict(trial.task)["train_task"] is not None

    def companions(self, trial: Trial) -> list[Trial]:
        return [self.index[self.cell(trial, task)] for task in self.by_train_task.get(trial.task, [])]

    def training_trials(self, trials: list[Trial], pending: list[Trial]) -> list[Trial]:
        """The trials to run: pending ones that train, and those whose companions are pending."""
        pending_keys = {t.trial_key for t in pending}
        return [t for t in trials if not self.evaluation_only(t)
                and (t.trial_key in pending_keys or any(c.trial_key in pending_keys for c in self.companions(t)))]


def trial_payload(trial: Trial, study_dir: str, task_dirs: dict, sets: EvaluationSets) -> dict:
    ckpt = trial.checkpoint
    return {
        "trial_key": trial.trial_key, "checkpoint_path": checkpoint_path(study_dir, ckpt.run, ckpt.step),
        "task": task_dict(trial.task), "task_data_dir": task_dirs[(ckpt.run.tokenizer, trial.task)],
        "learning_rate": trial.learning_rate, "seed": trial.seed,
        "also_evaluate": [{"trial_key": c.trial_key, "task_data_dir": task_dirs[(ckpt.run.tokenizer, c.task)]}
                          for c in sets.companions(trial)],
    }


class GridShard:
    """Trials of a fixed grid: Tune's config is the trial's index."""

    group_size = 1

    def __init__(self, trials: list[Trial], study_dir: str, task_dirs: dict, sets: EvaluationSets | None = None):
        self.trials, self.sets = trials, sets or EvaluationSets()
        self.payloads = [trial_payload(t, study_dir, task_dirs, self.sets) for t in trials]

    def __len__(self) -> int:
        return len(self.trials)

    def tuner_args(self, spec: StudySpec, gate: Gate) -> dict:
        return {"param_space": {}, "search_alg": GridSearcher(self.trials, gate), "num_samples": len(self.trials)}

    def payload(self, config: dict) -> dict:
        return self.payloads[config["trial_index"]]

    def trial(self, config: dict) -> Trial:
        return self.trials[config["trial_index"]]

    def group(self, config: dict):
        return None


class OptunaShard:
    """Whole cells searched by `CellSearcher`: Tune's config is (cell, sample, seed index, lr).

    Rows of a sample are recorded together once all its seeds are done, so the store only ever
    holds whole samples, which is what lets a resumed search warm-start from them."""

    def __init__(self, cells: list[list[list[Trial]]], searches: list[CellSearch], study_dir: str, task_dirs: dict,
                 sets: EvaluationSets):
        self.cells = cells  # cells[c][sample][seed index] -> planned trial
        self.searches, self.sets, self.study_dir, self.task_dirs = searches, sets, study_dir, task_dirs
        self.group_size = len(cells[0][0])

    def __len__(self) -> int:
        return sum(search.trials_left for search in self.searches)

    def tuner_args(self, spec: StudySpec, gate: Gate) -> dict:
        optuna = spec.finetuning.optuna
        searcher = CellSearcher(self.searches, optuna.lr_min, optuna.lr_max, optuna.seed, optuna.startup_samples,
                                checkpoints=[cell[0][0] for cell in self.cells], gate=gate)
        return {"param_space": {}, "search_alg": searcher, "num_samples": len(self)}

    def trial(self, config: dict) -> Trial:
        return self.cells[config["cell"]][config["sample"]][config["seed_index"]]

    def payload(self, config: dict) -> dict:
        trial = self.trial(config)
        return {**trial_payload(trial, self.study_dir, self.task_dirs, self.sets),
                "learning_rate": config["learning_rate"]}

    def group(self, config: dict):
        return config["cell"], config["sample"]


def trial_row(study: str, trial: Trial, result: dict | None, status: str, error: str | None) -> dict:
    ckpt, run, task = trial.checkpoint, trial.checkpoint.run, task_dict(trial.task)
    result = result or {}
    return {
        "study": study, "trial_key": trial.trial_key, "run_name": run.name, "run_key": run.run_key,
        "checkpoint_id": ckpt.checkpoint_id, "objective": run.objective, "clm_fraction": run.clm_fraction,
        "mask_ratio": run.mask_ratio, "checkpoint_step": ckpt.step, "total_steps": run.total_steps,
        "init_from": run.init_from, "steps_before": run.steps_before,
        "tokens_seen": ckpt.tokens_seen, "task": trial.task, "task_family": task["family"],
        "task_category": task["category"], "metric": task["metric"],
        "search_mode": "grid" if trial.sample is None else "optuna",
        "learning_rate": trial.learning_rate if trial.learning_rate is not None else result.get("learning_rate"),
        "seed": trial.seed, "sample": trial.sample, "status": status,
        "validation_score": result.get("validation_score"), "test_score": result.get("test_score"),
        "train_loss": result.get("train_loss"), "train_steps": result.get("train_steps"),
        "error": error, "wall_time_s": result.get("wall_time_s"),
        "finished_at": datetime.now(timezone.utc),
    }


class ResultsRecorder(tune.Callback):
    """Tune callback: turns finished trials into store rows, written in batches."""

    def __init__(self, study: str, study_dir: str, shard, progress: ProgressLine,
                 flush_rows: int = 50, flush_seconds: float = 10.0, extra: dict | None = None, tracker=None):
        self.study, self.study_dir, self.shard, self.progress = study, study_dir, shard, progress
        self.tracker = tracker
        self.extra = extra or {}  # columns every row shares: resources, code version
        self.groups: dict[object, list[dict]] = {}
        # A killed driver loses at most the unflushed rows: those trials simply run again.
        self.flush_rows, self.flush_seconds = flush_rows, flush_seconds
        self.buffer: list[dict] = []
        self.last_flush = time.time()
        self.running = 0

    def _add(self, config: dict, result: dict, status: str, error: str | None) -> None:
        """Rows of one finished Tune trial: its own and its companions' (evaluation-only sets
        scored with its weights), less those a previous run already recorded."""
        planned = self.shard.trial(config)
        row = trial_row(self.study, planned, result, status, error)
        row["_curve"] = result.get("curve", [])
        rows = [row]
        for companion in self.shard.sets.companions(planned):
            scores = result.get("also_evaluated", {}).get(companion.trial_key, {})
            rows.append(trial_row(self.study, companion, {
                **result, "validation_score": scores.get("validation"), "test_score": scores.get("test")},
                status, error))
        rows = [r for r in rows if r["trial_key"] not in self.shard.sets.recorded]
        for row in rows:
            row.update(self.extra)
            if self.tracker is not None:  # one W&B run for the whole grid, a row per trial
                self.tracker.log({k: v for k, v in row.items() if isinstance(v, (int, float, str, bool))})
        self.running -= 1
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

    def flush(self) -> None:
        # Curves first: a trial row is the mark that a trial is done, so it goes last.
        write_rows(self.study_dir, EVAL_CURVES, [
            {**{k: row[k] for k in ("study", "trial_key", "checkpoint_id", "task", "learning_rate", "seed")}, **point}
            for row in self.buffer for point in row.pop("_curve", [])
        ])
        write_rows(self.study_dir, TRIALS, self.buffer)
        self.buffer, self.last_flush = [], time.time()
        write_live_state(self.study_dir, self.running)

    def on_trial_start(self, iteration, trials, trial, **info):
        self.running += 1
        if time.time() - self.last_flush > 2.0:
            write_live_state(self.study_dir, self.running)

    def on_trial_complete(self, iteration, trials, trial, **info):
        result = trial.last_result or {}
        self._add(trial.config, result, result.get("status", "failed"), None)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._add(trial.config, {"learning_rate": trial.config.get("learning_rate")}, "failed",
                  trial_error_text(trial)[-2000:])

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


def write_live_state(study_dir: str, running_trials: int) -> None:
    """`live.json`: the driver's pid and trials in flight, for `sweeper status`."""
    storage.write_json(storage.join(study_dir, LIVE_FILE), {
        "pid": os.getpid(), "host": socket.gethostname(), "running_trials": running_trials,
        "updated_at": time.time()}, indent=None)


def run_finetuning(spec: StudySpec, plan: StudyPlan, study_dir: str, corpus_dirs: dict, *,
                   scheduler=None, retry_failed: bool = False) -> dict[str, int]:
    """Run every planned trial not yet recorded; returns the tally of outcomes of this call.
    `corpus_dirs`: tokenizer key -> prepared corpus (whose tokenizer encodes the tasks).

    With a pretraining `scheduler` still running, trials start as their checkpoints appear
    (pipelining); trials of runs that failed are skipped."""
    done = finished_trial_keys(study_dir, include_failed=not retry_failed)
    failed_runs = scheduler.failed if scheduler is not None else set()
    blocked = [t for t in plan.trials if t.trial_key not in done and t.checkpoint.run.name in failed_runs
               and not (scheduler and scheduler.checkpoint_ready(t.checkpoint.run, t.checkpoint.step))]
    blocked_keys = {t.trial_key for t in blocked}
    pending = [t for t in plan.trials if t.trial_key not in done and t.trial_key not in blocked_keys]
    print(f"[finetune] {len(plan.trials)} trials: {len(plan.trials) - len(pending) - len(blocked)} already "
          f"recorded, {len(blocked)} blocked by failed runs, {len(pending)} to run", flush=True)
    if not pending:
        return {}
    needed = {t.checkpoint.run.tokenizer for t in pending}
    task_dirs = prepare_tasks(spec, study_dir, {k: v for k, v in corpus_dirs.items() if k in needed})
    res = spec.resources
    protocol = worker_protocol(spec)
    sets = EvaluationSets(plan, spec.finetuning.tasks, done)
    shards = (grid_shards(sets.training_trials(list(plan.trials), pending), study_dir, task_dirs,
                          res.trials_per_shard, sets)
              if spec.finetuning.search == "grid"
              else optuna_shards(spec, plan, pending, done, study_dir, task_dirs, sets))
    return run_shards(spec, shards, study_dir, protocol, gate=Gate(scheduler))


def worker_protocol(spec: StudySpec) -> dict:
    """Everything a trial's worker reads besides its payload. Settings that do not change a
    trial's outcome (micro-batch, eval batch, threads) stay out of its key (finetune_protocol)."""
    ft = spec.finetuning
    return {**finetune_protocol(spec), "doc_stride": ft.doc_stride, "retrieval_temperature": ft.retrieval_temperature,
            "task_budgets": {task: task_budget(spec, task) for task in ft.tasks},
            "micro_batch_size": ft.micro_batch_size, "eval_batch_size": ft.eval_batch_size,
            "eval_every": ft.eval_every, "threads": max(1, int(spec.resources.cpus_per_trial))}


def run_shards(spec: StudySpec, shards: list, study_dir: str, protocol: dict,
               trainable_fn=finetune_trainable, gate: Gate | None = None) -> dict[str, int]:
    """One Tuner run per shard, outcomes recorded as they come; returns the tally. The
    benchmarks pass their own `trainable_fn` to time this machinery with a fixed workload."""
    res = spec.resources
    progress = ProgressLine("finetune", sum(len(shard) for shard in shards), unit="trials")
    tracker = start_wandb(spec, study_dir)
    # Tune's own state goes to the study's filesystem (an object store included).
    tune_filesystem, tune_path = storage.filesystem(storage.join(study_dir, "tune"))
    for number, shard in enumerate(shards):
        trainable = tune.with_resources(
            tune.with_parameters(trainable_fn, shard=shard, protocol=protocol),
            {"cpu": res.cpus_per_trial, "gpu": res.gpus_per_trial},
        )
        name = f"finetune-shard-{number:04d}"
        search = shard.tuner_args(spec, gate or Gate())
        tuner = tune.Tuner(
            trainable,
            param_space=search.pop("param_space"),
            tune_config=tune.TuneConfig(reuse_actors=True, max_concurrent_trials=res.max_concurrent_trials,
                                        trial_dirname_creator=short_trial_dirname, **search),
            run_config=tune.RunConfig(
                name=name, storage_path=tune_path, verbose=0,
                storage_filesystem=tune_filesystem if storage.is_remote(study_dir) else None,
                callbacks=[ResultsRecorder(spec.study, study_dir, shard, progress, extra={
                    "cpus": res.cpus_per_trial, "gpus": res.gpus_per_trial, "code_version": code_version()},
                    tracker=tracker)],
                failure_config=tune.FailureConfig(max_failures=0),
            ),
        )
        tuner.fit()
        # Every outcome is in the store now; Tune's own state (an empty folder per trial and a
        # JSON rewritten as trials finish) is no record and is not kept.
        storage.remove_tree(storage.join(study_dir, "tune", name))
        for table in (TRIALS, EVAL_CURVES):
            compact(study_dir, table)
    progress.finish()
    if tracker is not None:
        tracker.finish()
    return dict(progress.tally)


def start_wandb(spec: StudySpec, study_dir: str):
    """Optional W&B run for the grid's trials, logged by the driver (one run, not one per trial:
    Ray's WandbLoggerCallback starts an actor per trial, too heavy for 18,000 of them)."""
    if not spec.tracking.wandb:
        return None
    try:
        import wandb
    except ImportError:
        print("[tracking] wandb is not installed (pip install 'sweeper[tracking]'); not logging", flush=True)
        return None
    return wandb.init(project=spec.tracking.project, name=f"{spec.study}-trials", id=f"{spec.study}-trials",
                      resume="allow", mode=spec.tracking.mode, dir=str(storage.scratch_dir(study_dir, "")),
                      reinit="create_new",
                      config=asdict(spec.finetuning))


def grid_shards(pending: list[Trial], study_dir: str, task_dirs: dict, size: int,
                sets: EvaluationSets | None = None) -> list[GridShard]:
    return [GridShard(pending[i:i + size], study_dir, task_dirs, sets) for i in range(0, len(pending), size)]


def optuna_shards(spec: StudySpec, plan: StudyPlan, pending: list[Trial], done: set[str], study_dir: str,
                  task_dirs: dict, sets: EvaluationSets) -> list[OptunaShard]:
    """Cells with work left, each with the samples already recorded (to warm-start its search).
    An evaluation-only set has no search of its own: its rows follow its training cell's samples."""
    pending_keys = {t.trial_key for t in sets.training_trials(list(plan.trials), pending)}
    cells: dict[tuple, list[Trial]] = {}
    for trial in plan.trials:
        if not sets.evaluation_only(trial):
            cells.setdefault((trial.checkpoint.checkpoint_id, trial.task), []).append(trial)
    recorded = read_trials(study_dir).to_pandas().set_index("trial_key") if done else None
    n_seeds, n_samples = len(spec.finetuning.seeds), spec.finetuning.optuna.learning_rates_per_cell
    grids, searches = [], []
    for trials in cells.values():
        if not pending_keys & {t.trial_key for t in trials}:
            continue
        by_sample = [trials[k * n_seeds:(k + 1) * n_seeds] for k in range(n_samples)]
        complete = 0
        while complete < n_samples and all(t.trial_key in done and all(c.trial_key in done for c in sets.companions(t))
                                           for t in by_sample[complete]):
            complete += 1
        evaluated = [(float(recorded.loc[by_sample[k][0].trial_key, "learning_rate"]),
                      sum(search_score(recorded.loc[t.trial_key].to_dict()) for t in by_sample[k]) / n_seeds)
                     for k in range(complete)]
        grids.append(by_sample)
        searches.append(CellSearch(samples_total=n_samples, seeds=n_seeds, first_sample=complete, evaluated=evaluated))
    cells_per_shard = max(1, spec.resources.trials_per_shard // (n_samples * n_seeds))
    return [OptunaShard(grids[i:i + cells_per_shard], searches[i:i + cells_per_shard], study_dir, task_dirs, sets)
            for i in range(0, len(grids), cells_per_shard)]
