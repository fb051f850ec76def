"""Spec -> the concrete study: pretraining runs, evaluated checkpoints, fine-tuning trials.

Every run and trial carries a stable key: a hash of its resolved configuration (never of a
timestamp or of its position in the grid), so a rerun or an extended spec maps each cell to
the same key and the results store can say what is already done. Runs come from
`sweeper.plan.runs`; a trial's settings are one `FinetuneProtocol` (sweeper.contract.configs), resolved per
task: its budget and its family's own settings applied, so editing QA's stride changes QA's
trial keys only.

A trial is a point in a space: the learning rate, plus one value of each swept or searched
protocol field (`finetuning.weight_decay: [0.0, 0.1]`, `{uniform: [0.0, 0.1]}`), its `params`. The point's values enter
the protocol like any fixed value, so the key hashes what it always hashed: a spec that sweeps nothing
plans the trials it planned before, under the same keys, and sweeping a field from its current
value (listed first) keeps every recorded trial's key. Points that give a task the same protocol
are one trial (a swept doc_stride changes nothing for a classification task; a task budget
replaces a swept max_steps), and a trial's `params` name only the fields that reach its protocol.

The search modes (`finetuning.search`):
- grid: checkpoint x task x point x learning rate x seed;
- random: checkpoint x task x sample x seed, sample k of a cell drawn here from the learning-rate
  range and the searched fields (sweeper.spec.space.random_point, seeded by the cell), so its trials are
  keyed like a grid's (the drawn values in the protocol) and run, resume and change like a grid's;
- optuna: checkpoint x task x sample x seed, sample k of a cell being the k-th point its TPE search
  proposes at run time (sweeper.run.search). The planned protocol holds each searched field's largest
  value (what `sweeper plan` budgets with) and no learning rate; the key hashes the cell's search
  (settings, seeds, the space of its distributions) and the sample number instead. A spec without
  distributions hashes no search, so its keys are a plain grid's.
In both search modes the plan holds each task's whole search space (`StudyPlan.spaces`: the
learning rate's range and the searched fields): random mode draws from it here, and an Optuna
cell's search (sweeper.run.shards) searches it as given.
"""
from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace

from sweeper.plan.checkpoint_sources import ExternalCheckpoint, resolve_all
from sweeper.plan.runs import PretrainingRun, expand_runs
from sweeper.contract import registry
from sweeper.spec import space
from sweeper.contract.registry import get_task
from sweeper.contract.configs import (AdamWConfig, FinetuneProtocol, canonical, protocol_at_point, stable_key_of_parts,
                                      trial_key, with_values)
from sweeper.spec.parsing import Distribution
from sweeper.spec.study import StudySpec


@dataclass(frozen=True, kw_only=True, slots=True)
class EvaluatedCheckpoint:
    """A checkpoint the grid fine-tunes: one a study run writes (`run`, `step`), or one from
    elsewhere (`external`, step 0)."""

    checkpoint_id: str
    """The run name for the final checkpoint, `<run>-<step>` for an intermediate one, the
    entry's name for a checkpoint from elsewhere."""
    run: PretrainingRun | None
    step: int
    tokens_seen: int | None
    """Pretraining tokens behind this checkpoint, those of a CPT source included (an external
    checkpoint: its `meta.tokens_seen`, None when not given)."""
    external: ExternalCheckpoint | None = None

    @property
    def arm(self) -> str:
        """The checkpoint id of replicate 0 of its configuration (sweeper.plan.replicates): its own
        for replicate 0 and for a checkpoint from elsewhere."""
        if self.run is None or self.run.replicate == 0:
            return self.checkpoint_id
        return checkpoint_id(self.run.arm, self.step, self.run.total_steps)

    @property
    def source_key(self) -> str:
        """What its trial keys hash as the checkpoint's origin: the run key, or the external key."""
        return self.run.run_key if self.run is not None else self.external.key

    @property
    def tokenizer(self) -> str | None:
        """Which tokenizer encodes its task data (a run's corpus tokenizer key, or an external one's)."""
        return self.run.tokenizer if self.run is not None else self.external.tokenizer_key

    @property
    def model_config(self) -> dict:
        """Its architecture's sizes (LlamaEncoderConfig names); empty when known only at run time."""
        return self.run.model_config if self.run is not None else self.external.sizes


