"""Schedule the pretraining grid on Ray Train, one `TorchTrainer.fit()` per run.

Each run's fit is launched from a Ray task, so runs proceed in parallel as far as the cluster's
resources allow. With `pretraining_workers: 0` the fit is Train's local mode, in that task's
process (no worker-group start, ~40 s saved per run on a laptop); with N workers Train starts a
worker group (DDP) and persists checkpoints to `storage_path/<run name>`. Either way the run's
checkpoints land in `<study>/pretraining/<run name>/step-<N>/`, and Train resumes a rerun of
the same name from the latest one.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import ray

from sweeper.plan import PretrainingRun
from sweeper.spec import StudySpec
from sweeper.store import PRETRAINING, write_rows

RUN_FILE = "sweeper_run.json"
DONE_FILE = "sweeper_done.json"
FAILED_FILE = "sweeper_failed.json"


def run_dir(study_dir: Path, run: PretrainingRun) -> Path:
    return study_dir / "pretraining" / run.name


def checkpoint_path(study_dir: Path, run: PretrainingRun, step: int) -> Path:
    return run_dir(study_dir, run) / f"step-{step}"


def is_done(study_dir: Path, run: PretrainingRun) -> bool:
    done = run_dir(study_dir, run) / DONE_FILE
    return done.exists() and json.loads(done.read_text()).get("run_key") == run.run_key


def run_payload(run: PretrainingRun, spec: StudySpec, study_dir: Path, corpus_dir: str,
                runs_by_name: dict[str, PretrainingRun]) -> dict:
    """Everything the worker loop needs, as plain data (workers never import the driver)."""
    pre, res = spec.pretraining, spec.resources
    if run.init_from_run:
        source = runs_by_name[run.init_from_run]
        init_kind, init_from = "study", str(checkpoint_path(study_dir, source, source.total_steps))
    elif run.init_from_hf:
        init_kind, init_from = "hf", run.init_from_hf
    else:
        init_kind, init_from = "scratch", None
    return {
        "name": run.name, "run_key": run.run_key, "run_dir": str(run_dir(study_dir, run)),
        "corpus_dir": corpus_dir, "model_config": run.model_config, "objective": run.objective,
        "mask_ratio": run.mask_ratio, "clm_fraction": run.clm_fraction, "switch_step": run.switch_step,
        "random_replace": pre.random_replace, "keep_original": pre.keep_original,
        "total_steps": run.total_steps, "checkpoint_steps": list(run.checkpoint_steps),
        "global_batch_size": pre.global_batch_size, "seq_len": spec.data.seq_len,
        "peak_lr": pre.optimizer.peak_lr, "betas": pre.optimizer.betas, "eps": pre.optimizer.eps,
        "weight_decay": pre.optimizer.weight_decay, "grad_clip": pre.optimizer.grad_clip,
        "warmup_steps": run.warmup_steps, "decay_steps": run.decay_steps,
        "log_every": pre.log_every, "save_every": pre.save_every, "seed": pre.seed, "data_seed": spec.data.order_seed,
        "threads": max(1, int(res.cpus_per_worker)), "workers": res.pretraining_workers,
        "use_gpu": res.gpus_per_worker > 0, "init_kind": init_kind, "init_from": init_from,
        "data_offset_steps": run.steps_before, "tracking": asdict(spec.tracking),
    }


def fit_run(payload: dict, resources: dict) -> dict:
    """Body of the Ray task that owns one run: build the TorchTrainer and fit it."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from trainables.pretrain_loop import train_loop_per_worker

    Path(payload["run_dir"]).mkdir(parents=True, exist_ok=True)
    workers = payload["workers"]
    scaling = ScalingConfig(
        num_workers=workers, use_gpu=payload["use_gpu"] and workers > 0,
        resources_per_worker={"CPU": resources["cpus_per_worker"], "GPU": resources["gpus_per_worker"]}
        if workers > 0 else None,
    )
    trainer = TorchTrainer(
        train_loop_per_worker, train_loop_config=payload, scaling_config=scaling,
        run_config=RunConfig(
            name=payload["name"], storage_path=str(Path(payload["run_dir"]).parent),
            failure_config=FailureConfig(max_failures=resources["max_failures"]),
        ),
    )
    started = time.time()
    trainer.fit()
    return {"run_name": payload["name"], "wall_time_s": time.time() - started}


