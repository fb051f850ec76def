"""How large a plan may be (`limits:` in a spec), and the plan's size counted from the spec alone.

A spec of a few hundred bytes can multiply grids into 10^9 runs or ask for 10^12 samples: the
plan would hang or run out of memory building lists it never needed. So the sizes are counted
arithmetically (products and sums of the lengths the plan iterates over, Python integers: no
overflow), before any grid is expanded, and a spec whose plan is larger than its `limits` is a
spec error (exit 2) naming the count, its factors and the key that raises the bound. The
defaults are far above the paper's study (38 runs, 50 checkpoints, 18,000 trials) and far below
what a plan cannot hold (planning takes ~0.2 ms and ~1 KB per trial).

The counts are what the plan materialises: the runs of every entry before the same run from two
entries is merged (so a count may exceed the runs the plan lists, never fall short of them), the
trials of every (checkpoint, task) cell, each grid's combinations of swept values. `StudySpec.check`
runs `size_problems` first, so nothing after it expands a grid of unchecked size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from sweeper.contract import registry
from sweeper.contract.configs import positive
from sweeper.spec.parsing import Distribution, Grid, values_of


@dataclass(frozen=True, kw_only=True, slots=True)
class LimitsSpec:
    """Bounds on the plan's size, checked before anything is planned; raise one for a study
    that really is that large."""

    max_runs: int = 1_000
    """Pretraining runs at most (replicates included; the paper trains 38)."""
    max_checkpoints: int = 10_000
    """Evaluated checkpoints at most (final + intermediate + from elsewhere; the paper: 50)."""
    max_trials: int = 200_000
    """Fine-tuning trials at most (the paper: 18,000); planning takes ~0.2 ms per trial."""
    max_points: int = 10_000
    """Combinations of swept values at most in one grid: the fine-tuning protocol fields'
    (each planned with every learning rate and seed) and the model overrides'."""
    max_samples: int = 10_000
    """Samples per (checkpoint, task) cell at most (search: random or optuna; default 6)."""
    max_curve_points: int = 10_000
    """Validation points per trial at most: max_steps / eval_every (each one a row of the
    eval-curve table)."""

    def check(self):
        yield from positive(self, "max_runs", "max_checkpoints", "max_trials", "max_points", "max_samples",
                            "max_curve_points")


@dataclass(frozen=True, slots=True)
class Count:
    """A size of the plan: the number and the factors it is the product (or sum) of."""

    total: int
    factors: str


def product(*factors: tuple[int, str]) -> Count:
    """`factors` (number, what it counts) multiplied, the factors of 1 left out of the words."""
    words = " x ".join(f"{n:,} {what}" for n, what in factors if n != 1) or "1"
    return Count(math.prod(n for n, _ in factors), words)


def length(value) -> int:
    """How many values a field takes in a grid: a Grid's, else one."""
    return len(values_of(value))


def swept_settings(spec, entry, scratch: bool) -> list[tuple[int, str]]:
    """(values, key) of each swept run field of an entry (sweeper.plan.runs.run_settings): data,
    batch, optimizer, schedule and, for a run from scratch, the model overrides."""
    pre, optimizer = spec.pretraining, spec.pretraining.optimizer
    axes = {"data.seq_len": spec.data.seq_len, "global_batch_size": pre.global_batch_size,
            **{f"optimizer.{name}": getattr(optimizer, name)
               for name in ("peak_lr", "betas", "eps", "weight_decay", "grad_clip")},
            "warmup_steps": pre.warmup_steps if entry.warmup_steps is None else entry.warmup_steps,
            "decay_steps": pre.decay_steps if entry.decay_steps is None else entry.decay_steps}
    swept = [(length(value), key) for key, value in axes.items()]
    if scratch:
        swept += [(len(values), f"model.{key}") for key, values in spec.model.override_grid().items()]
    return swept


def override_points(spec) -> int:
    return math.prod(len(values) for values in spec.model.override_grid().values())


def entry_runs(spec, i: int, entry) -> Count:
    """The runs `pretraining.runs[i]` plans (sweeper.plan.runs.expand_runs), replicates included."""
    pre = spec.pretraining
    budgets = len(entry.steps or [pre.steps])
    replicates = (pre.replicates_of(entry), "replicates")
    if entry.init_from is not None:
        return product((len(entry.init_from), "sources"), (budgets, "step budgets"),
                       (len(entry.mask_ratio), "mask ratios"), *swept_settings(spec, entry, False), replicates)
    shapes = 1
    if entry.phases is None:
        known = registry.current().objectives
        masks = entry.objective == "clm-mlm" or (entry.objective in known
                                                 and "mask_ratio" in registry.objective_of(entry.objective).settings)
        shapes = (len(entry.mask_ratio) if masks else 1) * (len(entry.switch_steps or entry.clm_fraction or [0.25])
                                                                   if entry.objective == "clm-mlm" else 1)
    return product((len(entry.preset or [spec.model.preset]), "presets"), (budgets, "step budgets"),
                   (shapes, "objective shapes"), *swept_settings(spec, entry, True), replicates)


