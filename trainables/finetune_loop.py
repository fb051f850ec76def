"""One fine-tuning trial: checkpoint x task x learning rate x seed, the paper's protocol.

Under a Tune trial scheduler (ASHA, median stopping) the trial hands each point of its
validation curve to a callback that reports it to Tune; a trial Tune stops ends inside that
report (Ray raises SystemExit(0) in the trial's thread), and its weights and GPU memory are
released before the reused worker takes its next trial.

Run by Ray Tune as a function trainable with `reuse_actors=True`: one worker process runs
many trials in a row, so everything a trial sets (seeds, threads) is set again at its start,
and the read-only inputs (backbone weights, prepared task data) are cached per process: trials
of the same checkpoint and task placed on one worker load them once.
"""
from __future__ import annotations

import json
import math
import re
import time
import traceback
from collections.abc import Callable
from functools import lru_cache

import numpy as np
import torch
from torch import nn

from sweeper.contract.configs import TrialConfig
from sweeper.contract.registry import resolve
from sweeper.contract.schedules import linear_warmup_decay_lr
from sweeper.store import storage
from sweeper.store.cache_keys import checkpoint_tokenizer_digest
from trainables.backbones import CheckpointUnloadable, load_backbone
from trainables.tasks.data import load_prepared
from trainables.tasks.family import SCORINGS, Evaluation, TaskFamily
from trainables.tasks.packing import PROBE_TOLERANCE, PackedBackbone, packing_error


@lru_cache(maxsize=4)
def cached_task_data(task_data_dir: str):
    return load_prepared(task_data_dir)


@lru_cache(maxsize=16)
def checkpoint_tokenizer(checkpoint_path: str) -> str:
    return checkpoint_tokenizer_digest(checkpoint_path)


def check_tokenizer(checkpoint_path: str | None, meta: dict, task_data_dir: str) -> None:
    """Refuse task data encoded with another tokenizer than the checkpoint's own: its token ids
    would name other tokens, silently when the vocabularies have the same size (a corpus prepared
    again after the checkpoint's run trained on an earlier one, or the checkpoint's tokenizer files
    edited since its run). CheckpointUnloadable: the trial fails, recorded with that one line."""
    expected = meta.get("tokenizer_digest")  # data prepared before it was recorded: not checked
    if expected and checkpoint_path is not None and checkpoint_tokenizer(checkpoint_path) != expected:
        # The checkpoint's folder, not the code: a recorded failure in one line (finetune_trainable).
        raise CheckpointUnloadable(
            f"the task data {storage.display(task_data_dir)} was encoded with another tokenizer than the checkpoint "
            f"{storage.display(checkpoint_path)} was trained with (its run trained on a corpus prepared before, or "
            "its tokenizer files were edited since); retrain the run or remove its folder and run the study again")


def build_backbone(checkpoint_path: str | None, random_init_config: dict | None):
    """The checkpoint's backbone (the study's own or any Hugging Face one, `trainables.backbones`),
    or the study's architecture with random weights (the control)."""
    from trainables.model import LlamaEncoderConfig, LlamaEncoderModel

    if checkpoint_path is not None:
        return load_backbone(checkpoint_path)
    return LlamaEncoderModel(LlamaEncoderConfig(**random_init_config))


@lru_cache(maxsize=8)
def packing_is_sound(checkpoint_path: str, device_type: str) -> bool:
    """Whether packed batches give this checkpoint's padded hidden states on this kind of device
    (`trainables.tasks.packing.packing_error`, within PROBE_TOLERANCE of their scale): probed
    once per process, on a copy of the backbone freed before the trial's own is built. Says so
    in one line where it is not, and the trial falls back to dynamic padding."""
    device = torch.device(device_type)
    backbone = load_backbone(checkpoint_path).to(device)
    error, scale = packing_error(backbone, device)
    model_type = backbone.config.model_type
    del backbone
    if error <= PROBE_TOLERANCE * scale:
        return True
    print(f"[finetune] {checkpoint_path} (model_type {model_type}): packed and padded hidden states differ "
          f"by {error:.3g} (> {PROBE_TOLERANCE:g} x max |hidden| {scale:.3g}): its attention does not keep packed "
          f"examples apart; its trials run with dynamic padding", flush=True)
    return False


WEIGHT_DTYPES = {"fp32": None, "bf16": torch.bfloat16}
"""The weights' dtype per `finetuning.precision` (AdamW's state follows the weights); None: as
loaded, in the default float dtype (float32; float64 where a test sets it)."""
NORM_LAYERS = (nn.LayerNorm, nn.RMSNorm)
NO_DECAY_NAMES = re.compile(r"bias|layernorm|rmsnorm|(?:^|\.)norm(?:$|\.)|_norm(?:$|\.)")
"""The Hugging Face Trainer's rule (`Trainer.get_decay_parameter_names`): no weight decay for a
parameter whose lower-cased full name matches this, or of a LayerNorm module; RMSNorm modules are
spared by type too (the study's encoder names them `*_layernorm` and `norm`, which match anyway)."""