@dataclass(frozen=True, kw_only=True, slots=True)
class Trial:
    trial_key: str
    checkpoint: EvaluatedCheckpoint
    task: str
    protocol: FinetuneProtocol
    """Everything the trial's outcome depends on besides checkpoint, task and seed. In an Optuna
    plan its learning rate is None and each searched field holds its largest value: the search
    picks them (`at_point`)."""
    seed: int
    sample: int | None = None
    """Optuna and random modes: which of the cell's samples this trial repeats (with its seed)."""
    params: dict = field(default_factory=dict)
    """The swept or searched protocol fields' values at this trial's point (field -> value, e.g.
    {"weight_decay": 0.0}); empty when only the learning rate is swept. In an Optuna plan each
    searched field maps to None until the search picks it."""
    search_mode: str = "grid"
    """grid, optuna or random (`finetuning.search`)."""
    search_key: str | None = None
    """Optuna mode: the key of the cell's search (what each of its trial keys hashes, less the
    sample and seed); it names the cell's Optuna study."""

    @property
    def learning_rate(self) -> float | None:
        return self.protocol.learning_rate


@dataclass(frozen=True, kw_only=True, slots=True)
class StudyPlan:
    runs: tuple[PretrainingRun, ...]
    checkpoints: tuple[EvaluatedCheckpoint, ...]
    trials: tuple[Trial, ...]
    spaces: dict[str, dict[str, Distribution]] = field(default_factory=dict)
    """Optuna and random modes: each task's whole search space (`search_space`), which every
    (checkpoint, task) cell of it searches or draws from; empty in grid mode."""


def finetune_protocol(spec: StudySpec, task: str | None = None, learning_rate: float | None = None,
                      point: dict | None = None) -> FinetuneProtocol:
    """The settings every trial of `task` shares at `point` (swept field -> value; the fields not in
    it at their first value): the spec's protocol, the task's own budget (`task_budgets`) and its
    family's settings. Without a task: the study-wide part alone."""
    ft = spec.finetuning.at(point or {})
    budget = ft.task_budgets.get(task) if task else None
    family = registry.family_of(get_task(task).family) if task else None
    return FinetuneProtocol(
        learning_rate=learning_rate, batch_size=ft.batch_size,
        max_steps=budget.max_steps if budget and budget.max_steps is not None else ft.max_steps,
        epochs=budget.epochs if budget and budget.epochs is not None else ft.epochs,
        max_length=ft.max_length, warmup_ratio=ft.warmup_ratio, optimizer=AdamWConfig.of(ft),
        max_train_examples=ft.max_train_examples, max_eval_examples=ft.max_eval_examples,
        precision=ft.precision, weight_decay_exempt=ft.weight_decay_exempt, scoring=ft.scoring,
        family_settings={key: getattr(ft, key) for key in family.settings} if family else {},
    )


def protocol_text(protocol: FinetuneProtocol) -> str:
    """The protocol's key fields as canonical JSON: equal text, equal trials."""
    return canonical(protocol.key_fields())


def reaches(spec: StudySpec, task: str, name: str) -> bool:
    """Whether the protocol field `name` reaches `task`'s protocol (doc_stride reaches QA alone;
    a task budget replaces max_steps and epochs)."""
    return (protocol_text(finetune_protocol(spec, task, point={name: None}))
            != protocol_text(finetune_protocol(spec, task, point={name: "probe"})))


