"""Benchmark 9: fine-tuning trials through the sweeper vs Hugging Face `Trainer`, a process per trial.

The same trials (sequence classification `wordnet-supersense-cls`, token classification
`wordnet-supersense-tag`: short sentences, median 10-11 words, at max_length 512; the same
checkpoint, examples, learning rates, seeds, steps, batch size and schedule), run two ways in one
invocation, `--slots` trials at a time, one thread each; by default the paper's cell per task (6
learning rates x 5 seeds: 60 trials):
- the sweeper: one Ray Tune run of the grid (`sweeper.run.tune_grid.run_shards`, reused actors),
  each trial `trainables.finetune_loop.run_trial` with packing on (`TrialRuntime.packing`);
- the baseline: a fresh Python process per trial, the way the paper's evaluation code runs a
  trial: start, imports, model build, `transformers.Trainer.train()` with `DataCollatorWithPadding`
  (SC) or `DataCollatorForTokenClassification` (TC) padding each batch to its longest example,
  then `Trainer.predict` on validation and test. Its model is the project's backbone with the
  same head (`SequenceClassification.build`, mean pooling / per-token linear), wrapped to return
  {"loss", "logits"}, loaded from the same checkpoint; the examples are the prepared task data
  with their padding stripped (tokenising them costs the baseline nothing).
Figures, each against the baseline measured in the same run:
- useful-token fraction: real tokens / tokens in the forward passes (training and scoring),
  from `trainables.tasks.packing.TOKEN_COUNTS` and from the collators' batches (target >= 0.9);
- trial compute time: model build + training + scoring validation and test, mean per trial
  (target: the sweeper >= 2x faster than the Trainer), in wall seconds and in the trial process's
  CPU seconds (one thread per trial: on an idle machine the two agree; on a shared one the CPU
  seconds are the figure that holds);
- grid wall time: all trials (target: the sweeper >= 3x faster than a process per trial).
The padded path (`packing: false`, every example at max_length) is a line of its own: its
fraction always, its compute time with `--padded` (slow: that is the point).

    .venv/bin/python benchmarks/finetune_vs_hf.py [--quick] [--padded] [--lrs 6] [--seeds 5] [--slots 2]

The baseline needs `accelerate` (the Trainer requires it; the sweeper does not): `.venv/bin/pip install -c
constraints.txt -e '.[bench]'`.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import pickle
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SC, TC = "wordnet-supersense-cls", "wordnet-supersense-tag"
LEARNING_RATES = [1e-3, 3e-3, 2e-3, 5e-4, 5e-3, 2e-4]
"""`--lrs N` takes the first N (the first two were the default before `--lrs 6 --seeds 5`, the
paper's cell of 30 trials per checkpoint and task; a trial's compute does not depend on them)."""


# --- the baseline: one trial in this (fresh) process ----------------------------------------------

class CountingCollator:
    """A Hugging Face collator that also counts real and forwarded tokens of the batches it pads."""

    def __init__(self, collator):
        self.collator, self.real, self.forwarded = collator, 0, 0

    def __call__(self, features):
        batch = self.collator(features)
        self.real += int(batch["attention_mask"].sum())
        self.forwarded += batch["input_ids"].numel()
        return batch


def unpadded_examples(split: dict, token_labels: bool) -> list[dict]:
    """The prepared examples without their padding to max_length, as a tokenizer would give them."""
    examples = []
    for i, n in enumerate(split["attention_mask"].sum(1).tolist()):
        example = {"input_ids": split["input_ids"][i, :n].tolist(), "attention_mask": [1] * n}
        example["labels"] = split["labels"][i, :n].tolist() if token_labels else int(split["labels"][i])
        examples.append(example)
    return examples


def hf_trial(config_path: str, out_path: str) -> None:
    """One trial as the paper's evaluation code runs it: Trainer with per-batch padding."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch import nn
    from transformers import (AutoModel, AutoTokenizer, DataCollatorForTokenClassification, DataCollatorWithPadding,
                              Trainer, TrainingArguments, set_seed)
    from transformers.utils import logging as hf_logging

    importlib.import_module("trainables.model")  # registers the architecture with AutoModel
    from trainables.tasks.classification import IGNORE, tag_scores, word_level_tags
    from trainables.tasks.data import load_prepared
    from trainables.tasks.metrics import accuracy

    hf_logging.set_verbosity_error()
    trial = pickle.loads(Path(config_path).read_bytes())
    protocol, runtime = trial.protocol, trial.runtime
    torch.set_num_threads(runtime.threads)
    token_level = trial.family.endswith(":TokenClassification")
    meta, splits = load_prepared(trial.task_data_dir)
    data = {name: unpadded_examples(split, token_level) for name, split in splits.items()}
    tokenizer = AutoTokenizer.from_pretrained(trial.checkpoint_path)
    pad = DataCollatorForTokenClassification(tokenizer) if token_level else DataCollatorWithPadding(tokenizer)
    train_collator, eval_collator = CountingCollator(pad), CountingCollator(pad)

    class TrainerModel(nn.Module):
        """The project's head on the backbone, with the loss the Trainer expects from a model."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, labels=None):
            logits = self.model(input_ids, attention_mask)
            loss = None if labels is None else F.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE)
            return {"loss": loss, "logits": logits}

    started, cpu_started = time.perf_counter(), time.process_time()
    set_seed(trial.seed)
    from sweeper.contract.registry import resolve

    family = resolve(trial.family)
    model = TrainerModel(family.build(AutoModel.from_pretrained(trial.checkpoint_path), meta))
    n_train, batch = len(data["train"]), protocol.batch_size
    steps = min(protocol.max_steps, math.ceil(protocol.epochs * n_train / batch))
    optimizer = protocol.optimizer
    args = TrainingArguments(
        output_dir=str(Path(out_path).parent / "trainer"), max_steps=steps, learning_rate=trial.learning_rate,
        per_device_train_batch_size=min(batch, runtime.micro_batch_size),
        gradient_accumulation_steps=max(1, batch // runtime.micro_batch_size),
        per_device_eval_batch_size=runtime.eval_batch_size, lr_scheduler_type="linear",
        warmup_steps=max(1, round(protocol.warmup_ratio * steps)), optim="adamw_torch",
        adam_beta1=optimizer.betas[0], adam_beta2=optimizer.betas[1], adam_epsilon=optimizer.eps,
        weight_decay=optimizer.weight_decay, max_grad_norm=optimizer.grad_clip, seed=trial.seed, use_cpu=True,
        save_strategy="no", eval_strategy="no", logging_strategy="no", report_to="none", disable_tqdm=True,
        dataloader_num_workers=0, remove_unused_columns=False)
    trainer = Trainer(model=model, args=args, train_dataset=data["train"], data_collator=train_collator)
    output = trainer.train()
    trained = time.perf_counter()
    trainer.data_collator = eval_collator
    scores = {}
    for name in ("validation", "test"):
        logits = trainer.predict(data[name]).predictions
        predicted = np.asarray(logits).argmax(-1)
        scores[name] = (tag_scores(*word_level_tags(predicted, splits[name], meta["labels"]))[protocol.scoring]
                        if token_level else accuracy(predicted, splits[name]["labels"]))
    finished = time.perf_counter()
    Path(out_path).write_text(json.dumps({
        "trial_key": trial.trial_key, "task": trial.task.name, "compute_s": finished - started,
        "compute_cpu_s": time.process_time() - cpu_started,
        "train_s": trained - started, "steps": steps, "train_loss": output.training_loss,
        "validation_score": scores["validation"], "test_score": scores["test"],
        "real_tokens": train_collator.real + eval_collator.real,
        "forwarded_tokens": train_collator.forwarded + eval_collator.forwarded,
        "train_real_tokens": train_collator.real, "train_forwarded_tokens": train_collator.forwarded}))


def hf_grid(configs: list, slots: int, work: Path) -> tuple[float, list[dict]]:
    """Every trial in a fresh `python` process, `slots` processes at a time: (wall, results)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}

    def one(index: int) -> dict:
        folder = work / f"hf-{index:03d}"
        folder.mkdir(parents=True)
        (folder / "trial.pkl").write_bytes(pickle.dumps(configs[index]))
        started = time.perf_counter()
        with open(folder / "log.txt", "w") as log:
            child = subprocess.Popen([sys.executable, __file__, "hf-trial", str(folder / "trial.pkl"),
                                      str(folder / "result.json")], env=env, stdout=log, stderr=subprocess.STDOUT)
            _, status, usage = os.wait4(child.pid, 0)  # the child's own CPU time, whatever else runs
        wall = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status):
            raise RuntimeError(f"baseline trial {index} failed:\n{(folder / 'log.txt').read_text()[-3000:]}")
        return {**json.loads((folder / "result.json").read_text()), "process_s": wall,
                "process_cpu_s": usage.ru_utime + usage.ru_stime}

    started = time.perf_counter()
    with ThreadPoolExecutor(slots) as pool:
        results = list(pool.map(one, range(len(configs))))
    return time.perf_counter() - started, results


