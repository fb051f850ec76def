"""Spec -> the concrete study: pretraining runs, evaluated checkpoints, fine-tuning trials.

Every run and trial carries a stable key: a hash of its resolved configuration (never of a
timestamp or of its position in the grid), so a rerun or an extended spec maps each cell to
the same key and the results store can say what is already done.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import asdict, dataclass, field, replace

from sweeper.catalog import MODEL_PRESETS, task_dict
from sweeper.spec import StudySpec


def stable_key(payload: dict) -> str:
    """16 hex digits of SHA-256 over canonical JSON: equal configs, equal keys."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def format_steps(steps: int) -> str:
    """The authors' step notation: 42000 -> '42k', 1500 -> '1500'."""
    return f"{steps // 1000}k" if steps % 1000 == 0 else str(steps)


def mlm_tag(mask_ratio: float) -> str:
    return f"mlm{round(mask_ratio * 100)}"


def run_name(preset: str, objective: str, steps: int, mask_ratio: float | None, clm_steps: int) -> str:
    """`610m-mlm40-42k`, `610m-clm-42k`, `610m-clm-10k-mlm40-42k` (CLM steps, then the total)."""
    if objective == "clm":
        return f"{preset}-clm-{format_steps(steps)}"
    if objective == "mlm":
        return f"{preset}-{mlm_tag(mask_ratio)}-{format_steps(steps)}"
    return f"{preset}-clm-{format_steps(clm_steps)}-{mlm_tag(mask_ratio)}-{format_steps(steps)}"


def cpt_name(source: PretrainingRun | str, mask_ratio: float, added_steps: int) -> str:
    """`610m-clm-dec42k-mlm40-64k`: source objective, `dec` + the decayed source's steps, then
    the MLM phase up to the new total. A Hugging Face source: `hf-<model>-mlm40-<added>`."""
    if isinstance(source, str):
        model = re.sub(r"[^A-Za-z0-9.]+", "-", source.rstrip("/").split("/")[-1]).strip("-").lower()
        return f"hf-{model}-{mlm_tag(mask_ratio)}-{format_steps(added_steps)}"
    prefix = source.name.removesuffix(f"-{format_steps(source.total_steps)}")
    total = source.total_steps + added_steps
    return f"{prefix}-dec{format_steps(source.total_steps)}-{mlm_tag(mask_ratio)}-{format_steps(total)}"


@dataclass(frozen=True, kw_only=True, slots=True)
class PretrainingRun:
    name: str
    run_key: str
    preset: str
    objective: str
    """mlm | clm | clm-mlm (a clm-mlm grid at 0 or 1 collapses into a pure run)."""
    mask_ratio: float | None
    clm_fraction: float
    switch_step: int
    """First MLM step: CLM before it, MLM from it on (0 for MLM, total_steps for CLM)."""
    total_steps: int
    """Steps this run trains (for continued pretraining: the added steps)."""
    checkpoint_steps: tuple[int, ...]
    """Intermediate steps that are fine-tuned; the final step always is."""
    model_config: dict
    warmup_steps: int
    decay_steps: int
    init_from_run: str | None = None
    """Continued pretraining from this study run's final (decayed) checkpoint."""
    init_from_hf: str | None = None
    """Continued pretraining from this Hugging Face causal LM (path or name)."""
    steps_before: int = 0
    """Steps the starting checkpoint had already trained (its data is not seen again)."""
    identity: dict = field(compare=False, repr=False, default_factory=dict)
    """The resolved configuration the run_key hashes (kept to explain what changed)."""

    @property
    def init_from(self) -> str | None:
        return self.init_from_run or (f"hf:{self.init_from_hf}" if self.init_from_hf else None)

    @property
    def tokenizer(self) -> str | None:
        """The tokenizer this run's data is encoded with: None = the study's."""
        return self.init_from_hf


@dataclass(frozen=True, kw_only=True, slots=True)
class EvaluatedCheckpoint:
    checkpoint_id: str
    """The run name for the final checkpoint, `<run>-<step>` for an intermediate one."""
    run: PretrainingRun
    step: int
    tokens_seen: int
    """Pretraining tokens behind this checkpoint, those of a CPT source included."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Trial:
    trial_key: str
    checkpoint: EvaluatedCheckpoint
    task: str
    learning_rate: float | None
    """The grid's learning rate; None in Optuna mode (the search picks it)."""
    seed: int
    sample: int | None = None
    """Optuna mode: which of the cell's learning-rate samples this trial repeats."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StudyPlan:
    runs: tuple[PretrainingRun, ...]
    checkpoints: tuple[EvaluatedCheckpoint, ...]
    trials: tuple[Trial, ...]


def model_config(spec: StudySpec, preset: str) -> dict:
    """Preset + vocabulary and context from the data section + the spec's overrides."""
    return {**MODEL_PRESETS[preset], "vocab_size": spec.data.vocab_size,
            "max_position_embeddings": max(2048, spec.data.seq_len), **spec.model.overrides}


