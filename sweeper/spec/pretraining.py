"""The `pretraining` section of a spec (its run entries, their phases, the optimizer, its
replicates), as typed dataclasses; the `model` and `data` sections are sweeper.spec.model_data.

Every field has a one-line docstring; the shipped YAML files repeat them as comments. Each
dataclass checks its own values in `check()`, returning (key, reason) pairs, so an error names
the exact key. A field named in a `GRID_FIELDS` takes a grid: one run per value
(sweeper.plan.runs). The AdamW settings are `sweeper.contract.configs.AdamWConfig`'s fields.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar, Literal

from sweeper.contract import registry
from sweeper.contract.catalog import MODEL_PRESETS, SCALE_DEFAULTS, scale_of
from sweeper.contract.configs import (AdamWConfig, distinct, each_positive, non_empty, non_negative, positive,
                                  seeds)
from sweeper.spec.parsing import Grid, values_of
from sweeper.spec.reading import key_text, shown, suggestion
from sweeper.spec.sequential import SequentialSpec
from sweeper.spec.settings import MASKING_SHARES, DefaultList, masking_share_problem, setting_problem


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
    """A registered objective: mlm, clm, or a plugin's (sweeper.contract.registry)."""
    until: float | None = None
    """End of the phase as a share of the run's steps (of its pre-decay steps with
    clm_fraction_of: pre_decay), in (0, 1]; the last phase runs to the end (leave it out)."""
    mask_ratio: float | None = None
    """Masking ratio of a masking objective, in (0, 1) (default: the objective's)."""
    settings: dict = field(default_factory=dict)
    """Other settings of the objective (see its registration), e.g. a plugin's span length."""

    def check(self):
        if self.objective not in registry.current().objectives:
            yield "objective", (f"unknown objective {shown(self.objective)}"
                                f"{suggestion(self.objective, list(registry.current().objectives))}; "
                                f"registered: {', '.join(registry.current().objectives)}")
            return
        known = registry.objective_of(self.objective).settings
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

    def given_settings(self) -> dict:
        """The settings this phase gives (mask_ratio among them); what it leaves out comes from the
        study and the objective's defaults (`PretrainingSpec.phase_settings`)."""
        return {**self.settings, **({} if self.mask_ratio is None else {"mask_ratio": self.mask_ratio})}


