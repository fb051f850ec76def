"""The fine-tuning section of a spec (`finetuning`: its tasks, protocol, search, scheduler), as
typed dataclasses.

Every field has a one-line docstring; the shipped YAML files repeat them as comments. A
protocol field named in `FinetuningSpec.SEARCH_FIELDS` takes a value, a grid or a distribution
(sweeper.spec.parsing); the AdamW settings are `sweeper.contract.configs.AdamWConfig`'s fields,
given flat under `finetuning:`.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import ClassVar, Literal

from sweeper.contract import registry
from sweeper.spec.checkpoints import ExternalCheckpointSpec
from sweeper.contract.configs import AdamWConfig, distinct, each_positive, non_empty, non_negative, positive, seeds
from sweeper.spec.parsing import Distribution, Grid
from sweeper.spec.reading import key_text, shown, suggestion
from sweeper.spec.settings import DefaultList


@dataclass(frozen=True, kw_only=True, slots=True)
class OptunaSpec:
    """TPE per (checkpoint, task) cell over the learning rate and every protocol field given as a
    distribution; each sample is run with every seed and Optuna is told the seed-averaged
    validation score."""

    samples: int | None = None
    """Samples (points) per cell, each run with every seed (default 6); more samples later extend
    each cell's search."""
    learning_rates_per_cell: int | None = None
    """The former name of `samples` (give one of the two)."""
    lr_min: float = 1e-5
    """Lower end of the log-uniform learning-rate range."""
    lr_max: float = 5e-4
    """Upper end of the log-uniform learning-rate range."""
    seed: int = 0
    """Seed of the TPE sampler (one sampler per cell, seeded from this and the cell)."""
    startup_samples: int = 2
    """Random samples per cell before TPE models the results (Optuna's default of 10 would make
    a 6-sample search purely random)."""

    DEFAULT_SAMPLES: ClassVar = 6
    NOT_KEYED: ClassVar = ("samples", "learning_rates_per_cell")
    """Settings left out of trial keys: asking for more samples extends a search."""

    @property
    def samples_per_cell(self) -> int:
        return self.samples or self.learning_rates_per_cell or self.DEFAULT_SAMPLES

    def check(self):
        yield from positive(self, "samples", "learning_rates_per_cell")
        if self.samples is not None and self.learning_rates_per_cell is not None:
            yield "samples", ("give samples or learning_rates_per_cell (its former name), not both: "
                              f"got {self.samples} and {self.learning_rates_per_cell}")
        yield from seeds(self, "seed")
        if self.startup_samples < 1:
            yield "startup_samples", f"must be at least 1, got {self.startup_samples}"
        if not 0 < self.lr_min < self.lr_max:
            yield "lr_min", f"need 0 < lr_min < lr_max, got {self.lr_min} and {self.lr_max}"


@dataclass(frozen=True, kw_only=True, slots=True)
class RandomSpec:
    """Random search per (checkpoint, task) cell, by Ray Tune's sampler semantics: `samples`
    points drawn from the learning-rate range and every protocol field given as a distribution,
    each run with every seed. Drawn when the study is planned (`sweeper plan` lists them), so
    they are trials like a grid's."""

    samples: int = 6
    """Points per cell, each run with every seed; more samples later add points, the first ones kept."""
    lr_min: float = 1e-5
    """Lower end of the log-uniform learning-rate range."""
    lr_max: float = 5e-4
    """Upper end of the log-uniform learning-rate range."""
    seed: int = 0
    """Seed of the draws; each cell draws from this, its checkpoint and its task (a checkpoint
    added later leaves the other cells' points as they were)."""

    def check(self):
        yield from positive(self, "samples")
        yield from seeds(self, "seed")
        if not 0 < self.lr_min < self.lr_max:
            yield "lr_min", f"need 0 < lr_min < lr_max, got {self.lr_min} and {self.lr_max}"


