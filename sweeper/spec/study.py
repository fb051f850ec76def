"""The study spec: what a `search_spaces/*.yaml` file may say, as typed dataclasses.

Every field has a one-line docstring; the shipped YAML files repeat them as comments. Each
dataclass checks its own values in `check()`, returning (key, reason) pairs, so an error names
the exact key; `StudySpec.check` does the checks that span sections. The spec is frozen: the
plan (sweeper.plan.study_plan) and the worker configs (sweeper.spec.configs) are derived from it, never edited
into it. The AdamW settings are `sweeper.spec.configs.AdamWConfig`'s fields, shared by
`pretraining.optimizer` and `finetuning`.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import ClassVar, Literal

from sweeper.spec import registry
from sweeper.spec.catalog import MODEL_FIELDS, MODEL_PRESETS, TASKS
from sweeper.spec.configs import (AdamWConfig, TrackingConfig, distinct, each_positive, non_blank, non_empty,
                             non_negative, positive, seeds)
from sweeper.plan.runs import RunNameClash, expand_base_runs, expand_runs  # sweeper.plan.runs imports no spec
from sweeper.spec.parsing import (FORMS, MAX_INT, Distribution, Grid, SpecError, build_dataclass, key_text,
                                  load_yaml, shown, suggestion, type_name, values_of)
from sweeper.store.storage import scheme_error

NAME_MAX_BYTES = 255
"""Longest file or folder name most file systems take (ext4, XFS, APFS, NTFS)."""


def number_problem(value, integer: bool) -> str | None:
    """Why `value` (from an untyped mapping: model overrides, objective settings) is not a finite
    number, or not an integer when `integer`, or None."""
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        hint = " (YAML reads 1e-5 as text: write 1.0e-5)" if not integer and parses_as_float(value) else ""
        return f"expected {'an integer' if integer else 'a number'}, got {type_name(value)} {shown(value)}{hint}"
    if isinstance(value, int) and abs(value) > MAX_INT:
        return f"{shown(value)} is beyond the 64-bit integer range"
    if not math.isfinite(value):
        return f"must be a finite number, got {value}"
    return None


def parses_as_float(value) -> bool:
    try:
        return isinstance(value, str) and math.isfinite(float(value))
    except ValueError:
        return False


def override_items(key, value) -> list[tuple[str, object]]:
    """(key path, value) of each value an override takes: itself, each item of a grid (a list or
    `{grid_search: [...]}`). A distribution, or another mapping, is one item the checks refuse."""
    where = f"overrides.{key_text(key)}"
    if isinstance(value, list):
        return [(f"{where}[{i}]", item) for i, item in enumerate(value)] or [(where, value)]
    if isinstance(value, dict) and list(value) == ["grid_search"] and isinstance(value["grid_search"], list):
        return [(f"{where}.grid_search[{i}]", item) for i, item in enumerate(value["grid_search"])] or [(where, [])]
    return [(where, value)]


def override_problems(overrides: dict):
    """(key, reason) for each model override that is not a LlamaEncoderConfig field
    (catalog.MODEL_FIELDS) of its type: sizes and floats positive, token ids not negative. An
    override may be a grid (one run per value); a distribution cannot go there."""
    for key, value in overrides.items():
        where, kind = f"overrides.{key_text(key)}", MODEL_FIELDS.get(key)
        if kind is None:
            yield where, (f"unknown key{suggestion(str(key), list(MODEL_FIELDS))}; LlamaEncoderConfig fields: "
                          f"{', '.join(MODEL_FIELDS)}")
            continue
        if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in FORMS and "grid_search" not in value:
            yield f"{where}.{next(iter(value))}", (f"{next(iter(value))} is a distribution, and only a value or a grid "
                                                   "(a list, or {grid_search: [...]}) can go here: pretraining runs "
                                                   "are planned as a grid")
            continue
        items, seen = override_items(key, value), {}
        if items == [(where, [])]:
            yield where, "empty grid: give at least one value"
        for path, item in items:
            if problem := number_problem(item, integer=kind is int):
                yield path, problem
            elif str(key).endswith("_token_id") and item < 0:
                yield path, f"must not be negative, got {item}"
            elif not str(key).endswith("_token_id") and item <= 0:
                yield path, f"must be positive, got {item}"
            elif item in seen:
                yield path, f"{shown(item)} is listed twice ({seen[item]} and {path}): give each value once"
            else:
                seen[item] = path


def setting_problem(default, value) -> str | None:
    """Why `value` cannot replace an objective setting whose registered default is `default`: a
    number for a number (an integer for an integer), finite; otherwise a scalar of the default's type."""
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        return number_problem(value, integer=isinstance(default, int))
    scalar = (str, bool, int, float, type(None))
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value}"
    if default is None and isinstance(value, scalar) or type(value) is type(default) and isinstance(value, scalar):
        return None
    return f"expected {type_name(default)} like the default {shown(default)}, got {type_name(value)} {shown(value)}"


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpec:
    preset: str = "tiny"
    """Architecture preset: nano, tiny, mini (CPU) or 210m, 610m, 1b, 1b-authors (paper Table 1)."""
    overrides: dict = field(default_factory=dict)
    """LlamaEncoderConfig fields replacing the preset's (e.g. num_hidden_layers: 2); a grid
    (num_hidden_layers: [2, 4]) plans one run per value."""

    def check(self):
        if self.preset not in MODEL_PRESETS:
            yield "preset", f"unknown preset {shown(self.preset)}{suggestion(self.preset, list(MODEL_PRESETS))}"
        yield from override_problems(self.overrides)

    def override_grid(self) -> dict[str, tuple]:
        """Each override's values, in the order given (a plain value: one; a grid: its items)."""
        return {key: tuple(item for _, item in override_items(key, value)) for key, value in self.overrides.items()}

    def override_points(self) -> list[dict]:
        """Every combination of the overrides' values (one dict when nothing is swept)."""
        grid = self.override_grid()
        return [dict(zip(grid, values)) for values in itertools.product(*grid.values())]

    def architecture_problem(self, preset: str, overrides: dict | None = None) -> str | None:
        """Why the preset with these overrides (default: the section's, unswept) is not a model
        the encoder can build."""
        config = {**MODEL_PRESETS[preset], **(self.overrides if overrides is None else overrides)}
        hidden, heads, kv_heads = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
        if hidden % heads:
            return f"hidden_size {hidden} is not divisible by num_attention_heads {heads}"
        if heads % kv_heads:
            return f"num_attention_heads {heads} is not divisible by num_key_value_heads {kv_heads}"
        if hidden // heads % 2:
            return f"the head size (hidden_size / num_attention_heads = {hidden // heads}) must be even (rotary)"
        return None