def task_points(spec: StudySpec, task: str) -> list[tuple[dict, FinetuneProtocol]]:
    """(params, protocol) of each distinct protocol the study's points give `task`, in point order
    (one ({}, protocol) when nothing is swept). `params` keep the swept fields that reach the
    task's protocol: a field whose values all give this task the same protocol is left out. With
    search: optuna or random these are the planning points (`FinetuningSpec.points`): the
    protocols task data, memory and time are planned for, not trials."""
    points = spec.finetuning.points()
    reaching = [name for name in points[0] if reaches(spec, task, name)]
    distinct: dict[str, tuple[dict, FinetuneProtocol]] = {}
    for point in points:
        protocol = finetune_protocol(spec, task, point=point)
        distinct.setdefault(protocol_text(protocol), ({name: point[name] for name in reaching}, protocol))
    return list(distinct.values())


def task_space(spec: StudySpec, task: str) -> dict[str, Distribution]:
    """The searched fields (distributions) that reach `task`'s protocol: its search space besides
    the learning rate."""
    return {name: dist for name, dist in spec.finetuning.searched().items() if reaches(spec, task, name)}


def search_space(spec: StudySpec, task: str) -> dict[str, Distribution]:
    """A cell's whole search space in optuna and random modes: the learning rate's log-uniform
    range and the searched fields that reach `task`'s protocol."""
    ft = spec.finetuning
    section = ft.optuna if ft.search == "optuna" else ft.random
    return {space.LEARNING_RATE: space.log_range(section.lr_min, section.lr_max), **task_space(spec, task)}


def at_point(trial: Trial, point: dict) -> Trial:
    """A planned trial of an Optuna plan at the point its cell's search picked (learning rate and
    searched fields): its protocol and `params` hold the values, as a grid trial's would. The
    point's fields that do not reach the trial's task (an evaluation-only set) are left out."""
    protocol, params = protocol_at_point(trial.protocol, trial.params, point)
    return replace(trial, protocol=protocol, params=params)


def task_overrides(spec: StudySpec, task: str) -> dict:
    """What a task's protocol sets beyond the study-wide one: its budget and family settings."""
    budget = spec.finetuning.task_budgets.get(task)
    own = [*registry.family_of(get_task(task).family).settings,
           *(key for key in ("max_steps", "epochs") if budget and getattr(budget, key) is not None)]
    return {key: value for key, value in finetune_protocol(spec, task).key_fields().items() if key in own}


def plan_trials(spec: StudySpec, checkpoints: list[EvaluatedCheckpoint],
                spaces: dict[str, dict[str, Distribution]]) -> list[Trial]:
    """The study's trials in plan order, by checkpoint then task (module docstring: the modes);
    `spaces`: each task's search space (`search_space`) in optuna and random modes."""
    ft = spec.finetuning
    trials = []
    # Keys from each task's and protocol's JSON written once (`trial_key`), not once per trial.
    task_texts = {task: canonical(get_task(task).identity()) for task in ft.tasks}
    if ft.search == "grid":
        # One protocol object per (task, point, learning rate), shared by every checkpoint's trials.
        points = {task: [(params, replace(protocol, learning_rate=lr), protocol_text(protocol), lr)
                         for (params, protocol), lr in itertools.product(task_points(spec, task), ft.learning_rates)]
                  for task in ft.tasks}
        for ckpt, task in itertools.product(checkpoints, ft.tasks):
            run_key = ckpt.source_key
            for params, protocol, text, lr in points[task]:
                trials += [Trial(trial_key=trial_key(run_key, ckpt.step, task_texts[task], text, seed,
                                                     learning_rate=lr),
                                 checkpoint=ckpt, task=task, protocol=protocol, seed=seed, params=params)
                           for seed in ft.seeds]
    elif ft.search == "random":
        for ckpt, task in itertools.product(checkpoints, ft.tasks):
            info, run_key = get_task(task), ckpt.source_key
            # An evaluation-only set draws as its training task does: it is scored at that trial's point.
            drawn_as = info.train_task or task
            for k in range(ft.random.samples):
                # Drawn by arm: every replicate of a checkpoint tries the points its replicate 0 does.
                params = space.random_point(spaces[task], ft.random.seed, ckpt.arm, drawn_as, k)
                lr = params.pop(space.LEARNING_RATE)
                protocol = replace(finetune_protocol(spec, task, point=params), learning_rate=lr)
                text = protocol_text(protocol)
                trials += [Trial(trial_key=trial_key(run_key, ckpt.step, task_texts[task], text, seed,
                                                     learning_rate=lr),
                                 checkpoint=ckpt, task=task, protocol=protocol, seed=seed, sample=k, params=params,
                                 search_mode="random")
                           for seed in ft.seeds]
    else:
        settings = {k: v for k, v in asdict(ft.optuna).items() if k not in ft.optuna.NOT_KEYED}
        cells = {}
        for task in ft.tasks:
            searched = {name: dist for name, dist in spaces[task].items() if name != space.LEARNING_RATE}
            protocol = finetune_protocol(spec, task)  # searched fields at their largest: the plan budgets with it
            # The key hashes the space and leaves the searched fields out of the protocol.
            keyed = with_values(protocol, dict.fromkeys(searched))
            search = {
                "optuna": settings,
                "seeds": ft.seeds,
                **({"space": space.identity(searched)} if searched else {}),
            }
            cells[task] = protocol, keyed, search, dict.fromkeys(searched), protocol_text(keyed), canonical(search)
        for ckpt, task in itertools.product(checkpoints, ft.tasks):
            (protocol, keyed, search, params, keyed_text, search_text), run_key = cells[task], ckpt.source_key
            cell = stable_key_of_parts({"run_key": canonical(run_key), "step": canonical(ckpt.step),
                                        "task": task_texts[task], "protocol": keyed_text, "search": search_text})
            trials += [Trial(trial_key=trial_key(run_key, ckpt.step, task_texts[task], keyed_text, seed,
                                                 search_text=search_text, sample=k),
                             checkpoint=ckpt, task=task, protocol=protocol, seed=seed, sample=k, params=params,
                             search_mode="optuna", search_key=cell)
                       for k in range(ft.optuna.samples_per_cell) for seed in ft.seeds]
    return trials


