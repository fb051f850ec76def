"""Benchmarks 1 and 2: what the fine-tuning grid machinery costs, with a fixed workload.

1. `overhead`: N trials of a fixed sleep (default 200 x 5 s) on this machine's CPUs, one CPU per
   trial, through the sweeper's scheduling and recording (`run_shards`: sharded Tuner runs,
   reused actors, Tune loggers off, batched Parquet) vs the ideal (total work / slots) vs plain
   Ray Tune with its defaults (a grid_search, new actor per trial, default loggers). Target:
   sweeper wall / ideal <= 1.10.
2. `paper`: every trial of `search_spaces/paper.yaml` (18,000) as a no-op through the same
   machinery: wall time, the driver's peak RSS (target < 1 GiB), and the files left in the study.

    .venv/bin/python benchmarks/grid_overhead.py overhead [--trials 200] [--seconds 5]
    .venv/bin/python benchmarks/grid_overhead.py paper [--trials 18000]
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def sleep_trainable(config: dict, trials, seconds: float) -> None:
    """The fixed workload: sleep, then report what a trial reports."""
    from ray import tune

    trial = trials.config_at(config)  # the shard's ShardTrials
    if seconds:
        time.sleep(seconds)
    tune.report({"trial_key": trial.trial_key, "status": "ok", "validation_score": 50.0, "test_score": 50.0,
                 "train_loss": 1.0, "train_steps": 1, "wall_time_s": seconds, "search_score": 50.0,
                 "curve": []})


def plain_tune_trainable(config: dict) -> None:
    from ray import tune

    time.sleep(config["seconds"])
    tune.report({"score": 50.0})


def sweeper_run(spec, trials, layout, seconds: float) -> float:
    from sweeper.run.tune_grid import run_shards
    from sweeper.run.shards import grid_shards

    fake_dirs = {(t.checkpoint.tokenizer, t.task): "unused" for t in trials}
    shards = grid_shards(list(trials), layout, fake_dirs, spec.resources.trials_per_shard)
    started = time.perf_counter()
    run_shards(spec, shards, layout, trainable_fn=sleep_trainable, seconds=seconds)
    return time.perf_counter() - started


def plain_tune_run(trials: int, seconds: float, storage: Path) -> float:
    from ray import tune

    os.environ.pop("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", None)
    started = time.perf_counter()
    tune.Tuner(tune.with_resources(plain_tune_trainable, {"cpu": 1}),
               param_space={"i": tune.grid_search(list(range(trials))), "seconds": seconds},
               run_config=tune.RunConfig(storage_path=str(storage), verbose=0)).fit()
    return time.perf_counter() - started


def overhead(args) -> None:
    import ray

    from sweeper.plan.load import load_study
    from sweeper.plan.study_plan import plan_study
    from sweeper.store.layout import StudyLayout

    spec = load_study(ROOT / "search_spaces" / "smoke.yaml").spec
    seeds = list(range(args.trials // (4 * 2) + 1))  # 4 checkpoints x 2 tasks x seeds >= trials
    spec = replace(spec, finetuning=replace(spec.finetuning, seeds=seeds))
    trials = plan_study(spec).trials[:args.trials]
    slots = int(ray.available_resources().get("CPU", 1))
    ideal = args.trials * args.seconds / slots
    work = Path(tempfile.mkdtemp(prefix="bench-grid-"))
    ours = sweeper_run(spec, trials, StudyLayout(str(work / "study")), args.seconds)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {slots} trial slots; "
          f"{args.trials} trials x {args.seconds:g} s")
    print(f"ideal (work / slots)     {ideal:8.1f} s")
    print(f"sweeper                  {ours:8.1f} s   wall / ideal = {ours / ideal:.3f}   (target <= 1.10)", flush=True)
    if not args.skip_plain:
        plain = plain_tune_run(args.trials, args.seconds, work / "plain")
        print(f"plain Ray Tune defaults  {plain:8.1f} s   wall / ideal = {plain / ideal:.3f}")


def paper(args) -> None:
    from sweeper.plan.load import load_study
    from sweeper.plan.study_plan import plan_study
    from sweeper.store.layout import StudyLayout

    spec = load_study(ROOT / "search_spaces" / "paper.yaml").spec
    spec = replace(spec, resources=replace(spec.resources, cpus_per_trial=1, gpus_per_trial=0))
    trials = plan_study(spec).trials[:args.trials]
    layout = StudyLayout(str(Path(tempfile.mkdtemp(prefix="bench-paper-")) / "study"))
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    wall = sweeper_run(spec, trials, layout, 0.0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB on Linux
    files = sum(1 for p in Path(layout.root).rglob("*") if p.is_file())
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; {len(trials):,} no-op trials of paper.yaml "
          f"in shards of {spec.resources.trials_per_shard}")
    print(f"wall {wall:,.0f} s ({wall / len(trials) * 1000:.1f} ms per trial); driver peak RSS {peak:,.0f} MiB "
          f"(before the grid {rss_before:,.0f} MiB; target < 1024); files left in the study: {files}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    one = commands.add_parser("overhead")
    one.add_argument("--trials", type=int, default=200)
    one.add_argument("--seconds", type=float, default=5.0)
    one.add_argument("--skip-plain", action="store_true", help="skip the plain Ray Tune baseline")
    two = commands.add_parser("paper")
    two.add_argument("--trials", type=int, default=18_000)
    args = parser.parse_args()
    from sweeper.run.runner import connect_ray

    connect_ray()
    {"overhead": overhead, "paper": paper}[args.command](args)


if __name__ == "__main__":
    main()