@dataclass(frozen=True, kw_only=True, slots=True)
class DataSpec:
    corpus: str = "wordnet"
    """Pretraining text: built-in `wordnet`, a local .jsonl/.parquet/.txt path, or a hub dataset id."""
    text_column: str = "text"
    """Column holding the text in the corpus rows."""
    tokenizer: str = "train-wordpiece"
    """`train-wordpiece` (trained on the corpus) or a Hugging Face tokenizer name or path."""
    vocab_size: int = 2048
    """Vocabulary size when the tokenizer is trained here."""
    seq_len: int = 128
    """Tokens per packed pretraining sequence (the paper: 1,024); a grid plans one run per value."""
    max_documents: int | None = None
    """Read at most this many corpus documents (None: all)."""
    order_seed: int = 0
    """Seed of the sample order, shared by every run (the same data order for all objectives)."""
    max_tokens: int | None = None
    """Tokens of the prepared corpus, rounded up to whole order blocks (65,536 x seq_len tokens);
    None: what the longest run reads plus 5 %. Reading stops there."""
    tokenizer_sample_documents: int = 100_000
    """A tokenizer trained here (`train-wordpiece`) learns from the corpus's first this many documents."""

    GRID_FIELDS: ClassVar = ("seq_len",)
    """Fields that take a grid: one run per value (sweeper.plan.runs)."""

    def check(self):
        yield from non_blank(self, "corpus", "text_column", "tokenizer")
        yield from positive(self, "vocab_size", "seq_len", "max_documents", "max_tokens", "tokenizer_sample_documents")
        yield from seeds(self, "order_seed")

    def identity(self) -> dict:
        """What enters run keys: every field, less those added later while at their defaults
        (so the keys of studies recorded before them stay the same)."""
        identity, defaults = asdict(self), {f.name: f.default for f in fields(self)}
        for added in ("max_tokens", "tokenizer_sample_documents"):
            if identity[added] == defaults[added]:
                del identity[added]
        return identity