# --- the sweeper ---------------------------------------------------------------------------------

def counted_trainable(config: dict, trials, out_dir: str) -> None:
    """`sweeper.run.tune_grid.finetune_trainable`, plus the trial's token counts written to `out_dir`
    (they live in the worker process: `TOKEN_COUNTS` is per process, reset per trial here)."""
    called = time.time()  # before the imports: a worker's first trial pays them
    from ray import tune

    from sweeper.run.search import SEARCH_METRIC, search_score
    from trainables.finetune_loop import run_trial
    from trainables.tasks.packing import TOKEN_COUNTS

    TOKEN_COUNTS.reset()
    trial = trials.config_at(config)
    cpu_started = time.process_time()
    result = run_trial(trial)
    Path(out_dir, f"{trial.trial_key}.json").write_text(json.dumps({
        "worker": os.getpid(), "called": called, "left": time.time(),
        "trial_key": trial.trial_key, "task": trial.task.name, "compute_s": result["wall_time_s"],
        "compute_cpu_s": time.process_time() - cpu_started,
        "status": result["status"], "validation_score": result["validation_score"],
        "test_score": result["test_score"], "real_tokens": TOKEN_COUNTS.real,
        "forwarded_tokens": TOKEN_COUNTS.computed}))
    tune.report({**result, SEARCH_METRIC: search_score(result)})