def record_finished_run(study: str, study_dir: Path, run: PretrainingRun, wall_time_s: float) -> None:
    """Write the run's training log to the pretraining table, then mark it done."""
    final = checkpoint_path(study_dir, run, run.total_steps)
    log = json.loads((final / "train_log.json").read_text())
    write_rows(study_dir, PRETRAINING, [
        {"study": study, "run_name": run.name, "run_key": run.run_key, "objective": run.objective, **row}
        for row in log
    ])
    (run_dir(study_dir, run) / FAILED_FILE).unlink(missing_ok=True)
    (run_dir(study_dir, run) / DONE_FILE).write_text(json.dumps(
        {"run_key": run.run_key, "wall_time_s": wall_time_s, "identity": run.identity,
         "run": {k: v for k, v in asdict(run).items() if k != "identity"}}, indent=1, default=str,
    ))


def has_failed(study_dir: Path, run: PretrainingRun) -> bool:
    failed = run_dir(study_dir, run) / FAILED_FILE
    return failed.exists() and json.loads(failed.read_text()).get("run_key") == run.run_key


def run_pretraining(spec: StudySpec, runs: list[PretrainingRun], study_dir: Path, corpus_dirs: dict,
                    retry_failed: bool = False) -> list[str]:
    """Fit every run not yet done, in parallel as resources allow; a continued-pretraining run
    starts once its source run is done. `corpus_dirs` maps a run's tokenizer (None: the
    study's) to its prepared corpus. Returns the names of runs that failed (after their retries)
    or could not start because their source failed; every other run goes on."""
    by_name = {run.name: run for run in runs}
    done = {run.name for run in runs if is_done(study_dir, run)}
    failed = {run.name for run in runs if run.name not in done and has_failed(study_dir, run) and not retry_failed}
    waiting = [run for run in runs if run.name not in done | failed]
    print(f"[pretrain] {len(runs)} runs: {len(done)} already done, {len(failed)} failed before "
          f"(--retry-failed reruns them), {len(waiting)} to train", flush=True)
    res = spec.resources
    resources = {"cpus_per_worker": res.cpus_per_worker, "gpus_per_worker": res.gpus_per_worker,
                 "max_failures": res.max_failures}
    local = res.pretraining_workers == 0
    # A local-mode run has no Train worker group to restart: Ray retries the task itself (a
    # crashed process or an exception), and the loop resumes from the run's last checkpoint.
    task = ray.remote(fit_run).options(
        num_cpus=res.cpus_per_worker if local else 0, num_gpus=res.gpus_per_worker if local else 0,
        max_retries=res.max_failures if local else 0, retry_exceptions=local,
    )
    futures: dict = {}
    total = len(waiting)
    while waiting or futures:
        for run in list(waiting):
            if run.init_from_run in failed:
                waiting.remove(run)
                failed.add(run.name)
                print(f"[pretrain] {run.name} skipped: its source {run.init_from_run} failed", flush=True)
            elif run.init_from_run is None or run.init_from_run in done:
                waiting.remove(run)
                directory = run_dir(study_dir, run)
                directory.mkdir(parents=True, exist_ok=True)
                (directory / RUN_FILE).write_text(json.dumps({"run_key": run.run_key, "identity": run.identity},
                                                             indent=1, default=str))
                payload = run_payload(run, spec, study_dir, str(corpus_dirs[run.tokenizer]), by_name)
                futures[task.remote(payload, resources)] = run
        if not futures:
            break
        ready, _ = ray.wait(list(futures), num_returns=1)
        run = futures.pop(ready[0])
        try:
            outcome = ray.get(ready[0])
        except Exception as error:  # keep the other runs going; report every failure at the end
            message = f"{type(error).__name__}: {str(error).strip()[-2000:]}"
            (run_dir(study_dir, run) / FAILED_FILE).write_text(json.dumps(
                {"run_key": run.run_key, "error": message, "failed_at": time.time()}, indent=1))
            failed.add(run.name)
            print(f"[pretrain] {run.name} FAILED: {message.splitlines()[0][:300]} "
                  f"(details in {run_dir(study_dir, run) / FAILED_FILE})", flush=True)
            continue
        record_finished_run(spec.study, study_dir, run, outcome["wall_time_s"])
        done.add(run.name)
        finished = total - len(waiting) - len(futures)
        print(f"[pretrain] {run.name} done in {outcome['wall_time_s']:.0f}s ({finished}/{total})", flush=True)
    return sorted(failed)