def switch_step(total_steps: int, clm_fraction: float, decay_steps: int = 0, of: str = "total") -> int:
    """First MLM step (0-based): round(clm_fraction x total_steps), or, with of="pre_decay",
    round(clm_fraction x (total_steps - decay_steps)), the authors' convention (25 % of 42k with
    2k of decay = `clm-10k-mlm40-42k`; 100 % = 40k CLM then 2k MLM)."""
    span = total_steps - decay_steps if of == "pre_decay" else total_steps
    return round(clm_fraction * span)


def shared_identity(spec: StudySpec) -> dict:
    pre = spec.pretraining
    return {"data": asdict(spec.data), "optimizer": asdict(pre.optimizer), "seed": pre.seed,
            "global_batch_size": pre.global_batch_size, "random_replace": pre.random_replace,
            "keep_original": pre.keep_original}


def expand_base_runs(spec: StudySpec) -> list[PretrainingRun]:
    """Runs trained from scratch (no init_from), deduplicated by name, in spec order."""
    return expand_runs(spec, include_cpt=False)


def expand_runs(spec: StudySpec, include_cpt: bool = True) -> list[PretrainingRun]:
    pre = spec.pretraining
    shared = shared_identity(spec)
    runs: dict[str, PretrainingRun] = {}

    def add(run: PretrainingRun) -> None:
        previous = runs.get(run.name)
        if previous is not None:  # the same run from two entries: union of its checkpoints
            steps = tuple(sorted(set(run.checkpoint_steps) | set(previous.checkpoint_steps)))
            run = replace(run, checkpoint_steps=steps)
        runs[run.name] = run

    for grid in pre.runs:
        if grid.init_from is not None:
            continue
        warmup = pre.warmup_steps if grid.warmup_steps is None else grid.warmup_steps
        decay = pre.decay_steps if grid.decay_steps is None else grid.decay_steps
        ratios = grid.mask_ratio if grid.objective != "clm" else [None]
        shares = {"mlm": [0.0], "clm": [1.0], "clm-mlm": grid.clm_fraction}[grid.objective]
        presets = grid.preset or [spec.model.preset]
        for preset, steps, ratio, share in itertools.product(presets, grid.steps or [pre.steps], ratios, shares):
            switch = {"clm": steps, "mlm": 0}.get(grid.objective) if grid.objective != "clm-mlm" \
                else switch_step(steps, share, decay, pre.clm_fraction_of)
            objective = "clm" if switch >= steps else "mlm" if switch == 0 else "clm-mlm"
            ratio = None if objective == "clm" else ratio
            share = {"clm": 1.0, "mlm": 0.0}.get(objective, share)
            config = model_config(spec, preset)
            identity = {"model": config, "objective": objective, "mask_ratio": ratio, "switch_step": switch,
                        "steps": steps, "warmup_steps": warmup, "decay_steps": decay, **shared}
            add(PretrainingRun(
                name=run_name(preset, objective, steps, ratio, switch), run_key=stable_key(identity),
                preset=preset, objective=objective, mask_ratio=ratio, clm_fraction=share,
                switch_step=min(switch, steps), total_steps=steps,
                checkpoint_steps=tuple(sorted(set(grid.checkpoint_steps))), model_config=config,
                warmup_steps=warmup, decay_steps=decay, identity=identity,
            ))
    if include_cpt:
        base = dict(runs)
        for grid in pre.runs:
            if grid.init_from is None:
                continue
            warmup = pre.warmup_steps if grid.warmup_steps is None else grid.warmup_steps
            decay = pre.decay_steps if grid.decay_steps is None else grid.decay_steps
            for source, steps, ratio in itertools.product(grid.init_from, grid.steps or [pre.steps], grid.mask_ratio):
                add(continued_run(spec, grid, source, base, steps, ratio, warmup, decay, shared))
    return list(runs.values())