@dataclass(frozen=True, kw_only=True, slots=True)
class RunGridSpec:
    objective: str | None = None
    """mlm, clm, clm-mlm (CLM for clm_fraction of the steps, or switch_steps steps, then MLM), or another registered
    objective: the short form. Give this or `phases`."""
    phases: list[PhaseSpec] | None = None
    """The long form: objectives in step order, e.g. [{objective: clm, until: 0.25},
    {objective: mlm, mask_ratio: 0.4}] (plans the same run, under the same key, as clm-mlm 0.25)."""
    mask_ratio: list[float] = field(default_factory=lambda: DefaultList([0.4]))
    """MLM masking ratios, each in (0, 1); one run per value."""
    clm_fraction: list[float] | None = None
    """clm-mlm only: share of the steps trained with CLM, each in [0, 1] (default [0.25]); with
    switch_steps, the share each switch step stands for (the results' clm_fraction), one per step."""
    switch_steps: list[int] | None = None
    """clm-mlm only: the switch as steps of CLM before MLM, one run per value (the paper's tables:
    [3000, 6000, 9000] at 12k steps); each below every step budget of the entry. Replaces the
    share rule (clm_fraction_of) for this entry; the run key is the same as for a share giving
    the same step."""
    steps: list[int] | None = None
    """Step budgets, one run per value (default: pretraining.steps)."""
    checkpoint_steps: list[int] = field(default_factory=list)
    """Intermediate checkpoints (steps) that are fine-tuned too: the data-efficiency curve."""
    preset: list[str] | None = None
    """Model presets of this entry, one run each (default: model.preset)."""
    init_from: list[str] | None = None
    """Continued pretraining: start from the decayed final checkpoint of these runs of the study
    (run names) or from Hugging Face causal LMs (`hf:<path or name>`, see hf_init); steps are then
    the added steps."""
    warmup_steps: int | None = None
    """Warmup of this entry's schedule (default: pretraining.warmup_steps); the re-warmup of a CPT
    run. A grid plans one run per value."""
    decay_steps: int | None = None
    """Decay of this entry's schedule (default: pretraining.decay_steps); a grid plans one run per value."""
    replicates: int | None = None
    """Times each run of this entry is trained, each with its own initialisation and data order
    (default: pretraining.replicates)."""
    hf_init: Literal["auto", "convert", "native"] = "auto"
    """How an `hf:` source is continued: `convert` into the study's encoder (Llama, Mistral),
    `native` as its own model run bidirectionally (any causal LM transformers ships), `auto`
    converting where that is exact, else native."""
    GRID_FIELDS: ClassVar = ("warmup_steps", "decay_steps")

    def check(self):
        if (self.objective is None) == (self.phases is None):
            yield "objective", "give either objective (short form) or phases (long form)"
            return
        if self.objective is not None and self.objective not in (*registry.current().objectives, "clm-mlm"):
            yield "objective", (f"unknown objective {shown(self.objective)}"
                                f"{suggestion(self.objective, [*registry.current().objectives, 'clm-mlm'])}; "
                                f"registered: {', '.join([*registry.current().objectives, 'clm-mlm'])}")
        if self.phases is not None:
            yield from self.check_phases()
        if self.init_from is not None and self.objective != "mlm":
            yield "init_from", "continued pretraining is MLM: use objective: mlm with init_from"
        if self.init_from == []:
            yield "init_from", "empty grid: give at least one source or leave init_from out"
        for i, source in enumerate(self.init_from or []):
            if source.startswith("hf:") and len(source) == 3:
                yield f"init_from[{i}]", "give a path or model name after 'hf:'"
        if self.hf_init != "auto" and not any(source.startswith("hf:") for source in self.init_from or []):
            yield "hf_init", "applies to hf: sources in init_from; this entry has none"
        for i, preset in enumerate(self.preset or []):
            if preset not in MODEL_PRESETS:
                yield f"preset[{i}]", f"unknown preset {shown(preset)}{suggestion(preset, list(MODEL_PRESETS))}"
        if self.preset == []:
            yield "preset", "empty grid: give at least one preset or leave preset out"
        yield from non_negative(self, "warmup_steps", "decay_steps")
        yield from replicate_count(self)
        for i, ratio in enumerate(self.mask_ratio):
            if not 0 < ratio < 1:
                yield f"mask_ratio[{i}]", f"{ratio} is outside (0, 1)"
        for i, share in enumerate(self.clm_fraction or []):
            if not 0 <= share <= 1:
                yield f"clm_fraction[{i}]", f"{share} is outside [0, 1]"
        yield from self.check_switch_steps()
        yield from non_empty(self, "mask_ratio", "clm_fraction", "steps", "switch_steps")
        yield from each_positive(self, "steps", "checkpoint_steps", "switch_steps")
        yield from distinct(self, "mask_ratio", "clm_fraction", "steps", "checkpoint_steps", "preset", "init_from",
                            "switch_steps")

    def check_switch_steps(self):
        if self.switch_steps is None:
            return
        if self.objective != "clm-mlm":
            yield "switch_steps", "a switch step goes with objective: clm-mlm (CLM, then MLM)"
        elif self.clm_fraction is not None and len(self.clm_fraction) != len(self.switch_steps):
            yield "clm_fraction", (f"with switch_steps, give one share per switch step ({len(self.switch_steps)}), "
                                   f"got {len(self.clm_fraction)}; or leave clm_fraction out (share = switch / steps)")

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
    steps: int | None = None
    """Default step budget of a run (None: the presets' scale: 600 for CPU presets, the paper's
    42,000 otherwise; catalog.SCALE_DEFAULTS)."""
    global_batch_size: int | None = None
    """Sequences (rows of data.seq_len tokens; two samples each under data.sample_lengths: variable)
    per optimizer step, over all workers (None: 16 for CPU presets, the paper's 2,304 otherwise)."""
    warmup_steps: int | None = None
    """Linear warmup steps of the warmup-stable-decay schedule (None: the paper's 2,000 where
    warmup and decay fit in steps, else 5 % of steps)."""
    decay_steps: int | None = None
    """Final linear decay-to-zero steps (None: as warmup_steps)."""
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
    share_prefixes: bool = True
    """Train each shared prefix once (sweeper.plan.branches): a run whose first steps are another
    run's (a shorter WSD run until its decay, a CLM -> MLM run until its switch) starts from that
    run's checkpoint there; the same weights (on CPU byte for byte), fewer steps. Not in run keys.
    false: every run from scratch."""
    compile: bool | None = None
    """torch.compile each transformer block (fixed shapes: compiled once per run). None: on where the
    workers have a GPU (+14-22 % tokens/s at 210m on an H100), off on CPUs (a few hundred CPU steps
    do not repay the compile); docs/benchmarks.md section 5."""
    lm_loss: Literal["auto", "fused", "reference"] = "auto"
    """How the LM head's cross-entropy is computed (trainables.lm_loss): fused (in chunks of rows,
    or a CUDA kernel where liger-kernel or cut-cross-entropy is installed: no full logits tensor),
    reference (the full float32 logits), auto (fused on a GPU, reference on a CPU, where it is faster
    and memory is not short: docs/benchmarks.md section 18). Equal up to float rounding: not in run keys."""
    seed: int = 0
    """Weight-initialisation seed (the same for every run; replicate r >= 1 derives its own)."""
    replicates: int = 1
    """Times each run is trained, each with its own initialisation and data order: replicate 0
    is the run itself (`tiny-mlm40-600`), replicate r >= 1 `tiny-mlm40-600-rep<r>`. A run entry's
    `replicates` wins."""
    sequential: SequentialSpec | None = None
    """Replicates added in looks until each objective comparison is decided (sweeper.spec.sequential):
    in place of a fixed `replicates`."""

    def check(self):
        if not self.runs:
            yield "runs", "empty grid: give at least one run"
        yield from positive(self, "steps", "global_batch_size", "log_every", "micro_batch_size",
                            "keep_resume_checkpoints")
        yield from non_negative(self, "warmup_steps", "decay_steps", "save_every", "random_replace", "keep_original")
        yield from seeds(self, "seed")
        yield from replicate_count(self)
        if self.sequential is not None:
            if self.replicates != 1:
                yield "replicates", "a sequential plan sets the replicates (pretraining.sequential): leave this out"
            for i, run in enumerate(self.runs):
                if run.replicates is not None:
                    yield f"runs[{i}].replicates", ("a sequential plan sets the replicates (pretraining.sequential): "
                                                    "leave this out")
        if problem := masking_share_problem(self.phase_settings("mlm", {}), of_phase=False):
            yield "random_replace", problem
        for i, run in enumerate(self.runs):
            for j, phase in enumerate(run.phases or []):  # a phase's settings with the study's merged in, as planned
                if problem := masking_share_problem(self.phase_settings(phase.objective, phase.given_settings()), True):
                    given = [key for key in MASKING_SHARES if key in phase.settings]
                    yield f"runs[{i}].phases[{j}]" + (f".settings.{given[0]}" if given else ""), problem

    def for_presets(self, presets: set[str]) -> PretrainingSpec:
        """This section with each budget field the spec leaves out at its default for the scale of
        `presets` (the runs' model presets: catalog.scale_of), warmup and decay derived from steps."""
        defaults = SCALE_DEFAULTS[scale_of(presets)]
        steps = defaults["steps"] if self.steps is None else self.steps
        derived = PAPER_SCHEDULE_STEPS if 2 * PAPER_SCHEDULE_STEPS <= steps else steps // 20
        return replace(self, steps=steps,
                       global_batch_size=(defaults["global_batch_size"] if self.global_batch_size is None
                                                             else self.global_batch_size),
                       warmup_steps=derived if self.warmup_steps is None else self.warmup_steps,
                       decay_steps=derived if self.decay_steps is None else self.decay_steps)

    def budget_problems(self):
        """(key, reason) for each run entry whose schedule does not fit it: a checkpoint step at or
        past its budget, warmup + decay longer than a budget (checked once the defaults are resolved:
        `for_presets`)."""
        for i, run in enumerate(self.runs):
            budgets = run.steps or [self.steps]
            for j, step in enumerate(run.checkpoint_steps):
                if step >= min(budgets):
                    yield (f"runs[{i}].checkpoint_steps[{j}]",
                           f"step {step} is not before the run's budget of {min(budgets)} steps")
            for j, step in enumerate(run.switch_steps or []):
                if step > min(budgets):
                    yield (
                        f"runs[{i}].switch_steps[{j}]",
                        f"step {step} is beyond the run's budget of {min(budgets)} steps",
                    )
            warmups = values_of(self.warmup_steps if run.warmup_steps is None else run.warmup_steps)
            decays = values_of(self.decay_steps if run.decay_steps is None else run.decay_steps)
            # The first (budget, warmup, decay) combination in grid order that does not fit, found
            # in one pass over each list (the product of three 3,000-value grids is 2.7e10).
            budget = next((b for b in budgets if max(warmups) + max(decays) > b), None)
            if budget is not None:  # named at the entry's swept value when that is what differs
                j = next(j for j, warmup in enumerate(warmups) if warmup + max(decays) > budget)
                k = next(k for k, decay in enumerate(decays) if warmups[j] + decay > budget)
                key = (f"runs[{i}].warmup_steps[{j}]" if isinstance(run.warmup_steps, Grid) and j else
                       f"runs[{i}].decay_steps[{k}]" if isinstance(run.decay_steps, Grid) and k else
                       f"warmup_steps[{j}]"
                       if run.warmup_steps is None and isinstance(self.warmup_steps, Grid) and j else
                       f"decay_steps[{k}]" if run.decay_steps is None and isinstance(self.decay_steps, Grid) and k else
                       f"runs[{i}].steps")
                owner = (
                    f"pretraining.runs[{i}]." if (run.warmup_steps, run.decay_steps) != (None, None) else "pretraining."
                )
                yield key, (f"budget {budget} is shorter than warmup + decay steps ({warmups[j]} + {decays[k]}): "
                            f"set {owner}warmup_steps and {owner}decay_steps to fit (or a longer steps)")

    def replicates_of(self, entry: RunGridSpec) -> int:
        """How many times the runs of `entry` are trained: its own count, else the study's (a
        sequential plan's first look, `SequentialSpec.looks`: its later looks set each run's count)."""
        if self.sequential is not None:
            return self.sequential.looks()[0]
        return self.replicates if entry.replicates is None else entry.replicates

    def phase_settings(self, objective: str, given: dict) -> dict:
        """An objective's settings in a run of this study: its registered defaults, then the
        study's MLM settings (`random_replace`, `keep_original`) for MLM, then what the phase gave."""
        defaults = {key: getattr(self, key) for key in MASKING_SHARES} if objective == "mlm" else {}
        return registry.objective_settings(objective, {**defaults, **given})


PAPER_SCHEDULE_STEPS = 2000
"""The paper's warmup and decay steps (of 42,000): each one's default wherever both fit in
pretraining.steps (so a spec that planned with the former fixed defaults keeps its run keys),
else 5 % of the steps."""

MAX_REPLICATES = 1000
"""Each replicate is a whole pretraining run: more is a typo, not a plan."""


def replicate_count(owner):
    """(key, reason) when `replicates` is not a count in [1, MAX_REPLICATES]."""
    if owner.replicates is not None and not 0 < owner.replicates <= MAX_REPLICATES:
        yield "replicates", f"must be a whole number in [1, {MAX_REPLICATES:,}], got {owner.replicates}"