@dataclass(frozen=True, kw_only=True, slots=True)
class OptimizerSpec(AdamWConfig):
    """AdamW (betas, eps, weight_decay, grad_clip: see AdamWConfig) at a peak learning rate."""

    peak_lr: float = 5e-4
    """Peak learning rate of the warmup-stable-decay schedule."""
    GRID_FIELDS: ClassVar = ("peak_lr", "betas", "eps", "weight_decay", "grad_clip")
    """Fields that take a grid (peak_lr: [5.0e-4, 1.0e-3]): one run per value (sweeper.plan.runs)."""

    def check(self):
        yield from AdamWConfig.check(self)
        yield from positive(self, "peak_lr")


@dataclass(frozen=True, kw_only=True, slots=True)
class PhaseSpec:
    """One stretch of a run trained with one objective (the long form of a run's objectives)."""

    objective: str
    """A registered objective: mlm, clm, or a plugin's (sweeper.spec.registry)."""
    until: float | None = None
    """End of the phase as a share of the run's steps (of its pre-decay steps with
    clm_fraction_of: pre_decay), in (0, 1]; the last phase runs to the end (leave it out)."""
    mask_ratio: float | None = None
    """Masking ratio of a masking objective, in (0, 1) (default: the objective's)."""
    settings: dict = field(default_factory=dict)
    """Other settings of the objective (see its registration), e.g. a plugin's span length."""

    def check(self):
        if self.objective not in registry.OBJECTIVES:
            yield "objective", (f"unknown objective {shown(self.objective)}"
                                f"{suggestion(self.objective, list(registry.OBJECTIVES))}; "
                                f"registered: {', '.join(registry.OBJECTIVES)}")
            return
        known = registry.OBJECTIVES[self.objective].settings
        if self.mask_ratio is not None:
            if "mask_ratio" not in known:
                yield "mask_ratio", f"objective {self.objective!r} masks nothing"
            elif not 0 < self.mask_ratio < 1:
                yield "mask_ratio", f"{self.mask_ratio} is outside (0, 1)"
        for key, value in self.settings.items():
            if key not in known or key == "mask_ratio":
                yield f"settings.{key_text(key)}", (
                    f"not a setting of objective {self.objective!r}{suggestion(str(key), list(known))}; "
                    f"its settings: {', '.join(known) or 'none'}")
            elif problem := setting_problem(known[key], value):
                yield f"settings.{key}", problem
            elif key in ("random_replace", "keep_original") and not 0 <= value <= 1:
                yield f"settings.{key}", f"{value} is outside [0, 1]"
        if self.until is not None and not 0 < self.until <= 1:
            yield "until", f"{self.until} is outside (0, 1]"

    def objective_settings(self) -> dict:
        given = {**self.settings, **({} if self.mask_ratio is None else {"mask_ratio": self.mask_ratio})}
        return registry.objective_settings(self.objective, given)