def parameter_groups(model: nn.Module, exempt: str) -> list:
    """AdamW's parameters for `finetuning.weight_decay_exempt`: all in one group under the
    optimizer's weight decay (none), or that group less biases and normalisation weights, which
    get a group of their own with weight decay 0 (bias_and_norm)."""
    if exempt == "none":
        return list(model.parameters())
    decayed, spared, seen = [], [], set()
    for module_name, module in model.named_modules():
        for name, parameter in module.named_parameters(prefix=module_name, recurse=False):
            if id(parameter) not in seen:  # a shared (tied) weight is listed once
                seen.add(id(parameter))
                spare = isinstance(module, NORM_LAYERS) or NO_DECAY_NAMES.search(name.lower())
                (spared if spare else decayed).append(parameter)
    return [{"params": decayed}, {"params": spared, "weight_decay": 0.0}]


def device_and_autocast():
    """The trial's GPU when Ray gave it one (CUDA_VISIBLE_DEVICES), with bf16 autocast (the
    paper fine-tunes in bf16; whether the weights are bf16 too is `finetuning.precision`); else
    the CPU without autocast."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return device, torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")


def evaluate(model, family: TaskFamily, split: dict, meta: dict, trial: TrialConfig) -> Evaluation:
    """Both conventions' scores of the current weights on one split, in [0, 100], and the
    predictions they were computed from: the family's `evaluate`, or for a family without one
    (a plugin written before it) its `score` under both names and no predictions."""
    model.eval()
    device, autocast = device_and_autocast()
    own = getattr(family, "evaluate", None)
    with torch.no_grad(), autocast:
        if own is not None:
            evaluation = own(model, split, meta, trial.runtime.eval_batch_size, device, trial.protocol)
        else:
            score = family.score(model, split, meta, trial.runtime.eval_batch_size, device, trial.protocol)
            evaluation = Evaluation(scores=dict.fromkeys(SCORINGS, score), predictions=[])
    model.train()
    return evaluation


def metric_name(family: TaskFamily, trial: TrialConfig) -> str:
    """The metric the trial's scores are (`metric` column): its family's name for the trial's
    convention (`METRICS`), or the task's registry metric for a family that names none."""
    return getattr(family, "METRICS", {}).get(trial.protocol.scoring, trial.task.metric)


def scored(evaluations: dict[str, Evaluation], scoring: str) -> dict:
    """The score columns of a row from its splits' evaluations: `validation_score` / `test_score`
    under the trial's convention, and both conventions' under their own names."""
    columns = {f"{split}_score": evaluation.scores[scoring] for split, evaluation in evaluations.items()}
    return columns | {f"{convention}_{split}_score": evaluation.scores[convention]
                      for split, evaluation in evaluations.items() for convention in SCORINGS}


def prediction_rows(trial_key: str, evaluations: dict[str, Evaluation]) -> list[dict]:
    """Rows of the store's `predictions` table: prediction and gold as JSON text, the form the
    store keeps and a family's `rescore` reads back."""
    return [{"trial_key": trial_key, "split": split, "example": int(p["example"]),
             "prediction": json.dumps(p["prediction"]), "gold": json.dumps(p["gold"])}
            for split, evaluation in evaluations.items() for p in evaluation.predictions]


def backward_batch(family: TaskFamily, model, split: dict, indices: np.ndarray, micro: int, device,
                   protocol, autocast) -> float:
    """Backpropagate the mean loss of one optimizer step's batch `indices`, `micro` units a
    forward pass; returns its value. A family whose loss couples the examples of a batch
    (retrieval's in-batch negatives) does it itself (`backward`: gradient caching); any other
    accumulates the gradients of its micro-batches' mean losses, each weighted by its share."""
    own = getattr(family, "backward", None)
    if own is not None:
        return own(model, split, indices, micro, device, protocol, autocast)
    total = 0.0
    for start in range(0, len(indices), micro):  # gradient accumulation to the effective batch
        chunk = indices[start:start + micro]
        with autocast:
            loss = family.loss(model, split, chunk, device, protocol)
        (loss * len(chunk) / len(indices)).backward()
        total += loss.item() * len(chunk) / len(indices)
    return total


CurvePointCallback = Callable[[int, float, float], None]
"""Called at each curve point with (optimizer step, train loss, validation score)."""


def run_trial(trial: TrialConfig, on_curve_point: CurvePointCallback | None = None) -> dict:
    """Train on the task's train split, then score the final weights on validation and test, and
    (retrieval) on each evaluation-only set in `trial.companions` with the same weights.
    `on_curve_point` sees every point of the validation curve (every `runtime.eval_every`
    steps, the final weights excepted) as it is measured."""
    try:
        return train_and_score(trial, on_curve_point)
    except BaseException as stopped:  # Tune stopping the trial (SystemExit), or an error
        traceback.clear_frames(stopped.__traceback__)  # the weights the unwound frames still hold
        raise
    finally:
        if torch.cuda.is_available():  # the next trial on this reused worker starts with a clean GPU
            torch.cuda.empty_cache()