@dataclass(frozen=True, kw_only=True, slots=True)
class SchedulerSpec:
    """A Tune trial scheduler that stops unpromising trials early, on the validation curve a
    trial reports every `finetuning.eval_every` steps (search: optuna or random; grid mode runs
    the paper's protocol and never stops a trial early). A stopped trial is recorded with status
    `stopped` and its last curve point."""

    kind: Literal["none", "asha", "median"] = "none"
    """none; asha (Tune's ASHAScheduler); median (Tune's MedianStoppingRule)."""
    grace_period: int = 1
    """Curve points (of eval_every steps each) a trial runs before it may be stopped."""
    reduction_factor: float = 3.0
    """ASHA: the share of trials kept at each rung is 1 / reduction_factor."""
    min_samples_required: int = 3
    """Median stopping: trials that must have reported at a step before one is compared with them."""

    def check(self):
        yield from positive(self, "grace_period", "min_samples_required")
        if self.reduction_factor <= 1:
            yield "reduction_factor", f"must be above 1, got {self.reduction_factor}"


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskBudgetSpec:
    max_steps: int | None = None
    """Optimizer steps per trial at most, for this task (None: finetuning.max_steps)."""
    epochs: float | None = None
    """Passes over this task's training split at most (None: finetuning.epochs)."""

    def check(self):
        yield from positive(self, "max_steps", "epochs")


DEFAULT_OPTUNA, DEFAULT_RANDOM, DEFAULT_SCHEDULER = OptunaSpec(), RandomSpec(), SchedulerSpec()
"""The sections' defaults: a spec that gives a section builds its own instance, so `is` tells a
section given (even empty, or at its defaults) from one left out (sweeper.spec.ignored)."""

PAPER_LEARNING_RATES = (1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4)
"""The paper's fine-tuning learning rates: `learning_rates` when the spec leaves it out."""


PAPER_DOC_STRIDE = 128
"""The paper's (and Hugging Face's SQuAD scripts') stride: the default wherever it fits."""


def derived_doc_stride(max_length) -> int | None:
    """doc_stride when the spec leaves it out: PAPER_DOC_STRIDE where it is below max_length / 2
    (so every spec that planned with the former fixed default keeps its trial keys), else a
    quarter of max_length; of its smallest value when swept. Always below max_length / 2, as QA
    requires."""
    if isinstance(max_length, Grid):
        lengths = max_length.values
    elif isinstance(max_length, Distribution):
        lengths = max_length.args if max_length.kind == "choice" else max_length.args[:1]
    else:
        lengths = (max_length,)
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in lengths):
        return None  # a probe value (sweeper.plan.study_plan.reaches): nothing to derive from
    shortest = min(lengths)
    return PAPER_DOC_STRIDE if PAPER_DOC_STRIDE < shortest // 2 else shortest // 4


def unknown_tasks(tasks) -> Iterator[tuple[str, str]]:
    """(key, reason) for each task name no registered family holds."""
    known = registry.current()
    for i, task in enumerate(tasks):
        if task not in known.tasks:
            yield f"tasks[{i}]", f"unknown task {shown(task)}{suggestion(task, list(known.tasks))}"