@dataclass(frozen=True, kw_only=True, slots=True)
class RunGridSpec:
    objective: str | None = None
    """mlm, clm, clm-mlm (CLM for clm_fraction of the steps, then MLM), or another registered
    objective: the short form. Give this or `phases`."""
    phases: list[PhaseSpec] | None = None
    """The long form: objectives in step order, e.g. [{objective: clm, until: 0.25},
    {objective: mlm, mask_ratio: 0.4}] (plans the same run, under the same key, as clm-mlm 0.25)."""
    mask_ratio: list[float] = field(default_factory=lambda: [0.4])
    """MLM masking ratios, each in (0, 1); one run per value."""
    clm_fraction: list[float] = field(default_factory=lambda: [0.25])
    """clm-mlm only: share of the steps trained with CLM, each in [0, 1]."""
    steps: list[int] | None = None
    """Step budgets, one run per value (default: pretraining.steps)."""
    checkpoint_steps: list[int] = field(default_factory=list)
    """Intermediate checkpoints (steps) that are fine-tuned too: the data-efficiency curve."""
    preset: list[str] | None = None
    """Model presets of this entry, one run each (default: model.preset)."""
    init_from: list[str] | None = None
    """Continued pretraining: start from the decayed final checkpoint of these runs of the study
    (run names) or from Hugging Face Llama-family causal LMs (`hf:<path or name>`); steps are then
    the added steps."""
    warmup_steps: int | None = None
    """Warmup of this entry's schedule (default: pretraining.warmup_steps); the re-warmup of a CPT
    run. A grid plans one run per value."""
    decay_steps: int | None = None
    """Decay of this entry's schedule (default: pretraining.decay_steps); a grid plans one run per value."""
    GRID_FIELDS: ClassVar = ("warmup_steps", "decay_steps")

    def check(self):
        if (self.objective is None) == (self.phases is None):
            yield "objective", "give either objective (short form) or phases (long form)"
            return
        if self.objective is not None and self.objective not in (*registry.OBJECTIVES, "clm-mlm"):
            yield "objective", (f"unknown objective {shown(self.objective)}"
                                f"{suggestion(self.objective, [*registry.OBJECTIVES, 'clm-mlm'])}; "
                                f"registered: {', '.join([*registry.OBJECTIVES, 'clm-mlm'])}")
        if self.phases is not None:
            yield from self.check_phases()
        if self.init_from is not None and self.objective != "mlm":
            yield "init_from", "continued pretraining is MLM: use objective: mlm with init_from"
        if self.init_from == []:
            yield "init_from", "empty grid: give at least one source or leave init_from out"
        for i, source in enumerate(self.init_from or []):
            if source.startswith("hf:") and len(source) == 3:
                yield f"init_from[{i}]", "give a path or model name after 'hf:'"
        for i, preset in enumerate(self.preset or []):
            if preset not in MODEL_PRESETS:
                yield f"preset[{i}]", f"unknown preset {shown(preset)}{suggestion(preset, list(MODEL_PRESETS))}"
        if self.preset == []:
            yield "preset", "empty grid: give at least one preset or leave preset out"
        yield from non_negative(self, "warmup_steps", "decay_steps")
        for i, ratio in enumerate(self.mask_ratio):
            if not 0 < ratio < 1:
                yield f"mask_ratio[{i}]", f"{ratio} is outside (0, 1)"
        for i, share in enumerate(self.clm_fraction):
            if not 0 <= share <= 1:
                yield f"clm_fraction[{i}]", f"{share} is outside [0, 1]"
        yield from non_empty(self, "mask_ratio", "clm_fraction", "steps")
        yield from each_positive(self, "steps", "checkpoint_steps")
        yield from distinct(self, "mask_ratio", "clm_fraction", "steps", "checkpoint_steps", "preset", "init_from")

    def check_phases(self):
        if not self.phases:
            yield "phases", "empty: give at least one phase"
            return
        ends = [phase.until for phase in self.phases]
        if ends[-1] is not None and ends[-1] != 1:
            yield f"phases[{len(ends) - 1}].until", "the last phase runs to the end: leave until out (or 1)"
        for i, end in enumerate(ends[:-1]):
            if end is None:
                yield f"phases[{i}].until", "every phase but the last needs until (a share of the steps)"
            elif i and ends[i - 1] is not None and end <= ends[i - 1]:
                yield f"phases[{i}].until", f"{end} is not after the previous phase's end ({ends[i - 1]})"


