"""Benchmark 4b: fine-tuning trials per device-hour with 1, 2 and 4 trials packed on one device.

Real trials (the sweeper's trial function: backbone load, training with the paper's protocol,
validation and test scoring) of one checkpoint x one task through the sweeper's scheduling
(`run_shards`), with a fractional resource per trial: `gpus_per_trial` 1, 1/2, 1/4 on a GPU, or
`cpus_per_trial` 1, 1/2, 1/4 on one CPU here (the same packing, measured where no GPU is lent).
The checkpoint is the preset's architecture with freshly initialised weights, saved where a
pretraining run would have written it: a trial's cost does not depend on what the weights hold.
The ratio printed is trials/hour against one trial per device.

    .venv/bin/python benchmarks/trials_per_hour.py [--device cpu|cuda] [--preset tiny] [--trials 8]
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SPEC = ROOT / "search_spaces" / "micro.yaml"
TASK = "wordnet-supersense-cls"


def bench_spec(args):
    """micro.yaml narrowed to one checkpoint of `--preset` (its first run, trained once) and one task,
    `--trials` seeds."""
    from sweeper.plan.load import load_study

    spec = load_study(SPEC).spec
    run = replace(spec.pretraining.runs[0], checkpoint_steps=[], replicates=1)
    return replace(
        spec, study="bench-trials", model=replace(spec.model, preset=args.preset),
        pretraining=replace(spec.pretraining, runs=[run]),
        finetuning=replace(spec.finetuning, tasks=[TASK], learning_rates=[1e-3], seeds=list(range(args.trials)),
                           max_steps=args.steps, micro_batch_size=spec.finetuning.batch_size),
    )


def fake_checkpoint(layout, plan, corpus: str) -> None:
    """Fresh weights of the planned architecture at the planned checkpoint path, with the tokenizer."""
    from trainables.model import LlamaEncoderConfig, build_model

    (ckpt,) = plan.checkpoints
    path = layout.checkpoint(ckpt.run.name, ckpt.step)
    build_model(LlamaEncoderConfig(**ckpt.run.model_config), seed=0).save_pretrained(path)
    shutil.copytree(Path(corpus) / "tokenizer", path, dirs_exist_ok=True)


def packed_run(spec, plan, layout, task_dirs: dict, per_device: int, device: str) -> float:
    """Trials/hour with `per_device` trials sharing one device."""
    from sweeper.run.tune_grid import run_shards
    from sweeper.run.shards import EvaluationSets, grid_shards, trial_runtime

    share = 1.0 / per_device
    resources = (replace(spec.resources, gpus_per_trial=share, cpus_per_trial=share) if device == "cuda"
                 else replace(spec.resources, cpus_per_trial=share, max_concurrent_trials=per_device))
    spec = replace(spec, resources=resources)
    shutil.rmtree(layout.results, ignore_errors=True)
    shards = grid_shards(list(plan.trials), layout, task_dirs, len(plan.trials), EvaluationSets(), trial_runtime(spec))
    started = time.perf_counter()
    tally = run_shards(spec, shards, layout)
    wall = time.perf_counter() - started
    assert tally.get("ok") == len(plan.trials), tally
    return len(plan.trials) * 3600 / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--trials", type=int, default=8, help="trials per packing level")
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps per trial")
    args = parser.parse_args()

    import ray

    from sweeper.plan.study_plan import plan_study
    from sweeper.run.corpora import prepare_corpora
    from sweeper.run.runner import connect_ray
    from sweeper.run.task_prep import corpus_tokenizers, prepare_tasks
    from sweeper.store.layout import StudyLayout

    spec = bench_spec(args)
    plan = plan_study(spec)
    if args.device == "cpu":
        # One core is the device being packed: Ray's processes inherit this affinity, so two
        # trials on "one CPU" really share one core.
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    connect_ray() if os.environ.get("RAY_ADDRESS") else ray.init(
        num_cpus=1 if args.device == "cpu" else os.cpu_count(), num_gpus=1 if args.device == "cuda" else 0,
        log_to_driver=False)
    layout = StudyLayout(str(Path(tempfile.mkdtemp(prefix="bench-trials-")) / "study"))
    corpora = prepare_corpora(spec, plan, layout)
    fake_checkpoint(layout, plan, next(iter(corpora.values())))
    task_dirs = prepare_tasks(spec, layout, corpus_tokenizers(corpora))
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, device {args.device}; preset {args.preset}, "
          f"{args.trials} trials of {TASK} x {args.steps} steps per packing level")
    base = None
    for per_device in (1, 2, 4):
        rate = packed_run(spec, plan, layout, task_dirs, per_device, args.device)
        base = base or rate
        print(
            f"{per_device} trial(s) per {args.device}: {rate:8,.0f} trials/hour   ratio {rate / base:.2f}", flush=True
        )


if __name__ == "__main__":
    main()