def continued_run(spec, grid, source: str, base: dict, steps: int, ratio: float, warmup: int, decay: int,
                  shared: dict) -> PretrainingRun:
    """An MLM run that starts from a decayed checkpoint: a study run's, or a Hugging Face LM's."""
    checkpoints = tuple(sorted(set(grid.checkpoint_steps)))
    if source.startswith("hf:"):
        path = source[3:]
        identity = {"init_from_hf": path, "objective": "mlm", "mask_ratio": ratio, "steps": steps,
                    "warmup_steps": warmup, "decay_steps": decay, "model_overrides": spec.model.overrides,
                    **shared}
        return PretrainingRun(
            name=cpt_name(path, ratio, steps), run_key=stable_key(identity), preset="hf", objective="mlm",
            mask_ratio=ratio, clm_fraction=0.0, switch_step=0, total_steps=steps, checkpoint_steps=checkpoints,
            model_config={}, warmup_steps=warmup, decay_steps=decay, init_from_hf=path, identity=identity,
        )
    origin = base[source]
    identity = {"init_from": origin.run_key, "objective": "mlm", "mask_ratio": ratio, "steps": steps,
                "warmup_steps": warmup, "decay_steps": decay, **shared}
    return PretrainingRun(
        name=cpt_name(origin, ratio, steps), run_key=stable_key(identity), preset=origin.preset, objective="mlm",
        mask_ratio=ratio, clm_fraction=0.0, switch_step=0, total_steps=steps, checkpoint_steps=checkpoints,
        model_config=origin.model_config, warmup_steps=warmup, decay_steps=decay, init_from_run=origin.name,
        steps_before=origin.total_steps, identity=identity,
    )


# Settings only one family reads: part of that family's trial keys only, so editing the QA
# stride does not turn every classification trial into a changed cell.
FAMILY_SETTINGS = {"extractive_qa": ("doc_stride",), "retrieval": ("retrieval_temperature",)}


def finetune_protocol(spec: StudySpec, task: str | None = None) -> dict:
    """The settings every trial shares; with `task`, those of its family and its own budget.
    Part of each trial key."""
    ft = spec.finetuning
    family = task_dict(task)["family"] if task else None
    protocol = {key: getattr(ft, key) for key in (
        "batch_size", "max_steps", "epochs", "max_length", "warmup_ratio", "betas", "eps",
        "weight_decay", "grad_clip", "max_train_examples", "max_eval_examples", *FAMILY_SETTINGS.get(family, ()),
    )}
    return {**protocol, **task_budget(spec, task)}


def task_budget(spec: StudySpec, task: str | None) -> dict:
    """The task's own max_steps / epochs where its `task_budgets` entry sets them."""
    budget = spec.finetuning.task_budgets.get(task)
    return {key: getattr(budget, key) for key in ("max_steps", "epochs") if budget and getattr(budget, key) is not None}


def cell_key(checkpoint: EvaluatedCheckpoint, task: str, protocol: dict) -> dict:
    return {"run_key": checkpoint.run.run_key, "step": checkpoint.step, "task": task_dict(task),
            "protocol": protocol}


def plan_trials(spec: StudySpec, checkpoints: list[EvaluatedCheckpoint]) -> list[Trial]:
    """Grid: checkpoint x task x learning rate x seed. Optuna: checkpoint x task x sample x seed,
    where sample k of a cell is the k-th learning rate its search proposes."""
    ft = spec.finetuning
    trials = []
    for ckpt, task in itertools.product(checkpoints, ft.tasks):
        cell = cell_key(ckpt, task, finetune_protocol(spec, task))
        if ft.search == "grid":
            trials += [Trial(trial_key=stable_key({**cell, "lr": lr, "seed": seed}), checkpoint=ckpt, task=task,
                             learning_rate=lr, seed=seed)
                       for lr in ft.learning_rates for seed in ft.seeds]
        else:
            # The sample count is left out of the key: asking for more samples extends a search.
            settings = {k: v for k, v in asdict(ft.optuna).items() if k != "learning_rates_per_cell"}
            search = {"optuna": settings, "seeds": ft.seeds}
            trials += [Trial(trial_key=stable_key({**cell, "search": search, "sample": k, "seed": seed}),
                             checkpoint=ckpt, task=task, learning_rate=None, seed=seed, sample=k)
                       for k in range(ft.optuna.learning_rates_per_cell) for seed in ft.seeds]
    return trials


def plan_study(spec: StudySpec) -> StudyPlan:
    runs = expand_runs(spec)
    tokens_per_step = spec.pretraining.global_batch_size * spec.data.seq_len
    checkpoints = [
        EvaluatedCheckpoint(
            checkpoint_id=run.name if step == run.total_steps else f"{run.name}-{step}",
            run=run, step=step, tokens_seen=(run.steps_before + step) * tokens_per_step,
        )
        for run in runs
        for step in (*run.checkpoint_steps, run.total_steps)
    ]
    return StudyPlan(runs=tuple(runs), checkpoints=tuple(checkpoints), trials=tuple(plan_trials(spec, checkpoints)))