def protocol_points(spec) -> Count:
    """Combinations of the fine-tuning protocol's swept values (FinetuningSpec.points): a grid's
    values, a searched field's planning values (each choice; a range: one)."""
    ft = spec.finetuning
    lengths = []
    for name in ft.SEARCH_FIELDS:
        value = getattr(ft, name)
        if isinstance(value, Grid):
            lengths.append((len(value.values), name))
        elif isinstance(value, Distribution) and value.kind == "choice":
            lengths.append((len(value.args), name))
    return product(*lengths)


def curve_points(spec) -> int:
    """Validation points of the longest trial: its step budget over eval_every."""
    ft = spec.finetuning
    if not ft.eval_every:
        return 0
    steps = ft.max_steps  # a value, a grid, or (searched) a choice or a randint
    budgets = list(steps.values) if isinstance(steps, Grid) else (
        [max(steps.args) if steps.kind == "choice" else steps.args[1]] if isinstance(steps, Distribution) else [steps])
    budgets += [budget.max_steps for budget in ft.task_budgets.values() if budget.max_steps is not None]
    return max(budgets) // ft.eval_every


def size_problems(spec):
    """(key, reason) for each size of `spec`'s plan above its `limits`, the runs first; nothing
    is expanded to count them."""
    limits, pre, ft = spec.limits, spec.pretraining, spec.finetuning

    def over(what: str, count: Count, limit: str) -> str:
        bound = getattr(limits, limit)
        return (f"plans {count.total:,} {what} ({count.factors}), more than limits.{limit} ({bound:,}): "
                f"a typo, or raise limits.{limit} for a study that large")

    overrides = override_points(spec)
    if overrides > limits.max_points:
        factors = " x ".join(f"{len(v):,} {k}" for k, v in spec.model.override_grid().items() if len(v) > 1)
        yield "model.overrides", over("combinations of model overrides", Count(overrides, factors), "max_points")
        return
    entries = [entry_runs(spec, i, entry) for i, entry in enumerate(pre.runs)]
    runs = sum(count.total for count in entries)
    if runs > limits.max_runs:
        i = max(range(len(entries)), key=lambda j: entries[j].total)
        detail = f"runs[{i}]: {entries[i].factors}" + (f"; {len(entries)} entries in all" if len(entries) > 1 else "")
        yield f"pretraining.runs[{i}]", over("pretraining runs", Count(runs, detail), "max_runs")
        return
    checkpoints = sum(count.total * (len(set(entry.checkpoint_steps)) + 1) for count, entry in zip(entries, pre.runs))
    checkpoints += len(ft.checkpoints)
    if checkpoints > limits.max_checkpoints:
        yield "pretraining.runs", over("evaluated checkpoints", Count(checkpoints, f"{runs:,} runs, each its final "
                                       "checkpoint and its checkpoint_steps"), "max_checkpoints")
        return
    points = protocol_points(spec)
    if points.total > limits.max_points:
        yield "finetuning", over("fine-tuning protocol points", points, "max_points")
        return
    samples = {"random": ("random.samples", ft.random.samples),
               "optuna": ("optuna.samples", ft.optuna.samples_per_cell)}.get(ft.search)
    if samples and samples[1] > limits.max_samples:
        yield f"finetuning.{samples[0]}", over("samples per cell", Count(samples[1], samples[0]), "max_samples")
        return
    cells = ((checkpoints, "checkpoints"), (len(ft.tasks), "datasets"))
    if ft.search == "grid":
        trials = product(*cells, (points.total, "protocol points"), (len(ft.learning_rates), "learning rates"),
                         (len(ft.seeds), "seeds"))
    else:
        trials = product(*cells, (samples[1], "samples"), (len(ft.seeds), "seeds"))
    if trials.total > limits.max_trials:
        yield "finetuning", over("fine-tuning trials", trials, "max_trials")
        return
    if (curve := curve_points(spec)) > limits.max_curve_points:
        yield "finetuning.eval_every", over("validation points per trial",
                                            Count(curve, f"max_steps / eval_every {ft.eval_every:,}"),
                                            "max_curve_points")
