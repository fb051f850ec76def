"""Benchmark 11: the same fine-tuning grid on an external BERT and on the study's own `llama_encoder`.

A checkpoint from elsewhere runs through a different backbone path (trainables.backbones: a
Hugging Face model behind an adapter that passes a 4-D document mask and position ids, after a
packing probe) than the study's own model. This measures what that path costs, on the same
trials: sequence classification (`wordnet-supersense-cls`) and token classification
(`wordnet-supersense-tag`), short WordNet sentences at max_length 128, `--lrs` learning rates x
`--seeds` seeds per task, one thread, through `trainables.finetune_loop.run_trial` (what a Tune
worker calls; no Ray here, so only the trial's own work is timed).

The two models are sized alike: a tiny random BERT (tests/support/tiny_checkpoints.py: hidden 128, 4
layers, feed-forward 512, two matrices) brought in as `finetuning.checkpoints` would bring it
(planned, then imported into a study folder: sweeper.run.checkpoint_import), and a `llama_encoder` of hidden
128, 4 layers and a gated feed-forward of 341 (3 x 341 ~ 2 x 512 weights per layer), saved as a
pretraining run saves it. Both read the same task data, tokenised once with the BERT tokenizer
(the llama_encoder's vocabulary is sized to it), so the figures differ only by the backbone path.

Figures, the external one against the own one measured in the same run:
- trial time: mean wall seconds per trial (model load + training + scoring), and the ratio
  external / own (target <= 1.2);
- useful-token fraction: real tokens / tokens computed in forward passes
  (`trainables.tasks.packing.TOKEN_COUNTS`, target >= 0.9 for both), and how each trial ran
  (`packing` of its result: packed, or padded when the probe refused packing).

    .venv/bin/python benchmarks/external_backbone.py [--lrs 2] [--seeds 2] [--steps 30]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
TASKS = ("wordnet-supersense-cls", "wordnet-supersense-tag")
HIDDEN, LAYERS, BERT_FFN, GATED_FFN = 128, 4, 512, 341


def external_folder(work: Path) -> tuple[str, object]:
    """The tiny BERT, planned and imported as a `finetuning.checkpoints` entry is."""
    from tiny_checkpoints import build_tiny_checkpoint

    from sweeper.plan.load import load_study
    from sweeper.plan.study_plan import plan_study
    from sweeper.run.checkpoint_import import import_external_checkpoints
    from sweeper.store.layout import StudyLayout

    source = build_tiny_checkpoint("bert", work / "bert-source", hidden_size=HIDDEN, layers=LAYERS)
    config = json.loads((source / "config.json").read_text())
    config.update(intermediate_size=BERT_FFN, num_attention_heads=4)
    from transformers import AutoConfig, AutoModel

    AutoModel.from_config(AutoConfig.for_model(**config)).save_pretrained(source)  # the sizes above
    spec_path = work / "spec.yaml"
    spec_path.write_text(f"study: bench-external\nfinetuning:\n  tasks: [{TASKS[0]}]\n  checkpoints:\n"
                         f"    - name: bert\n      source: {source}\n")
    plan = plan_study(load_study(spec_path).spec)
    (folder,) = import_external_checkpoints(list(plan.checkpoints), StudyLayout(str(work / "study"))).values()
    return folder, config


def own_folder(work: Path, vocab_size: int, tokenizer_dir: str) -> str:
    """A llama_encoder of like size, saved as a pretraining run saves its checkpoints."""
    import shutil

    from sweeper.store import storage
    from sweeper.store.layout import CHECKPOINT_MARKER
    from trainables.model import LlamaEncoderConfig, build_model

    folder = work / "own"
    config = LlamaEncoderConfig(vocab_size=vocab_size, hidden_size=HIDDEN, intermediate_size=GATED_FFN,
                                num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=4)
    build_model(config, seed=0).save_pretrained(folder)
    shutil.copytree(tokenizer_dir, folder / "tokenizer")
    storage.write_json(str(folder / CHECKPOINT_MARKER), {"files": {}})
    return str(folder)


def prepared(task: str, tokenizer_dir: str, out: Path, max_length: int) -> str:
    from sweeper.contract.registry import family_of, get_task
    from trainables.tasks.data import prepare_task_data

    info = get_task(task)
    prepare_task_data(info, family_of(info.family).implementation, tokenizer_dir, max_length, str(out),
                      max_train=2000, max_eval=200)
    return str(out)


def trial(checkpoint: str, task: str, data_dir: str, lr: float, seed: int, steps: int):
    from sweeper.contract.configs import AdamWConfig, FinetuneProtocol, TrialConfig, TrialRuntime
    from sweeper.contract.registry import family_of, get_task

    info = get_task(task)
    protocol = FinetuneProtocol(learning_rate=lr, batch_size=32, max_steps=steps, epochs=1.0, max_length=128,
                                warmup_ratio=0.1, optimizer=AdamWConfig(), max_train_examples=2000,
                                max_eval_examples=200)
    return TrialConfig(trial_key=f"{task}-{lr}-{seed}", task=info, family=family_of(info.family).implementation,
                       protocol=protocol, seed=seed, checkpoint_path=checkpoint, task_data_dir=data_dir,
                       runtime=TrialRuntime(micro_batch_size=32, eval_batch_size=128, threads=1))


def measure(name: str, checkpoint: str, data: dict[str, str], args) -> dict:
    from trainables.finetune_loop import run_trial
    from trainables.tasks.packing import TOKEN_COUNTS

    times, packing, real, computed = [], set(), 0, 0
    for task in TASKS:
        for lr in [1e-4 * 3 ** i for i in range(args.lrs)]:
            for seed in range(args.seeds):
                TOKEN_COUNTS.reset()
                started = time.perf_counter()
                result = run_trial(trial(checkpoint, task, data[task], lr, seed, args.steps))
                times.append(time.perf_counter() - started)
                packing.add(result.get("packing"))
                real, computed = real + TOKEN_COUNTS.real, computed + TOKEN_COUNTS.computed
    return {"name": name, "trials": len(times), "mean_s": statistics.fmean(times), "times": times,
            "useful": real / computed if computed else float("nan"), "packing": sorted(map(str, packing))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lrs", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="bench-external-"))
    external, config = external_folder(work)
    tokenizer_dir = str(Path(external) / "tokenizer")
    own = own_folder(work, config["vocab_size"], tokenizer_dir)
    data = {task: prepared(task, tokenizer_dir, work / "tasks" / task, 128) for task in TASKS}
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, 1 thread; {args.lrs} lrs x {args.seeds} seeds x "
          f"{len(TASKS)} tasks, {args.steps} steps a trial, max_length 128", flush=True)
    measure("warm-up", own, data, argparse.Namespace(lrs=1, seeds=1, steps=2))  # imports, first allocations
    rows = [measure("llama_encoder (own)", own, data, args), measure("bert (external)", external, data, args)]
    base = rows[0]["mean_s"]
    for row in rows:
        print(
            f"{row['name']:22s} {row['trials']:3d} trials  {row['mean_s']:6.2f} s/trial  ratio "
            f"{row['mean_s'] / base:4.2f}"
            f"  useful-token fraction {row['useful']:.3f}  ran {', '.join(row['packing'])}",
            flush=True,
        )
    ratio = rows[1]["mean_s"] / base
    print(
        f"targets: external/own trial time {ratio:.2f} (<= 1.2: {'met' if ratio <= 1.2 else 'MISSED'}); useful >= 0.9: "
        + ", ".join(f"{row['name']} {'met' if row['useful'] >= 0.9 else 'MISSED'}" for row in rows),
        flush=True,
    )


if __name__ == "__main__":
    main()