def sweeper_grid(spec, plan, layout, task_dirs: dict, runtime, work: Path) -> tuple[float, list[dict], tuple]:
    """The grid as `sweeper run` runs it (one Tuner run, reused actors): (wall, per-trial results,
    its (start, end) in epoch seconds, the clock the trials' own times are on)."""
    import shutil

    from sweeper.run.tune_grid import run_shards
    from sweeper.run.shards import EvaluationSets, grid_shards

    out = work / f"sweeper-{'packed' if runtime.packing else 'padded'}"
    out.mkdir(parents=True)
    shutil.rmtree(layout.results, ignore_errors=True)
    shards = grid_shards(list(plan.trials), layout, task_dirs, len(plan.trials), EvaluationSets(), runtime)
    started, began = time.perf_counter(), time.time()
    tally = run_shards(spec, shards, layout, trainable_fn=counted_trainable, out_dir=str(out))
    wall, ended = time.perf_counter() - started, time.time()
    assert tally.get("ok") == len(plan.trials), tally
    return wall, [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))], (began, ended)


def slot_use(results: list[dict], span: tuple[float, float]) -> str:
    """Where the sweeper's slots spent the grid: before their first trial (Tune's start, the
    worker's start and imports), in trials, between trials, and idle after their last one."""
    import numpy as np

    workers: dict[int, list[dict]] = {}
    for r in results:
        workers.setdefault(r["worker"], []).append(r)
    first, busy, between, last = [], [], [], []
    for trials in workers.values():
        trials.sort(key=lambda r: r["called"])
        first.append(trials[0]["called"] - span[0])
        busy.append(sum(r["left"] - r["called"] for r in trials))
        between.append(sum(b["called"] - a["left"] for a, b in zip(trials, trials[1:])))
        last.append(span[1] - trials[-1]["left"])
    return (f"{len(workers)} workers, mean per worker: {np.mean(first):.1f} s before its first trial (Tune's start, "
            f"its own start), {np.mean(busy):.1f} s in trials (its imports and first cache loads included), "
            f"{np.mean(between):.2f} s between trials, {np.mean(last):.1f} s after its last")


def bench_spec(args):
    """benchmarks/trials_per_hour.py's spec (micro.yaml, one checkpoint of `tiny`) with the SC and
    TC tasks at `--max-length`, `--lrs` x `--seeds` trials each, micro.yaml's step budgets."""
    from benchmarks.trials_per_hour import bench_spec as one_task_spec
    from sweeper.spec.finetuning import TaskBudgetSpec

    spec = one_task_spec(argparse.Namespace(preset="tiny", trials=args.seeds, steps=args.sc_steps))
    ft = spec.finetuning
    return replace(spec, study="bench-finetune-vs-hf", resources=replace(spec.resources, cpus_per_trial=1),
                   finetuning=replace(
                       ft, tasks=[SC, TC], learning_rates=LEARNING_RATES[:args.lrs],
                       task_budgets={TC: TaskBudgetSpec(max_steps=args.tc_steps, epochs=2.0)},
                       max_length=args.max_length, max_train_examples=args.max_train,
                       max_eval_examples=args.max_eval))


