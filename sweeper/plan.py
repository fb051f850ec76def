"""Spec -> the concrete study: pretraining runs, evaluated checkpoints, fine-tuning trials.

Every run and trial carries a stable key: a hash of its resolved configuration (never of a
timestamp or of its position in the grid), so a rerun or an extended spec maps each cell to
the same key and the results store can say what is already done.
"""
from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import asdict, dataclass, field

from sweeper.catalog import MODEL_PRESETS, task_dict
from sweeper.spec import StudySpec


def stable_key(payload: dict) -> str:
    """16 hex digits of SHA-256 over canonical JSON: equal configs, equal keys."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def format_steps(steps: int) -> str:
    """The authors' step notation: 42000 -> '42k', 1500 -> '1500'."""
    return f"{steps // 1000}k" if steps % 1000 == 0 else str(steps)


def run_name(preset: str, objective: str, steps: int, mask_ratio: float | None, clm_steps: int) -> str:
    """`610m-mlm40-42k`, `610m-clm-42k`, `610m-clm-10k-mlm40-42k` (CLM steps, then the total)."""
    mlm = f"mlm{round(mask_ratio * 100)}" if mask_ratio is not None else ""
    if objective == "clm":
        return f"{preset}-clm-{format_steps(steps)}"
    if objective == "mlm":
        return f"{preset}-{mlm}-{format_steps(steps)}"
    return f"{preset}-clm-{format_steps(clm_steps)}-{mlm}-{format_steps(steps)}"


@dataclass(frozen=True, kw_only=True, slots=True)
class PretrainingRun:
    name: str
    run_key: str
    preset: str
    objective: str
    """mlm | clm | clm-mlm (a clm-mlm grid at 0 or 1 collapses into a pure run)."""
    mask_ratio: float | None
    clm_fraction: float
    total_steps: int
    checkpoint_steps: tuple[int, ...]
    """Intermediate steps that are fine-tuned; the final step always is."""
    model_config: dict
    identity: dict = field(compare=False, repr=False)
    """The resolved configuration the run_key hashes (kept to explain what changed)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class EvaluatedCheckpoint:
    checkpoint_id: str
    """The run name for the final checkpoint, `<run>-<step>` for an intermediate one."""
    run: PretrainingRun
    step: int
    tokens_seen: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Trial:
    trial_key: str
    checkpoint: EvaluatedCheckpoint
    task: str
    learning_rate: float
    seed: int


@dataclass(frozen=True, kw_only=True, slots=True)
class StudyPlan:
    runs: tuple[PretrainingRun, ...]
    checkpoints: tuple[EvaluatedCheckpoint, ...]
    trials: tuple[Trial, ...]


def model_config(spec: StudySpec) -> dict:
    return {**MODEL_PRESETS[spec.model.preset], "vocab_size": spec.data.vocab_size,
            "max_position_embeddings": max(2048, spec.data.seq_len), **spec.model.overrides}


def expand_runs(spec: StudySpec) -> list[PretrainingRun]:
    pre = spec.pretraining
    shared = {"data": asdict(spec.data), "optimizer": asdict(pre.optimizer), "seed": pre.seed,
              "global_batch_size": pre.global_batch_size, "warmup_steps": pre.warmup_steps,
              "decay_steps": pre.decay_steps, "random_replace": pre.random_replace,
              "keep_original": pre.keep_original}
    config = model_config(spec)
    runs: dict[str, PretrainingRun] = {}
    for grid in pre.runs:
        ratios = grid.mask_ratio if grid.objective != "clm" else [None]
        shares = {"mlm": [0.0], "clm": [1.0], "clm-mlm": grid.clm_fraction}[grid.objective]
        for steps, ratio, share in itertools.product(grid.steps or [pre.steps], ratios, shares):
            objective = "clm" if share == 1.0 else "mlm" if share == 0.0 else "clm-mlm"
            ratio = None if objective == "clm" else ratio
            name = run_name(spec.model.preset, objective, steps, ratio, round(share * steps))
            identity = {"model": config, "objective": objective, "mask_ratio": ratio,
                        "clm_fraction": share, "steps": steps, **shared}
            previous = runs.get(name)
            checkpoints = tuple(sorted(set(grid.checkpoint_steps) | set(previous.checkpoint_steps if previous else ())))
            runs[name] = PretrainingRun(
                name=name, run_key=stable_key(identity), preset=spec.model.preset, objective=objective,
                mask_ratio=ratio, clm_fraction=share, total_steps=steps,
                checkpoint_steps=checkpoints, model_config=config, identity=identity,
            )
    return list(runs.values())


def finetune_protocol(spec: StudySpec) -> dict:
    """The settings every trial shares; part of each trial key."""
    ft = spec.finetuning
    return {key: getattr(ft, key) for key in (
        "batch_size", "max_steps", "epochs", "max_length", "warmup_ratio", "betas", "eps",
        "weight_decay", "grad_clip", "max_train_examples", "max_eval_examples",
    )}


def plan_study(spec: StudySpec) -> StudyPlan:
    runs = expand_runs(spec)
    tokens_per_step = spec.pretraining.global_batch_size * spec.data.seq_len
    checkpoints = [
        EvaluatedCheckpoint(
            checkpoint_id=run.name if step == run.total_steps else f"{run.name}-{step}",
            run=run, step=step, tokens_seen=step * tokens_per_step,
        )
        for run in runs
        for step in (*run.checkpoint_steps, run.total_steps)
    ]
    protocol = finetune_protocol(spec)
    trials = [
        Trial(
            trial_key=stable_key({"run_key": ckpt.run.run_key, "step": ckpt.step, "task": task_dict(task),
                                  "lr": lr, "seed": seed, "protocol": protocol}),
            checkpoint=ckpt, task=task, learning_rate=lr, seed=seed,
        )
        for ckpt in checkpoints
        for task in spec.finetuning.tasks
        for lr in spec.finetuning.learning_rates
        for seed in spec.finetuning.seeds
    ]
    return StudyPlan(runs=tuple(runs), checkpoints=tuple(checkpoints), trials=tuple(trials))
