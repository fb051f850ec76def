"""Benchmark 13: the calibration of `sweeper plan`'s wall-time estimate on a CPU (sweeper/plan/cost.py,
`CPU_CALIBRATIONS`, one per kind of CPU: this machine's, `cost.cpu_kind`).

Measures CPU seconds on one thread (process CPU time, which a busy machine inflates far less than
wall time), then fits the constants the estimate uses:
- pretraining: the sweeper's loop (Ray Train local mode, `benchmarks/pretrain_throughput.py`)
  on `nano` and `tiny`, MLM and CLM, 16 x 128 tokens a step, at two step counts: per objective,
  CPU seconds per token = a + 6 x parameters / b (two presets: a and b), and a run's fixed cost
  (start, checkpoint) from the difference of the two lengths;
- fine-tuning: one real trial of each task of search_spaces/micro.yaml on a `nano` checkpoint
  (fresh weights: a trial's cost does not depend on them), run in this process as a Tune worker
  runs it (`trainables.finetune_loop.run_trial`): trial CPU seconds = c + FLOPs / d, fitted by
  least squares against the cost model's FLOPs of each trial (`sweeper.plan.cost.trial_flops`).

    .venv/bin/python benchmarks/wall_time.py [--steps 30 90] [--seeds 2]

Prints the constants as `CPU_CALIBRATIONS[kind]` takes them, for this machine's kind.
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
sys.path.insert(0, str(ROOT / "benchmarks"))
SPEC = ROOT / "search_spaces" / "micro.yaml"


def pretraining_cpu_seconds(corpus_dir: str, preset: str, objective: str, steps: int, work: Path) -> float:
    """Process CPU seconds of one whole run of `steps` steps (start, steps, final checkpoint)."""
    from pretrain_throughput import sweeper_loop

    from sweeper.contract.catalog import MODEL_PRESETS

    config = {**MODEL_PRESETS[preset], "vocab_size": 2048}
    started = time.process_time()
    sweeper_loop(corpus_dir, config, objective, steps, 16, 128, warmup=min(10, steps // 3), threads=1,
                 run_dir=work / f"{preset}-{objective}-{steps}")
    return time.process_time() - started


def fit_pretraining(corpus_dir: str, lengths: tuple[int, int], work: Path) -> dict:
    from sweeper.contract.catalog import MODEL_PRESETS
    from sweeper.plan.cost import parameter_count

    short, long = lengths
    # Untimed: the first run in a process also pays Ray's start (Train's local mode starts a local
    # Ray instance, seconds of this process's CPU), which would sit in the first short run alone.
    pretraining_cpu_seconds(corpus_dir, "nano", "mlm", 5, work)
    fitted, overheads = {}, []
    for objective in ("mlm", "clm"):
        per_token = {}
        for preset in ("nano", "tiny"):
            first = pretraining_cpu_seconds(corpus_dir, preset, objective, short, work)
            second = pretraining_cpu_seconds(corpus_dir, preset, objective, long, work)
            per_token[preset] = (second - first) / ((long - short) * 16 * 128)
            overheads.append(first - short * 16 * 128 * per_token[preset])
            print(
                f"  pretraining {preset} {objective}: {short} steps {first:.1f} CPU-s, {long} steps {second:.1f} CPU-s "
                f"-> {1 / per_token[preset]:,.0f} tokens per CPU-s",
                flush=True,
            )
        flops = {p: 6 * parameter_count({**MODEL_PRESETS[p], "vocab_size": 2048}) for p in per_token}
        rate = (flops["tiny"] - flops["nano"]) / (per_token["tiny"] - per_token["nano"])
        fitted[objective] = (per_token["nano"] - flops["nano"] / rate, rate)
    return {"pretrain_token_s": {k: v[0] for k, v in fitted.items()},
            "pretrain_flops_per_s": {k: v[1] for k, v in fitted.items()},
            "pretrain_run_s": max(0.0, sum(overheads) / len(overheads))}


def trial_measurements(seeds: int) -> list[tuple[str, float, float]]:
    """(task, cost-model FLOPs, CPU seconds) of one trial per task and seed of micro.yaml on nano."""
    import ray

    from benchmarks.trials_per_hour import fake_checkpoint
    from sweeper.plan.cost import trial_flops
    from sweeper.plan.load import load_study
    from sweeper.plan.study_plan import plan_study
    from sweeper.run.corpora import prepare_corpora
    from sweeper.run.shards import EvaluationSets, trial_config, trial_runtime
    from sweeper.run.task_prep import corpus_tokenizers, prepare_tasks
    from sweeper.store.layout import StudyLayout
    from trainables.finetune_loop import run_trial

    spec = load_study(SPEC).spec
    run = replace(spec.pretraining.runs[0], checkpoint_steps=[], replicates=None)
    spec = replace(spec, study="bench-wall", pretraining=replace(spec.pretraining, runs=[run], replicates=1),
                   finetuning=replace(spec.finetuning, seeds=list(range(seeds))))
    plan = plan_study(spec)
    ray.shutdown()  # the pretraining runs' (Train's local mode starts a Ray of its own): the trials get 1 CPU
    ray.init(num_cpus=1, log_to_driver=False)
    layout = StudyLayout(str(Path(tempfile.mkdtemp(prefix="bench-wall-")) / "study"))
    corpora = prepare_corpora(spec, plan, layout)
    fake_checkpoint(layout, plan, next(iter(corpora.values())))
    task_dirs = prepare_tasks(spec, layout, corpus_tokenizers(corpora))
    sets, runtime = EvaluationSets(plan, spec.finetuning.tasks), trial_runtime(spec)
    measured = []
    for trial in plan.trials:
        if sets.evaluation_only(trial):
            continue  # scored by its training trial (a companion): no run of its own
        config = trial_config(trial, layout, task_dirs, sets, runtime)
        started = time.process_time()
        run_trial(config)
        seconds = time.process_time() - started
        measured.append((trial.task, trial_flops(spec, trial), seconds))
        print(f"  trial {trial.task} seed {trial.seed}: {seconds:.2f} CPU-s, {trial_flops(spec, trial):.3g} FLOPs",
              flush=True)
    ray.shutdown()
    shutil.rmtree(Path(layout.root).parent, ignore_errors=True)
    return measured


def fit_trials(measured: list[tuple[str, float, float]]) -> dict:
    """Least squares of seconds = c + flops / d."""
    n = len(measured)
    mean_f = sum(f for _, f, _ in measured) / n
    mean_s = sum(s for _, _, s in measured) / n
    slope = (sum((f - mean_f) * (s - mean_s) for _, f, s in measured)
             / sum((f - mean_f) ** 2 for _, f, _ in measured))
    return {"trial_s": mean_s - slope * mean_f, "trial_flops_per_s": 1 / slope}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs=2, default=(30, 90), help="the two run lengths timed")
    parser.add_argument("--seeds", type=int, default=2, help="trials per task")
    args = parser.parse_args()

    import torch

    from sweeper.contract.configs import CorpusConfig
    from sweeper.plan.cost import cpu_flags, cpu_kind
    from trainables.corpus_prep import prepare_corpus

    torch.set_num_threads(1)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs ({cpu_kind(cpu_flags())} calibration), "
          f"torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), 1 thread; "
          f"load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-wall-pretrain-"))
    corpus_dir = str(work / "corpus")
    prepare_corpus(CorpusConfig(source="wordnet", text_column="text", tokenizer="train-wordpiece",
                                vocab_size=2048, max_documents=3000), corpus_dir)
    constants = fit_pretraining(corpus_dir, tuple(args.steps), work)
    shutil.rmtree(work, ignore_errors=True)
    constants |= fit_trials(trial_measurements(args.seeds))
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    print(f"CPU_CALIBRATIONS[{cpu_kind(cpu_flags())!r}] = {{")
    for key, value in constants.items():
        print(f"    {key!r}: {value!r},")
    print("}")


if __name__ == "__main__":
    main()
