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

DONE_FILE = "sweeper_done.json"


def run_dir(study_dir: Path, run: PretrainingRun) -> Path:
    return study_dir / "pretraining" / run.name


def checkpoint_path(study_dir: Path, run: PretrainingRun, step: int) -> Path:
    return run_dir(study_dir, run) / f"step-{step}"


def is_done(study_dir: Path, run: PretrainingRun) -> bool:
    done = run_dir(study_dir, run) / DONE_FILE
    return done.exists() and json.loads(done.read_text()).get("run_key") == run.run_key


def run_payload(run: PretrainingRun, spec: StudySpec, study_dir: Path, corpus_dir: str) -> dict:
    """Everything the worker loop needs, as plain data (workers never import the driver)."""
    pre, res = spec.pretraining, spec.resources
    return {
        "name": run.name, "run_key": run.run_key, "run_dir": str(run_dir(study_dir, run)),
        "corpus_dir": corpus_dir, "model_config": run.model_config, "objective": run.objective,
        "mask_ratio": run.mask_ratio, "clm_fraction": run.clm_fraction,
        "random_replace": pre.random_replace, "keep_original": pre.keep_original,
        "total_steps": run.total_steps, "checkpoint_steps": list(run.checkpoint_steps),
        "global_batch_size": pre.global_batch_size, "seq_len": spec.data.seq_len,
        "peak_lr": pre.optimizer.peak_lr, "betas": pre.optimizer.betas, "eps": pre.optimizer.eps,
        "weight_decay": pre.optimizer.weight_decay, "grad_clip": pre.optimizer.grad_clip,
        "warmup_steps": pre.warmup_steps, "decay_steps": pre.decay_steps,
        "log_every": pre.log_every, "seed": pre.seed, "data_seed": spec.data.order_seed,
        "threads": max(1, int(res.cpus_per_worker)), "workers": res.pretraining_workers,
        "use_gpu": res.gpus_per_worker > 0, "init_from": None,
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
    (run_dir(study_dir, run) / DONE_FILE).write_text(json.dumps(
        {"run_key": run.run_key, "wall_time_s": wall_time_s, "run": asdict(run)}, indent=1, default=str,
    ))


def run_pretraining(spec: StudySpec, runs: list[PretrainingRun], study_dir: Path, corpus_dir: str) -> None:
    """Fit every run not yet done, in parallel; raise if any run failed after its retries."""
    pending = [run for run in runs if not is_done(study_dir, run)]
    skipped = len(runs) - len(pending)
    print(f"[pretrain] {len(runs)} runs: {skipped} already done, {len(pending)} to train", flush=True)
    if not pending:
        return
    res = spec.resources
    resources = {"cpus_per_worker": res.cpus_per_worker, "gpus_per_worker": res.gpus_per_worker,
                 "max_failures": res.max_failures}
    local = res.pretraining_workers == 0
    # Local mode trains inside the task, so the task holds the worker's resources; otherwise
    # the worker group reserves its own and the task only waits.
    task = ray.remote(fit_run).options(
        num_cpus=res.cpus_per_worker if local else 0, num_gpus=res.gpus_per_worker if local else 0,
        max_retries=0,
    )
    futures = {task.remote(run_payload(run, spec, study_dir, corpus_dir), resources): run for run in pending}
    failures = []
    while futures:
        ready, _ = ray.wait(list(futures), num_returns=1)
        run = futures.pop(ready[0])
        try:
            outcome = ray.get(ready[0])
        except Exception as error:  # keep the other runs going; report all failures at the end
            failures.append(f"{run.name}: {type(error).__name__}: {str(error).splitlines()[0][:300]}")
            print(f"[pretrain] {run.name} FAILED", flush=True)
            continue
        record_finished_run(spec.study, study_dir, run, outcome["wall_time_s"])
        print(f"[pretrain] {run.name} done in {outcome['wall_time_s']:.0f}s "
              f"({len(pending) - len(futures)}/{len(pending)})", flush=True)
    if failures:
        raise RuntimeError("pretraining runs failed:\n  " + "\n  ".join(failures))