@dataclass(frozen=True, kw_only=True, slots=True)
class PretrainingSpec:
    runs: list[RunGridSpec]
    """Run grids; each entry expands over its list-valued fields."""
    steps: int = 42_000
    """Default step budget of a run."""
    global_batch_size: int = 2304
    """Sequences per optimizer step, over all workers."""
    warmup_steps: int = 2000
    """Linear warmup steps of the warmup-stable-decay schedule."""
    decay_steps: int = 2000
    """Final linear decay-to-zero steps."""
    optimizer: OptimizerSpec = field(default_factory=OptimizerSpec)
    """AdamW settings and peak learning rate; each may be a grid (one run per value)."""
    GRID_FIELDS: ClassVar = ("global_batch_size", "warmup_steps", "decay_steps")
    """Fields that take a grid: one run per value (sweeper.plan.runs)."""
    clm_fraction_of: Literal["total", "pre_decay"] = "total"
    """What clm_fraction is a share of: all steps, or the steps before the decay (the authors'
    naming: 25 % of 42k with 2k decay = `clm-10k-mlm40-42k`; 100 % = 40k CLM + 2k MLM)."""
    random_replace: float = 0.0
    """MLM: share of selected tokens replaced by a random token (BERT: 0.1; paper: 0)."""
    keep_original: float = 0.0
    """MLM: share of selected tokens left unchanged (BERT: 0.1; paper: 0)."""
    log_every: int = 100
    """Steps between progress lines and pretraining-table rows."""
    save_every: int = 1000
    """Steps between resume checkpoints (0: only at evaluated checkpoints); a restarted run loses at most this many."""
    micro_batch_size: int | None = None
    """Sequences per forward pass on one worker (None: the worker's whole share of the global
    batch). Gradients accumulate over global_batch_size / (workers x micro_batch_size) passes, the
    loss normalised over the whole global batch, so any micro batch trains the same weights."""
    activation_checkpointing: bool = False
    """Recompute each transformer block's activations in the backward pass instead of keeping
    them: about a third more compute for activation memory of one block per micro batch."""
    keep_resume_checkpoints: int = 1
    """Resume-only checkpoints (save_every) kept per run; evaluated checkpoints are always kept
    and drop their optimizer state once the run has moved past them."""
    compile: bool = False
    """torch.compile each transformer block (fixed shapes: compiled once per run); pays on GPU over
    long runs, not on a few hundred CPU steps (benchmarks/pretrain_throughput.py --compile)."""
    seed: int = 0
    """Weight-initialisation seed (the same for every run)."""

    def check(self):
        if not self.runs:
            yield "runs", "empty grid: give at least one run"
        yield from positive(self, "steps", "global_batch_size", "log_every", "micro_batch_size",
                            "keep_resume_checkpoints")
        yield from non_negative(self, "warmup_steps", "decay_steps", "save_every", "random_replace", "keep_original")
        yield from seeds(self, "seed")
        if not 0 <= self.random_replace + self.keep_original <= 1:
            yield "random_replace", "random_replace + keep_original must lie in [0, 1]"
        for i, run in enumerate(self.runs):
            budgets = run.steps or [self.steps]
            for j, step in enumerate(run.checkpoint_steps):
                if step >= min(budgets):
                    yield (f"runs[{i}].checkpoint_steps[{j}]",
                           f"step {step} is not before the run's budget of {min(budgets)} steps")
            warmups = values_of(self.warmup_steps if run.warmup_steps is None else run.warmup_steps)
            decays = values_of(self.decay_steps if run.decay_steps is None else run.decay_steps)
            for budget, (j, warmup), (k, decay) in itertools.product(budgets, enumerate(warmups), enumerate(decays)):
                if warmup + decay > budget:  # named at the entry's swept value when that is what differs
                    key = (f"runs[{i}].warmup_steps[{j}]" if isinstance(run.warmup_steps, Grid) and j else
                           f"runs[{i}].decay_steps[{k}]" if isinstance(run.decay_steps, Grid) and k else f"runs[{i}].steps")
                    yield key, f"budget {budget} is shorter than warmup + decay steps ({warmup} + {decay})"


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