def space_text(spec: StudySpec) -> str:
    """The searched space as `sweeper plan` prints it: each field with its form and arguments."""
    ft = spec.finetuning
    sampler = ft.optuna if ft.search == "optuna" else ft.random  # the section holding the rate's range
    fields_ = {space.LEARNING_RATE: space.log_range(sampler.lr_min, sampler.lr_max), **ft.searched()}
    return ", ".join(f"{name} {dist.kind} {[list(a) if isinstance(a, tuple) else a for a in dist.args]}"
                     for name, dist in fields_.items())


def trial_count_text(spec: StudySpec, plan: StudyPlan) -> str:
    """`sweeper plan`'s trial count and its factors, the swept fields named with their values
    (a field that reaches only some tasks' protocols multiplies only theirs), or the searched
    space (search: optuna or random)."""
    ft = spec.finetuning
    text = f"{len(plan.trials):,} = {len(plan.checkpoints)} checkpoints x {len(ft.tasks)} datasets x "
    if ft.search == "optuna":
        budget = "; searched fields budgeted at their largest values" if ft.searched() else ""
        return (text + f"{ft.optuna.samples_per_cell} Optuna samples x {len(ft.seeds)} seeds; TPE per cell over "
                f"{space_text(spec)}{budget}")
    if ft.search == "random":
        return (text + f"{ft.random.samples} random samples x {len(ft.seeds)} seeds; drawn per cell from "
                f"{space_text(spec)}")
    swept = ft.swept()
    if not swept:
        return text + f"{len(ft.learning_rates)} learning rates x {len(ft.seeds)} seeds"
    pairs = sum(len(task_points(spec, task)) for task in ft.tasks)
    values = ", ".join(
        f"{name} {[list(v) if isinstance(v, tuple) else v for v in grid]}" for name, grid in swept.items()
    )
    return (f"{len(plan.trials):,} = {len(plan.checkpoints)} checkpoints x {pairs} (dataset, point) pairs x "
            f"{len(ft.learning_rates)} learning rates x {len(ft.seeds)} seeds; points over {values}")


