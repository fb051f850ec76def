"""Spec -> the concrete study: pretraining runs, evaluated checkpoints, fine-tuning trials.

Every run and trial carries a stable key: a hash of its resolved configuration (never of a
timestamp or of its position in the grid), so a rerun or an extended spec maps each cell to
the same key and the results store can say what is already done. Runs come from
`sweeper.runs`; a trial's settings are one `FinetuneProtocol` (sweeper.configs), resolved per
task: its budget and its family's own settings applied, so editing QA's stride changes QA's
trial keys only.
"""
from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, replace

from sweeper import registry
from sweeper.catalog import get_task
from sweeper.configs import AdamWConfig, FinetuneProtocol, stable_key, trial_identity
from sweeper.runs import PretrainingRun, expand_runs
from sweeper.spec import StudySpec


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
    protocol: FinetuneProtocol
    """Everything the trial's outcome depends on besides checkpoint, task and seed; its
    learning rate is None in Optuna mode (the search picks it)."""
    seed: int
    sample: int | None = None
    """Optuna mode: which of the cell's learning-rate samples this trial repeats."""

    @property
    def learning_rate(self) -> float | None:
        return self.protocol.learning_rate


@dataclass(frozen=True, kw_only=True, slots=True)
class StudyPlan:
    runs: tuple[PretrainingRun, ...]
    checkpoints: tuple[EvaluatedCheckpoint, ...]
    trials: tuple[Trial, ...]


def finetune_protocol(spec: StudySpec, task: str | None = None, learning_rate: float | None = None) -> FinetuneProtocol:
    """The settings every trial of `task` shares: the spec's protocol, the task's own budget
    (`task_budgets`) and its family's settings. Without a task: the study-wide part alone."""
    ft = spec.finetuning
    budget = ft.task_budgets.get(task) if task else None
    family = registry.FAMILIES[get_task(task).family] if task else None
    return FinetuneProtocol(
        learning_rate=learning_rate, batch_size=ft.batch_size,
        max_steps=budget.max_steps if budget and budget.max_steps is not None else ft.max_steps,
        epochs=budget.epochs if budget and budget.epochs is not None else ft.epochs,
        max_length=ft.max_length, warmup_ratio=ft.warmup_ratio, optimizer=AdamWConfig.of(ft),
        max_train_examples=ft.max_train_examples, max_eval_examples=ft.max_eval_examples,
        family_settings={key: getattr(ft, key) for key in family.settings} if family else {},
    )


def task_overrides(spec: StudySpec, task: str) -> dict:
    """What a task's protocol sets beyond the study-wide one: its budget and family settings."""
    budget = spec.finetuning.task_budgets.get(task)
    own = [*registry.FAMILIES[get_task(task).family].settings,
           *(key for key in ("max_steps", "epochs") if budget and getattr(budget, key) is not None)]
    return {key: value for key, value in finetune_protocol(spec, task).key_fields().items() if key in own}


def plan_trials(spec: StudySpec, checkpoints: list[EvaluatedCheckpoint]) -> list[Trial]:
    """Grid: checkpoint x task x learning rate x seed. Optuna: checkpoint x task x sample x seed,
    where sample k of a cell is the k-th learning rate its search proposes."""
    ft = spec.finetuning
    protocols = {task: finetune_protocol(spec, task) for task in ft.tasks}
    trials = []
    for ckpt, task in itertools.product(checkpoints, ft.tasks):
        info, run_key = get_task(task), ckpt.run.run_key
        if ft.search == "grid":
            for lr in ft.learning_rates:
                protocol = replace(protocols[task], learning_rate=lr)
                trials += [Trial(trial_key=stable_key(trial_identity(run_key, ckpt.step, info, protocol, seed)),
                                 checkpoint=ckpt, task=task, protocol=protocol, seed=seed) for seed in ft.seeds]
        else:
            # The sample count is left out of the key: asking for more samples extends a search.
            settings = {k: v for k, v in asdict(ft.optuna).items() if k != "learning_rates_per_cell"}
            search = {"optuna": settings, "seeds": ft.seeds}
            trials += [Trial(trial_key=stable_key(trial_identity(run_key, ckpt.step, info, protocols[task], seed,
                                                                 search=search, sample=k)),
                             checkpoint=ckpt, task=task, protocol=protocols[task], seed=seed, sample=k)
                       for k in range(ft.optuna.learning_rates_per_cell) for seed in ft.seeds]
    return trials


def plan_study(spec: StudySpec) -> StudyPlan:
    runs = expand_runs(spec)
    checkpoints = [
        EvaluatedCheckpoint(
            checkpoint_id=run.name if step == run.total_steps else f"{run.name}-{step}",
            run=run, step=step, tokens_seen=(run.steps_before + step) * run.tokens_per_step,
        )
        for run in runs
        for step in (*run.checkpoint_steps, run.total_steps)
    ]
    return StudyPlan(runs=tuple(runs), checkpoints=tuple(checkpoints), trials=tuple(plan_trials(spec, checkpoints)))
