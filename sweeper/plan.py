"""Spec -> the concrete study: pretraining runs, evaluated checkpoints, fine-tuning trials.

Every run and trial carries a stable key: a hash of its resolved configuration (never of a
timestamp or of its position in the grid), so a rerun or an extended spec maps each cell to
the same key and the results store can say what is already done. Runs come from
`sweeper.runs`; a trial's settings are one `FinetuneProtocol` (sweeper.configs), resolved per
task: its budget and its family's own settings applied, so editing QA's stride changes QA's
trial keys only.

A trial is a point in a space: the learning rate, plus (search: grid) one value of each swept
protocol field (`finetuning.weight_decay: [0.0, 0.1]`), its `params`. The point's values enter the
protocol like any fixed value, so the key hashes what it always hashed: a spec that sweeps nothing
plans the trials it planned before, under the same keys, and sweeping a field from its current
value (listed first) keeps every recorded trial's key. Points that give a task the same protocol
are one trial (a swept doc_stride changes nothing for a classification task; a task budget
replaces a swept max_steps), and a trial's `params` name only the fields that reach its protocol.
"""
from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass, field, replace

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
    params: dict = field(default_factory=dict)
    """The swept protocol fields' values at this trial's point (field -> value, e.g.
    {"weight_decay": 0.0}); empty when only the learning rate is swept."""

    @property
    def learning_rate(self) -> float | None:
        return self.protocol.learning_rate


@dataclass(frozen=True, kw_only=True, slots=True)
class StudyPlan:
    runs: tuple[PretrainingRun, ...]
    checkpoints: tuple[EvaluatedCheckpoint, ...]
    trials: tuple[Trial, ...]


def finetune_protocol(spec: StudySpec, task: str | None = None, learning_rate: float | None = None,
                      point: dict | None = None) -> FinetuneProtocol:
    """The settings every trial of `task` shares at `point` (swept field -> value; the fields not in
    it at their first value): the spec's protocol, the task's own budget (`task_budgets`) and its
    family's settings. Without a task: the study-wide part alone."""
    ft = spec.finetuning.at(point or {})
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


def protocol_text(protocol: FinetuneProtocol) -> str:
    """The protocol's key fields as canonical JSON: equal text, equal trials."""
    return json.dumps(protocol.key_fields(), sort_keys=True, default=str)


def task_points(spec: StudySpec, task: str) -> list[tuple[dict, FinetuneProtocol]]:
    """(params, protocol) of each distinct protocol the study's points give `task`, in point order
    (one ({}, protocol) when nothing is swept). `params` keep the swept fields that reach the
    task's protocol: a field whose values all give this task the same protocol is left out."""
    swept = spec.finetuning.swept()
    base = finetune_protocol(spec, task)
    reaching = [name for name, values in swept.items()
                if protocol_text(finetune_protocol(spec, task, point={name: values[1]})) != protocol_text(base)]
    distinct: dict[str, tuple[dict, FinetuneProtocol]] = {}
    for point in spec.finetuning.points():
        protocol = finetune_protocol(spec, task, point=point)
        distinct.setdefault(protocol_text(protocol), ({name: point[name] for name in reaching}, protocol))
    return list(distinct.values())


def task_overrides(spec: StudySpec, task: str) -> dict:
    """What a task's protocol sets beyond the study-wide one: its budget and family settings."""
    budget = spec.finetuning.task_budgets.get(task)
    own = [*registry.FAMILIES[get_task(task).family].settings,
           *(key for key in ("max_steps", "epochs") if budget and getattr(budget, key) is not None)]
    return {key: value for key, value in finetune_protocol(spec, task).key_fields().items() if key in own}


def plan_trials(spec: StudySpec, checkpoints: list[EvaluatedCheckpoint]) -> list[Trial]:
    """Grid: checkpoint x task x point x learning rate x seed, where the points are the
    combinations of the swept protocol fields (`task_points`). Optuna: checkpoint x task x sample
    x seed, where sample k of a cell is the k-th learning rate its search proposes."""
    ft = spec.finetuning
    points = {task: task_points(spec, task) for task in ft.tasks}
    trials = []
    for ckpt, task in itertools.product(checkpoints, ft.tasks):
        info, run_key = get_task(task), ckpt.run.run_key
        if ft.search == "grid":
            for (params, task_protocol), lr in itertools.product(points[task], ft.learning_rates):
                protocol = replace(task_protocol, learning_rate=lr)
                trials += [Trial(trial_key=stable_key(trial_identity(run_key, ckpt.step, info, protocol, seed)),
                                 checkpoint=ckpt, task=task, protocol=protocol, seed=seed, params=params)
                           for seed in ft.seeds]
        else:
            # The sample count is left out of the key: asking for more samples extends a search.
            (params, protocol), = points[task]  # optuna mode sweeps no protocol field (spec check)
            settings = {k: v for k, v in asdict(ft.optuna).items() if k != "learning_rates_per_cell"}
            search = {"optuna": settings, "seeds": ft.seeds}
            trials += [Trial(trial_key=stable_key(trial_identity(run_key, ckpt.step, info, protocol, seed,
                                                                 search=search, sample=k)),
                             checkpoint=ckpt, task=task, protocol=protocol, seed=seed, sample=k, params=params)
                       for k in range(ft.optuna.learning_rates_per_cell) for seed in ft.seeds]
    return trials


def trial_count_text(spec: StudySpec, plan: StudyPlan) -> str:
    """`sweeper plan`'s trial count and its factors, the swept fields named with their values
    (a field that reaches only some tasks' protocols multiplies only theirs)."""
    ft = spec.finetuning
    per_cell, words = ((len(ft.learning_rates), "learning rates") if ft.search == "grid"
                       else (ft.optuna.learning_rates_per_cell, "Optuna learning-rate samples"))
    text = f"{len(plan.trials):,} = {len(plan.checkpoints)} checkpoints x "
    swept = ft.swept()
    if not swept:
        return text + f"{len(ft.tasks)} datasets x {per_cell} {words} x {len(ft.seeds)} seeds"
    pairs = sum(len(task_points(spec, task)) for task in ft.tasks)
    values = ", ".join(f"{name} {[list(v) if isinstance(v, tuple) else v for v in grid]}" for name, grid in swept.items())
    return (text + f"{pairs} (dataset, point) pairs x {per_cell} {words} x {len(ft.seeds)} seeds; "
            f"points over {values}")


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