def padded_fraction(configs: list) -> float:
    """Useful-token fraction of the padded path without running it: every forward pass is
    max_length wide, so it is the mean real length of the examples it passes over / max_length
    (the loop's order replayed: the same rows of each split as the trial would)."""
    import numpy as np

    from trainables.tasks.data import load_prepared

    real = forwarded = 0
    for trial in configs:
        _, splits = load_prepared(trial.task_data_dir)
        lengths = {name: split["attention_mask"].sum(1) for name, split in splits.items()}
        n_train, batch = len(lengths["train"]), trial.protocol.batch_size
        steps = min(trial.protocol.max_steps, math.ceil(trial.protocol.epochs * n_train / batch))
        rng = np.random.default_rng(trial.seed)
        order = np.concatenate([rng.permutation(n_train) for _ in range(math.ceil(steps * batch / n_train) + 1)])
        rows = order[:steps * batch]
        real += int(lengths["train"][rows].sum()) + int(lengths["validation"].sum() + lengths["test"].sum())
        forwarded += (len(rows) + len(lengths["validation"]) + len(lengths["test"])) * trial.protocol.max_length
    return real / forwarded


def summary(results: list[dict]) -> dict:
    """Per task and all: trials, mean compute, useful-token fraction, mean scores."""
    import numpy as np

    rows = {}
    for task in (SC, TC, None):
        chosen = [r for r in results if task is None or r["task"] == task]
        if chosen:
            rows[task or "all"] = {
                "trials": len(chosen), "compute_s": float(np.mean([r["compute_s"] for r in chosen])),
                "compute_cpu_s": float(np.mean([r["compute_cpu_s"] for r in chosen])),
                "useful": sum(r["real_tokens"] for r in chosen) / sum(r["forwarded_tokens"] for r in chosen),
                "validation": float(np.mean([r["validation_score"] for r in chosen])),
                "test": float(np.mean([r["test_score"] for r in chosen])),
                "process_s": float(np.mean([r["process_s"] for r in chosen])) if "process_s" in chosen[0] else None,
                "process_cpu_s": (float(np.mean([r["process_cpu_s"] for r in chosen]))
                                  if "process_cpu_s" in chosen[0] else None)}
    return rows