@dataclass(frozen=True, kw_only=True, slots=True)
class FinetuningSpec(AdamWConfig):
    """The fine-tuning protocol; its AdamW settings (betas, eps, weight_decay, grad_clip) are
    AdamWConfig's fields, given flat under `finetuning:`."""

    tasks: list[str]
    """Task names (see `sweeper.spec.catalog.TASKS`)."""
    search: Literal["grid", "optuna", "random"] = "grid"
    """grid: every learning rate x seed x combination of the swept protocol fields; optuna: TPE per
    cell over the learning rate and the fields given as distributions, seeds as repeats, objective =
    seed-averaged validation score; random: points drawn per cell from the same space (Tune's sampler)."""
    learning_rates: list[float] = field(default_factory=lambda: [1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4])
    """Peak learning rates of the grid (search: grid)."""
    optuna: OptunaSpec = field(default_factory=OptunaSpec)
    """TPE search per cell (search: optuna)."""
    random: RandomSpec = field(default_factory=RandomSpec)
    """Random search per cell (search: random)."""
    scheduler: SchedulerSpec = field(default_factory=SchedulerSpec)
    """Early stopping on the validation curve (search: optuna or random; needs eval_every)."""
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    """Fine-tuning seeds of the grid."""
    batch_size: int = 32
    """Effective batch size (gradient accumulation makes up what micro_batch_size cannot hold)."""
    micro_batch_size: int = 32
    """Examples per forward pass."""
    max_steps: int = 1000
    """At most this many optimizer steps per trial."""
    epochs: float = 1.0
    """At most this many passes over the training split."""
    task_budgets: dict[str, TaskBudgetSpec] = field(default_factory=dict)
    """Per-task max_steps / epochs replacing the ones above (the paper: one epoch for CoNLL and UNER)."""
    max_length: int = 128
    """Tokens per example after truncation (per window for extractive QA)."""
    doc_stride: int = 128
    """Extractive QA: tokens shared by consecutive windows of a context longer than max_length."""
    retrieval_temperature: float = 0.05
    """Retrieval: temperature of the in-batch InfoNCE loss over cosine similarities."""
    warmup_ratio: float = 0.1
    """Share of the steps with linear warmup; then linear decay to 0."""
    eval_batch_size: int = 128
    """Examples per forward pass when scoring."""
    eval_every: int = 0
    """Also score validation every this many steps (the eval-curve table); 0: final weights only."""
    max_train_examples: int | None = None
    """Cap on training examples per task (None: the whole split)."""
    max_eval_examples: int | None = None
    """Cap on validation and test examples per task (None: whole splits)."""

    SEARCH_FIELDS: ClassVar = ("batch_size", "max_steps", "epochs", "max_length", "doc_stride", "retrieval_temperature",
                               "warmup_ratio", "betas", "eps", "weight_decay", "grad_clip")
    """Protocol fields that take a value, a grid or a distribution in Ray Tune's vocabulary
    (spec_parsing.FORMS); each form is checked against the field's own bounds. With search: grid,
    a grid plans one trial per combination of values (`points`, sweeper.plan.study_plan.task_points); with
    search: optuna or random, a distribution is searched per cell with the learning rate."""

    def swept(self) -> dict[str, tuple]:
        """The protocol fields given as a grid, each with its values in the order given."""
        return {name: getattr(self, name).values for name in self.SEARCH_FIELDS if isinstance(getattr(self, name), Grid)}

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
        families = {TASKS[t].family for t in self.tasks if t in TASKS}
        encoding = {key for family in families if family in registry.FAMILIES
                    for key in registry.FAMILIES[family].encoding_settings}
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
        for i, task in enumerate(self.tasks):
            if task not in TASKS:
                yield f"tasks[{i}]", f"unknown task {shown(task)}{suggestion(task, list(TASKS))}"
            elif TASKS[task].train_task and TASKS[task].train_task not in self.tasks:
                trained_on = TASKS[task].train_task
                yield f"tasks[{i}]", (f"{task!r} is an evaluation-only set scored with the model trained on "
                                      f"{trained_on!r}; add {trained_on!r} to tasks")
        for task in self.task_budgets:
            if task not in self.tasks:
                yield f"task_budgets.{key_text(task)}", f"{shown(task)} is not in tasks{suggestion(task, self.tasks)}"
        families = {TASKS[t].family for t in self.tasks if t in TASKS}
        for family in registry.FAMILIES.values():
            if family.name in families and family.check is not None:
                yield from family.check(self)
        yield from non_empty(self, "tasks", "seeds", *(("learning_rates",) if self.search == "grid" else ()))
        yield from each_positive(self, "learning_rates")
        yield from seeds(self, "seeds")
        yield from distinct(self, "tasks", "learning_rates", "seeds")
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