def trained_trials(plan: StudyPlan) -> tuple[int, str]:
    """The planned trials that train a model (the unit progress lines count), and what the other
    result rows are: an evaluation-only set's rows, written by the trial of its training task
    with the same weights ('' when there are none). `plan.trials` counts result rows."""
    scored: dict[str, set[str]] = {}
    for trial in plan.trials:
        if (train_task := get_task(trial.task).train_task) is not None:
            scored.setdefault(train_task, set()).add(trial.task)
    extra = sum(1 for trial in plan.trials if get_task(trial.task).train_task is not None)
    also = "; ".join(f"each {task} trial is also scored on {' and '.join(sorted(sets))}"
                     for task, sets in sorted(scored.items()))
    return len(plan.trials) - extra, also


def trials_and_rows(plan: StudyPlan) -> str:
    """`340 fine-tuning trials, 425 result rows (each ... trial is also scored on ...)`."""
    trained, also = trained_trials(plan)
    text = f"{trained:,} fine-tuning trials"
    return f"{text}, {len(plan.trials):,} result rows ({also})" if also else text


def external_checkpoints(externals: list[ExternalCheckpoint]) -> list[EvaluatedCheckpoint]:
    """The `finetuning.checkpoints` entries as resolved (sweeper.plan.checkpoint_sources), after the study's own."""
    return [EvaluatedCheckpoint(checkpoint_id=external.name, run=None, step=0, tokens_seen=external.meta.tokens_seen,
                                external=external)
            for external in externals]


def run_count_text(spec: StudySpec, plan: StudyPlan) -> str:
    """`sweeper plan`'s run count: with replicates, its configurations times their replicates
    (`21 = 7 configurations x 3 replicates`; entries of different counts named with theirs)."""
    configurations = sum(1 for run in plan.runs if run.replicate == 0)
    if configurations == len(plan.runs):
        return f"{len(plan.runs)}"
    counts = {}
    for run in plan.runs:
        counts[run.arm] = counts.get(run.arm, 0) + 1
    if len(set(counts.values())) == 1:
        return f"{len(plan.runs)} = {configurations} configurations x {len(plan.runs) // configurations} replicates"
    entries = ", ".join(f"runs[{i}] x{spec.pretraining.replicates_of(grid)}"
                        for i, grid in enumerate(spec.pretraining.runs) if spec.pretraining.replicates_of(grid) > 1)
    return f"{len(plan.runs)} ({configurations} configurations; replicates: {entries})"


def checkpoint_id(run_name: str, step: int, total_steps: int) -> str:
    """The run name for its final checkpoint, `<run>-<step>` for an intermediate one."""
    return run_name if step == total_steps else f"{run_name}-{step}"


def plan_study(spec: StudySpec, replicate_counts: Mapping[str, int] | None = None, *,
               runs: list[PretrainingRun] | None = None,
               externals: list[ExternalCheckpoint] | None = None) -> StudyPlan:
    """The study a checked spec plans. The commands get it from `sweeper.plan.load.load_study`,
    which passes the runs and the checkpoints from elsewhere it checked and resolved (resolved
    once); without them (a spec built in code) they are expanded and resolved here.
    `replicate_counts` (by run name): the counts a sequential plan's looks set (sweeper.report.sequential)."""
    runs = expand_runs(spec, counts=replicate_counts) if runs is None else runs
    externals = resolve_all(spec.finetuning.checkpoints) if externals is None else externals
    checkpoints = [
        EvaluatedCheckpoint(
            checkpoint_id=checkpoint_id(run.name, step, run.total_steps),
            run=run, step=step, tokens_seen=(run.steps_before + step) * run.tokens_per_step,
        )
        for run in runs
        for step in (*run.checkpoint_steps, run.total_steps)
    ] + external_checkpoints(externals)
    spaces = (
        {task: search_space(spec, task) for task in spec.finetuning.tasks} if spec.finetuning.search != "grid" else {}
    )
    return StudyPlan(runs=tuple(runs), checkpoints=tuple(checkpoints),
                     trials=tuple(plan_trials(spec, checkpoints, spaces)), spaces=spaces)