def print_table(name: str, wall: float, rows: dict, base: dict | None = None, base_wall: float | None = None):
    for task, row in rows.items():
        ratio = (f" {base[task]['compute_s'] / row['compute_s']:5.2f}x" if base else "       ")
        cpu_ratio = (f" {base[task]['compute_cpu_s'] / row['compute_cpu_s']:5.2f}x" if base else "       ")
        process = (f"  process {row['process_s']:6.1f} s, CPU {row['process_cpu_s']:6.1f} s" if row["process_s"]
                   else "")
        print(f"  {name:<20} {task:<23} {row['trials']:3d} trials  useful {row['useful']:.3f}  compute "
              f"{row['compute_s']:6.1f} s{ratio}  CPU {row['compute_cpu_s']:6.1f} s{cpu_ratio}  val "
              f"{row['validation']:5.1f}  test {row['test']:5.1f}{process}")
    if wall is not None:
        ratio = f"   {base_wall / wall:5.2f}x faster" if base_wall else ""
        print(f"  {name:<22} grid wall {wall:7.1f} s{ratio}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 lr x 1 seed, 8 steps, small splits")
    parser.add_argument("--padded", action="store_true", help="also time the padded path (packing off): slow")
    parser.add_argument("--lrs", type=int, default=6, help="learning rates per task (1-6; the paper's cell: 6)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per learning rate (the paper's cell: 5)")
    parser.add_argument("--slots", type=int, default=os.cpu_count(), help="trials at a time, both sides")
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--sc-steps", type=int, default=40, help="SC optimizer steps (micro.yaml: 40)")
    parser.add_argument("--tc-steps", type=int, default=120, help="TC optimizer steps (micro.yaml: 120)")
    parser.add_argument("--max-train", type=int, default=2000)
    parser.add_argument("--max-eval", type=int, default=200)
    args = parser.parse_args()
    if args.quick:
        args.lrs, args.seeds, args.sc_steps, args.tc_steps, args.max_train, args.max_eval = 1, 1, 8, 8, 256, 64
    if importlib.util.find_spec("accelerate") is None:
        sys.exit("the Trainer baseline needs accelerate: .venv/bin/pip install -c constraints.txt -e '.[bench]'")

    import ray

    from benchmarks.trials_per_hour import fake_checkpoint
    from sweeper.plan.study_plan import plan_study
    from sweeper.run.corpora import prepare_corpora
    from sweeper.run.ray_compat import use_loopback_node
    from sweeper.run.shards import EvaluationSets, grid_shards, trial_runtime
    from sweeper.run.task_prep import corpus_tokenizers, prepare_tasks
    from sweeper.store.layout import StudyLayout

    spec = bench_spec(args)
    if args.quick:  # a tokenizer from fewer documents: the corpus job is setup, not a figure
        spec = replace(spec, data=replace(spec.data, max_documents=1000))
    plan = plan_study(spec)
    work = Path(tempfile.mkdtemp(prefix="bench-ft-hf-"))
    started = time.perf_counter()
    use_loopback_node()
    ray.init(address="local", num_cpus=args.slots, include_dashboard=False,
             log_to_driver=False)
    ray_start = time.perf_counter() - started
    layout = StudyLayout(str(work / "study"))
    corpora = prepare_corpora(spec, plan, layout)
    fake_checkpoint(layout, plan, next(iter(corpora.values())))
    task_dirs = prepare_tasks(spec, layout, corpus_tokenizers(corpora))
    print(f"setup, once per study and in neither grid wall: Ray start {ray_start:.1f} s, tokenizer and task "
          f"preparation {time.perf_counter() - started - ray_start:.1f} s", flush=True)
    packed = replace(trial_runtime(spec), packing=True)
    (shard,) = grid_shards(list(plan.trials), layout, task_dirs, len(plan.trials), EvaluationSets(), packed)
    configs = [shard.trial_config({"trial_index": i}) for i in range(len(plan.trials))]
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; {args.slots} "
          f"trials at a time, 1 thread each; {len(configs)} trials ({args.lrs} lr x {args.seeds} seeds x SC, TC), "
          f"max_length {args.max_length}, SC {args.sc_steps} / TC {args.tc_steps} steps of batch "
          f"{spec.finetuning.batch_size}, up to {args.max_train} train / {args.max_eval} eval examples", flush=True)

    ours_wall, ours, ours_span = sweeper_grid(spec, plan, layout, task_dirs, packed, work)
    print(f"sweeper grid done, load {os.getloadavg()[0]:.1f}", flush=True)
    padded = None
    if args.padded:
        padded = sweeper_grid(spec, plan, layout, task_dirs, replace(packed, packing=False), work)
    ray.shutdown()  # the baseline runs without Ray's processes beside it
    hf_wall, hf = hf_grid(configs, args.slots, work)

    base = summary(hf)
    print(f"\nresults (compute = model build + training + scoring validation and test, mean per trial; "
          f"ratios vs the Trainer; load now {os.getloadavg()[0]:.1f}):")
    print_table("HF Trainer, process", hf_wall, base)
    print_table("sweeper, packed", ours_wall, summary(ours), base, hf_wall)
    print(f"  {'':<22} {slot_use(ours, ours_span)}")
    if padded:
        print_table("sweeper, padded", padded[0], summary(padded[1]), base, hf_wall)
    else:
        print(f"  {'sweeper, padded':<22} {'all':<24} useful {padded_fraction(configs):.3f} (not timed: --padded)")
    sweeper_all, hf_all = summary(ours)["all"], base["all"]
    print(f"\nuseful-token fraction  {sweeper_all['useful']:.3f} (Trainer {hf_all['useful']:.3f}; target >= 0.9)")
    print(f"trial compute          {hf_all['compute_s'] / sweeper_all['compute_s']:.2f}x faster than the Trainer "
          f"(target >= 2x); in CPU seconds {hf_all['compute_cpu_s'] / sweeper_all['compute_cpu_s']:.2f}x")
    print(f"grid wall              {hf_wall / ours_wall:.2f}x faster than a process per trial (target >= 3x); "
          f"{hf_wall / (ours_wall + ray_start):.2f}x counting Ray's start; a baseline process spends "
          f"{hf_all['process_s'] - hf_all['compute_s']:.1f} s outside its trial (start, imports, data, tokenizer; "
          f"{hf_all['process_cpu_s'] - hf_all['compute_cpu_s']:.1f} CPU seconds)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["hf-trial"]:
        hf_trial(*sys.argv[2:4])
    else:
        main()