@dataclass(frozen=True, kw_only=True, slots=True)
class FinetuningSpec(AdamWConfig):
    """The fine-tuning protocol; its AdamW settings (betas, eps, weight_decay, grad_clip) are
    AdamWConfig's fields, given flat under `finetuning:`."""

    tasks: list[str]
    """Task names (the registry's: `sweeper.contract.catalog`'s shipped tasks and the plugins')."""
    checkpoints: list[ExternalCheckpointSpec] = field(default_factory=list)
    """Checkpoints the study did not train (hub, folder or object store), fine-tuned on the same
    grid as its own under their names (sweeper.spec.checkpoints)."""
    search: Literal["grid", "optuna", "random"] = "grid"
    """grid: every learning rate x seed x combination of the swept protocol fields; optuna: TPE per
    cell over the learning rate and the fields given as distributions, seeds as repeats, objective =
    seed-averaged validation score; random: points drawn per cell from the same space (Tune's sampler)."""
    learning_rates: list[float] = field(default_factory=lambda: DefaultList(PAPER_LEARNING_RATES))
    """Peak learning rates of the grid (search: grid)."""
    optuna: OptunaSpec = DEFAULT_OPTUNA
    """TPE search per cell (search: optuna)."""
    random: RandomSpec = DEFAULT_RANDOM
    """Random search per cell (search: random)."""
    scheduler: SchedulerSpec = DEFAULT_SCHEDULER
    """Early stopping on the validation curve (search: optuna or random; needs eval_every)."""
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    """Fine-tuning seeds of the grid."""
    batch_size: int = 32
    """Effective batch size (gradient accumulation makes up what micro_batch_size cannot hold)."""
    micro_batch_size: int = 32
    """Examples per forward pass (retrieval: gradient-cached, each query still sees the whole batch)."""
    max_steps: int = 1000
    """At most this many optimizer steps per trial."""
    epochs: float = 1.0
    """At most this many passes over the training split."""
    task_budgets: dict[str, TaskBudgetSpec] = field(default_factory=dict)
    """Per-task max_steps / epochs replacing the ones above (the paper: one epoch for CoNLL and UNER)."""
    max_length: int = 128
    """Tokens per example after truncation (per window for extractive QA)."""
    doc_stride: int | None = None
    """Extractive QA: tokens shared by consecutive windows of a context longer than max_length
    (None: the paper's 128 where it is below max_length / 2, else a quarter of max_length; of the
    smallest max_length when it is swept)."""
    retrieval_temperature: float = 0.05
    """Retrieval: temperature of the in-batch InfoNCE loss over cosine similarities."""
    warmup_ratio: float = 0.1
    """Share of the steps with linear warmup; then linear decay to 0."""
    precision: Literal["fp32", "bf16"] = "fp32"
    """fp32: float32 weights and AdamW state, forward passes under bf16 autocast on a GPU (float32
    on a CPU); bf16: the weights and AdamW state in bfloat16 (the authors': EncodEval casts each model
    to its config's `dtype: torch.bfloat16` before the Trainer's `bf16: true`)."""
    weight_decay_exempt: Literal["none", "bias_and_norm"] = "none"
    """Parameters AdamW does not decay: none; bias_and_norm: biases and LayerNorm/RMSNorm weights,
    as the Hugging Face Trainer (the authors') does."""
    scoring: Literal["standard", "paper"] = "standard"
    """standard: each family's usual labels, inputs and metric (seqeval entity F1, SQuAD F1, NDCG@10);
    paper: the authors' (EncodEval's) where a family implements them; every result row carries both
    conventions' scores either way (docs/paper-protocol.md, docs/results.md)."""
    keep_predictions: bool = False
    """Also store every evaluated example's prediction and gold (the `predictions` table of
    docs/results.md), so a score can be recomputed from the rows."""
    eval_batch_size: int = 128
    """Examples per forward pass when scoring."""
    eval_every: int = 0
    """Also score validation every this many steps (the eval-curve table); 0: final weights only."""
    max_train_examples: int | None = None
    """Cap on training examples per task (None: the whole split)."""
    max_eval_examples: int | None = None
    """Cap on validation and test examples per task (None: whole splits)."""

    FIELD_CHECKS: ClassVar = {"tasks": unknown_tasks}
    """Checks of one field alone (sweeper.spec.parsing.read_section runs them even when a sibling
    field is wrong, so an unknown task is named beside a bad seed)."""
    SEARCH_FIELDS: ClassVar = ("batch_size", "max_steps", "epochs", "max_length", "doc_stride", "retrieval_temperature",
                               "warmup_ratio", "betas", "eps", "weight_decay", "grad_clip")
    """Protocol fields that take a value, a grid or a distribution in Ray Tune's vocabulary
    (sweeper.spec.parsing.FORMS); each form is checked against the field's own bounds. With search: grid,
    a grid plans one trial per combination of values (`points`, sweeper.plan.study_plan.task_points); with
    search: optuna or random, a distribution is searched per cell with the learning rate."""

    def __post_init__(self):
        if self.doc_stride is None:  # derived: a default that fits every max_length (dataclass frozen)
            object.__setattr__(self, "doc_stride", derived_doc_stride(self.max_length))

    def swept(self) -> dict[str, tuple]:
        """The protocol fields given as a grid, each with its values in the order given."""
        return {
            name: getattr(self, name).values for name in self.SEARCH_FIELDS if isinstance(getattr(self, name), Grid)
        }

    def searched(self) -> dict[str, Distribution]:
        """The protocol fields given as a distribution (search: optuna or random)."""
        return {name: getattr(self, name) for name in self.SEARCH_FIELDS
                if isinstance(getattr(self, name), Distribution)}

    def points(self) -> list[dict]:
        """Every combination of the swept fields' values (field -> value), the first values first;
        one empty point when nothing is swept. Search: grid plans each with every learning rate.
        A searched field (optuna, random) takes its planning values (space.planning_values: each
        choice, a range's largest value): the points `sweeper plan` budgets time, memory and task
        data with, not trials."""
        from sweeper.spec.space import planning_values

        grid = {**self.swept(), **{name: planning_values(space) for name, space in self.searched().items()}}
        return [dict(zip(grid, values)) for values in itertools.product(*grid.values())]

    def at(self, point: dict) -> FinetuningSpec:
        """This section with plain values: the point's, each other swept field at its first value
        (its base), each other searched field at its largest value (what a plan budgets with)."""
        from sweeper.spec.space import largest

        base = {name: values[0] for name, values in self.swept().items()}
        base |= {name: largest(space) for name, space in self.searched().items()}
        return replace(self, **{**base, **point})

    def data_fields(self) -> tuple[str, ...]:
        """The searchable fields that shape the tokenised task data of some task of the study:
        max_length, and its families' encoding settings (QA's doc_stride)."""
        known = registry.current()
        families = {known.tasks[t].family for t in self.tasks if t in known.tasks}
        encoding = {key for family in families if family in known.families
                    for key in known.families[family].encoding_settings}
        return tuple(name for name in self.SEARCH_FIELDS if name == "max_length" or name in encoding)

    def sweep_problems(self):
        """(key, reason) for each protocol field swept in a way this mode cannot plan: a
        distribution in grid mode (nothing samples it), a grid in optuna or random mode (a search
        samples its points; a choice says the same), a range over a field that shapes task data in
        those modes (the data is tokenised per value before the search: a choice names the values),
        and each combination of grid or choice values the checks refuse (each value was checked
        with the other fields at their first value while the YAML was read)."""
        problems = []
        for name in self.SEARCH_FIELDS:
            value = getattr(self, name)
            if isinstance(value, Distribution) and self.search == "grid":
                problems.append((f"finetuning.{name}.{value.kind}", (
                    f"{value.kind} is a distribution: search: grid takes a value or a grid (a list, or "
                    "{grid_search: [...]}) here; search: optuna or random samples distributions")))
            elif isinstance(value, Grid) and self.search != "grid":
                listed = shown([list(v) if isinstance(v, tuple) else v for v in value.values])
                problems.append((f"finetuning.{name}{value.form}", (
                    f"a grid goes with search: grid; search: {self.search} samples its points: write "
                    f"{{choice: {listed}}} to search over these values, or give one value")))
            elif isinstance(value, Distribution) and value.kind != "choice" and name in self.data_fields():
                problems.append((f"finetuning.{name}.{value.kind}", (
                    f"{name} shapes the tokenised task data, which is prepared once per value before the search: "
                    f"give its values as {{choice: [...]}} (search: {self.search})")))
        yield from problems
        if problems:
            return
        for point in self.points()[1:]:
            for key, reason in self.at(point).check():
                combination = ", ".join(f"{field} {shown(list(value) if isinstance(value, tuple) else value)}"
                                        for field, value in point.items())
                yield f"finetuning.{key}", f"with {combination}: {reason}"
                return

    def check(self):
        yield from AdamWConfig.check(self)
        known = registry.current()
        for i, task in enumerate(self.tasks):
            if task in known.tasks and known.tasks[task].train_task and known.tasks[task].train_task not in self.tasks:
                trained_on = known.tasks[task].train_task
                yield f"tasks[{i}]", (f"{task!r} is an evaluation-only set scored with the model trained on "
                                      f"{trained_on!r}; add {trained_on!r} to tasks")
        for task in self.task_budgets:
            if task not in self.tasks:
                yield f"task_budgets.{key_text(task)}", f"{shown(task)} is not in tasks{suggestion(task, self.tasks)}"
        families = {known.tasks[t].family for t in self.tasks if t in known.tasks}
        for family in known.families.values():
            if family.name in families and family.check is not None:
                yield from family.check(self)
        yield from non_empty(self, "tasks", "seeds", *(("learning_rates",) if self.search == "grid" else ()))
        yield from each_positive(self, "learning_rates")
        yield from seeds(self, "seeds")
        yield from distinct(self, "tasks", "learning_rates", "seeds")
        names: dict[str, int] = {}
        for i, entry in enumerate(self.checkpoints):
            if entry.name in names:
                yield f"checkpoints[{i}].name", (f"{shown(entry.name)} is the name of checkpoints[{names[entry.name]}] "
                                                 "too: give each checkpoint its own name")
            names.setdefault(entry.name, i)
        yield from non_negative(self, "eval_every")
        if self.scheduler.kind != "none":
            if self.search == "grid":
                yield "scheduler.kind", ("grid mode runs every trial to its end (the paper's protocol); a scheduler "
                                         "goes with search: optuna or random")
            elif not self.eval_every:
                yield "scheduler.kind", f"{self.scheduler.kind} stops trials on their validation curve: set eval_every"
        yield from positive(self, "batch_size", "micro_batch_size", "max_steps", "max_length", "eval_batch_size",
                            "epochs", "max_train_examples", "max_eval_examples")
        if not 0 <= self.warmup_ratio < 1:
            yield "warmup_ratio", f"{self.warmup_ratio} is outside [0, 1)"