def train_and_score(trial: TrialConfig, on_curve_point: CurvePointCallback | None) -> dict:
    started = time.time()
    protocol, runtime = trial.protocol, trial.runtime
    torch.set_num_threads(runtime.threads)
    torch.manual_seed(trial.seed)
    rng = np.random.default_rng(trial.seed)
    meta, splits = cached_task_data(trial.task_data_dir)
    check_tokenizer(trial.checkpoint_path, meta, trial.task_data_dir)
    family: TaskFamily = resolve(trial.family)
    device, autocast = device_and_autocast()
    # Heads call the backbone on padded batches; packed, it computes only their real tokens. The
    # study's own architecture is known to keep packed examples apart; a checkpoint is probed.
    packing = runtime.packing and (trial.checkpoint_path is None or packing_is_sound(trial.checkpoint_path,
                                                                                     device.type))
    backbone = PackedBackbone(build_backbone(trial.checkpoint_path, trial.random_init_config), packing,
                              dynamic_padding=runtime.packing and not packing)
    model = family.build(backbone, meta).to(device, dtype=WEIGHT_DTYPES[protocol.precision])
    # The fused kernel: one pass over the weights instead of a dozen elementwise ops per tensor
    # (on GPU, a handful of launches instead of hundreds). On this project's CPU: 0.9 ms a step
    # for tiny's weights against 4.1 ms, about 1 % of a token-classification trial.
    optimizer = torch.optim.AdamW(
        parameter_groups(model, protocol.weight_decay_exempt),
        lr=trial.learning_rate,
        fused=device.type in ("cpu", "cuda"),
        **protocol.optimizer.torch_kwargs(),
    )
    train = splits["train"]
    n_train, batch = family.train_size(train), protocol.batch_size
    micro = min(batch, runtime.micro_batch_size)
    steps = min(protocol.max_steps, math.ceil(protocol.epochs * n_train / batch))
    order = np.concatenate([rng.permutation(n_train) for _ in range(math.ceil(steps * batch / max(n_train, 1)) + 1)])
    status, loss_value, step = "ok", float("nan"), -1
    curve = []  # validation score every `eval_every` steps: the eval-curve table
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = linear_warmup_decay_lr(
                step, peak_lr=trial.learning_rate, total_steps=steps, warmup_ratio=protocol.warmup_ratio
            )
        total = backward_batch(family, model, train, order[step * batch:(step + 1) * batch], micro, device,
                               protocol, autocast)
        if not math.isfinite(total):
            status = "diverged"  # stop early, keep the last finite loss; the grid goes on
            break
        loss_value = total
        torch.nn.utils.clip_grad_norm_(model.parameters(), protocol.optimizer.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if runtime.eval_every and (step + 1) % runtime.eval_every == 0 and step + 1 < steps:
            point = evaluate(model, family, splits["validation"], meta, trial).scores[protocol.scoring]
            curve.append({"step": step + 1, "train_loss": loss_value, "validation_score": point})
            if on_curve_point is not None:
                on_curve_point(step + 1, loss_value, curve[-1]["validation_score"])
    result = {"trial_key": trial.trial_key, "learning_rate": trial.learning_rate, "status": status,
              "train_loss": loss_value, "train_steps": step + 1 if status == "ok" else step,
              "metric": metric_name(family, trial), "validation_score": float("nan"), "test_score": float("nan"),
              "also_evaluated": {}, "packing": "packed" if packing else "padded"}
    predictions = []  # rows of the store's predictions table (runtime.keep_predictions)
    if status == "ok":
        evaluations = {split: evaluate(model, family, splits[split], meta, trial) for split in ("validation", "test")}
        result |= scored(evaluations, protocol.scoring)
        predictions += prediction_rows(trial.trial_key, evaluations) if runtime.keep_predictions else []
        for companion in trial.companions:  # scored by the same family: they share its head
            other_meta, other_splits = cached_task_data(companion.task_data_dir)
            evaluations = {split: evaluate(model, family, other_splits[split], other_meta, trial)
                           for split in ("validation", "test")}
            columns = scored(evaluations, protocol.scoring)
            result["also_evaluated"][companion.trial_key] = {
                "validation": columns.pop("validation_score"), "test": columns.pop("test_score"), **columns}
            predictions += prediction_rows(companion.trial_key, evaluations) if runtime.keep_predictions else []
    if runtime.keep_predictions:
        result["predictions"] = predictions
    result["curve"] = curve + [{"step": result["train_steps"], "train_loss": loss_value,
                                "validation_score": result["validation_score"], "test_score": result["test_score"]}]
    result["wall_time_s"] = time.time() - started
    return result