@dataclass(frozen=True, kw_only=True, slots=True)
class ResourcesSpec:
    pretraining_workers: int = 0
    """Ray Train workers per pretraining run; 0 = local mode in one process (no ~40 s start cost)."""
    cpus_per_worker: float = 1
    """CPUs per pretraining worker (also torch threads in local mode)."""
    gpus_per_worker: float = 0
    """GPUs per pretraining worker."""
    cpus_per_trial: float = 1
    """CPUs per fine-tuning trial."""
    gpus_per_trial: float = 0
    """GPUs per fine-tuning trial; a fraction packs several trials on one GPU."""
    max_concurrent_trials: int | None = None
    """Cap on trials running at once (None: as many as resources allow)."""
    trials_per_shard: int = 2000
    """Fine-tuning trials per Tuner run; bounds the driver's memory on large grids."""
    sharding: Literal["ddp", "fsdp"] = "ddp"
    """How a worker group splits a run: ddp replicates the model on every worker; fsdp shards
    parameters, gradients and optimizer state (FSDP2 `fully_shard` per block), for 610m/1b."""
    max_failures: int = 2
    """Pretraining worker-group restarts from the last checkpoint before a run is failed."""
    gpu_memory_gb: float = 80.0
    """Memory of one accelerator (H100: 80); `sweeper plan` checks every run's estimated peak
    per worker against it when workers use GPUs."""

    def check(self):
        yield from non_negative(self, "pretraining_workers", "cpus_per_worker", "gpus_per_worker", "cpus_per_trial",
                                "gpus_per_trial", "max_failures")
        yield from positive(self, "gpu_memory_gb")
        if self.cpus_per_trial == 0 and self.gpus_per_trial == 0:
            yield "cpus_per_trial", "a trial needs some CPU or GPU"
        yield from positive(self, "trials_per_shard", "max_concurrent_trials")


@dataclass(frozen=True, kw_only=True, slots=True)
class CostSpec:
    gpu_peak_tflops: float = 989.0
    """Peak dense bf16 TFLOP/s of one GPU (H100 SXM: 989)."""
    utilization: float = 0.4
    """Model FLOPs utilisation assumed for the estimate (share of peak actually achieved)."""
    finetune_eval_examples: int = 5000
    """Validation + test examples scored per trial, for the estimate."""

    def check(self):
        yield from positive(self, "gpu_peak_tflops", "finetune_eval_examples")
        if not 0 < self.utilization <= 1:
            yield "utilization", f"{self.utilization} is outside (0, 1]"


@dataclass(frozen=True, kw_only=True, slots=True)
class StudySpec:
    study: str
    """Study name: the default storage folder and the `study` column of every result row."""
    pretraining: PretrainingSpec
    """The pretraining grid (Ray Train)."""
    finetuning: FinetuningSpec
    """The fine-tuning grid (Ray Tune)."""
    storage: str | None = None
    """Where the study lives: a path, or an s3:// or gs:// URI (default ./studies/<study>); --storage wins."""
    model: ModelSpec = field(default_factory=ModelSpec)
    """Backbone architecture."""
    data: DataSpec = field(default_factory=DataSpec)
    """Pretraining corpus and tokenizer."""
    resources: ResourcesSpec = field(default_factory=ResourcesSpec)
    """Ray resources per run and per trial."""
    cost: CostSpec = field(default_factory=CostSpec)
    """Cost model of `sweeper plan`: 6 x parameters x tokens FLOPs at this throughput."""
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    """Optional experiment tracking."""

    def check(self):
        if problem := folder_name_problem(self.study):
            yield "study", problem
        if self.storage is not None and "\x00" in self.storage:
            yield "storage", "holds a NUL character"
        elif self.storage is not None and (problem := scheme_error(self.storage)):
            yield "storage", problem
        workers = self.resources.pretraining_workers
        for global_batch in values_of(self.pretraining.global_batch_size):
            if workers > 0 and global_batch % workers:
                yield "pretraining.global_batch_size", (
                    f"{global_batch} is not divisible by resources.pretraining_workers "
                    f"({workers}): every worker takes an equal share of a step's sequences")
            elif (micro := self.pretraining.micro_batch_size) and (share := global_batch // max(workers, 1)) % micro:
                yield "pretraining.micro_batch_size", (
                    f"{micro} does not divide a worker's share of the global batch ({share} sequences = "
                    f"global_batch_size {global_batch} / {max(workers, 1)} worker(s))")
        if self.model.preset in MODEL_PRESETS and not any(problem for _, problem in self.model.check()):
            used = {p for grid in self.pretraining.runs for p in grid.preset or [self.model.preset]}
            for preset, point in itertools.product(sorted(used & set(MODEL_PRESETS)), self.model.override_points()):
                if problem := self.model.architecture_problem(preset, point):
                    swept = f" with {', '.join(f'{k}: {v}' for k, v in point.items())}" if point != self.model.overrides else ""
                    yield ("model.overrides" if self.model.overrides else "model.preset"), f"preset {preset}{swept}: {problem}"
                    break
        yield from self.finetuning.sweep_problems()
        yield from self.check_references()

    def check_references(self):
        """CPT sources must be runs of this study (non-CPT ones, so the order is well defined), and
        no two entries may plan different runs under one name."""
        try:
            base_names = {run.name for run in expand_base_runs(self)}
        except RunNameClash as clash:
            yield clash.key, clash.reason
            return
        unknown = False
        for i, grid in enumerate(self.pretraining.runs):
            for j, source in enumerate(grid.init_from or []):
                if not source.startswith("hf:") and source not in base_names:
                    unknown = True
                    yield (f"pretraining.runs[{i}].init_from[{j}]",
                           f"no run named {shown(source)} in this study{suggestion(source, sorted(base_names))}"
                           " (a study run name, or hf:<path> for a Hugging Face causal LM)")
        if not unknown:
            try:
                expand_runs(self)
            except RunNameClash as clash:
                yield clash.key, clash.reason


def folder_name_problem(name: str) -> str | None:
    """Why `name` cannot be the study's folder name (and `study` column), or None."""
    if not name or "/" in name or name in (".", ".."):
        return f"must be a non-empty name without '/' (and not . or ..), got {shown(name)}"
    if any(ord(c) < 32 or ord(c) == 127 or 0xD800 <= ord(c) < 0xE000 for c in name):
        return f"must not hold control characters (NUL, newline, tab, ...) or lone surrogates, got {shown(name)}"
    if (size := len(name.encode())) > NAME_MAX_BYTES:
        return f"is {size:,} bytes long (UTF-8); a folder name takes at most {NAME_MAX_BYTES}"
    return None


def load_spec(path: str | Path) -> StudySpec:
    """Parse and validate a spec file; raises SpecError on any mistake. Plugin modules named in
    SWEEPER_PLUGINS are imported first (their families and objectives become valid names)."""
    registry.load_plugins()
    data, context = load_yaml(path)
    return build_dataclass(StudySpec, data, "", context)


__all__ = ["StudySpec", "SpecError", "load_spec"]
