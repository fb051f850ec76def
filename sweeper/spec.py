"""The study spec: what a `search_spaces/*.yaml` file may say, as typed dataclasses.

Every field has a one-line docstring; the shipped YAML files repeat them as comments. Each
dataclass checks its own values in `check()`, returning (key, reason) pairs, so an error names
the exact key. Cross-section checks (tasks, presets) live in `check_study`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sweeper.storage import scheme_error
from sweeper.catalog import MODEL_PRESETS, TASKS
from sweeper.spec_parsing import SpecError, build_dataclass, load_yaml, suggestion


@dataclass(kw_only=True, slots=True)
class ModelSpec:
    preset: str = "tiny"
    """Architecture preset: nano, tiny, mini (CPU) or 210m, 610m, 1b, 1b-authors (paper Table 1)."""
    overrides: dict = field(default_factory=dict)
    """LlamaEncoderConfig fields replacing the preset's (e.g. num_hidden_layers: 2)."""

    def check(self):
        if self.preset not in MODEL_PRESETS:
            yield "preset", f"unknown preset {self.preset!r}{suggestion(self.preset, list(MODEL_PRESETS))}"


@dataclass(kw_only=True, slots=True)
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
    """Tokens per packed pretraining sequence (the paper: 1,024)."""
    max_documents: int | None = None
    """Read at most this many corpus documents (None: all)."""
    order_seed: int = 0
    """Seed of the sample order, shared by every run (the same data order for all objectives)."""

    def check(self):
        for key in ("vocab_size", "seq_len"):
            if getattr(self, key) <= 0:
                yield key, f"must be positive, got {getattr(self, key)}"


@dataclass(kw_only=True, slots=True)
class OptimizerSpec:
    peak_lr: float = 5e-4
    """Peak learning rate of the warmup-stable-decay schedule."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    """AdamW betas."""
    eps: float = 1e-5
    """AdamW epsilon."""
    weight_decay: float = 0.1
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Gradient-norm clipping threshold."""

    def check(self):
        if self.peak_lr <= 0:
            yield "peak_lr", f"must be positive, got {self.peak_lr}"
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            yield "betas", f"must be two numbers in [0, 1), got {self.betas}"


@dataclass(kw_only=True, slots=True)
class RunGridSpec:
    objective: Literal["mlm", "clm", "clm-mlm"]
    """mlm, clm, or clm-mlm (CLM for clm_fraction of the steps, then MLM)."""
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
    """Warmup of this entry's schedule (default: pretraining.warmup_steps); the re-warmup of a CPT run."""
    decay_steps: int | None = None
    """Decay of this entry's schedule (default: pretraining.decay_steps)."""

    def check(self):
        if self.init_from is not None and self.objective != "mlm":
            yield "init_from", "continued pretraining is MLM: use objective: mlm with init_from"
        if self.init_from == []:
            yield "init_from", "empty grid: give at least one source or leave init_from out"
        for i, source in enumerate(self.init_from or []):
            if source.startswith("hf:") and len(source) == 3:
                yield f"init_from[{i}]", "give a path or model name after 'hf:'"
        for i, preset in enumerate(self.preset or []):
            if preset not in MODEL_PRESETS:
                yield f"preset[{i}]", f"unknown preset {preset!r}{suggestion(preset, list(MODEL_PRESETS))}"
        if self.preset == []:
            yield "preset", "empty grid: give at least one preset or leave preset out"
        for key in ("warmup_steps", "decay_steps"):
            if (getattr(self, key) or 0) < 0:
                yield key, f"must not be negative, got {getattr(self, key)}"
        for i, ratio in enumerate(self.mask_ratio):
            if not 0 < ratio < 1:
                yield f"mask_ratio[{i}]", f"{ratio} is outside (0, 1)"
        for i, share in enumerate(self.clm_fraction):
            if not 0 <= share <= 1:
                yield f"clm_fraction[{i}]", f"{share} is outside [0, 1]"
        for key in ("mask_ratio", "clm_fraction", "steps"):
            if getattr(self, key) == []:
                yield key, "empty grid: give at least one value"
        for i, steps in enumerate(self.steps or []):
            if steps <= 0:
                yield f"steps[{i}]", f"must be positive, got {steps}"
        for i, step in enumerate(self.checkpoint_steps):
            if step <= 0:
                yield f"checkpoint_steps[{i}]", f"must be positive, got {step}"


@dataclass(kw_only=True, slots=True)
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
    """AdamW settings."""
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
    compile: bool = False
    """torch.compile each transformer block (fixed shapes: compiled once per run); pays on GPU over
    long runs, not on a few hundred CPU steps (benchmarks/pretrain_throughput.py --compile)."""
    seed: int = 0
    """Weight-initialisation seed (the same for every run)."""

    def check(self):
        if not self.runs:
            yield "runs", "empty grid: give at least one run"
        for key in ("steps", "global_batch_size", "log_every"):
            if getattr(self, key) <= 0:
                yield key, f"must be positive, got {getattr(self, key)}"
        for key in ("warmup_steps", "decay_steps", "save_every"):
            if getattr(self, key) < 0:
                yield key, f"must not be negative, got {getattr(self, key)}"
        if not 0 <= self.random_replace + self.keep_original <= 1:
            yield "random_replace", "random_replace + keep_original must lie in [0, 1]"
        for i, run in enumerate(self.runs):
            budgets = run.steps or [self.steps]
            for j, step in enumerate(run.checkpoint_steps):
                if step >= min(budgets):
                    yield (f"runs[{i}].checkpoint_steps[{j}]",
                           f"step {step} is not before the run's budget of {min(budgets)} steps")
            warmup = self.warmup_steps if run.warmup_steps is None else run.warmup_steps
            decay = self.decay_steps if run.decay_steps is None else run.decay_steps
            for budget in budgets:
                if warmup + decay > budget:
                    yield f"runs[{i}].steps", (f"budget {budget} is shorter than warmup + decay steps "
                                               f"({warmup} + {decay})")


@dataclass(kw_only=True, slots=True)
class OptunaSpec:
    learning_rates_per_cell: int = 6
    """Learning rates Optuna tries per (checkpoint, task) cell; each is run with every seed."""
    lr_min: float = 1e-5
    """Lower end of the log-uniform learning-rate range."""
    lr_max: float = 5e-4
    """Upper end of the log-uniform learning-rate range."""
    seed: int = 0
    """Seed of the TPE sampler (one sampler per cell, seeded from this and the cell)."""
    startup_samples: int = 2
    """Random samples per cell before TPE models the results (Optuna's default of 10 would make
    a 6-sample search purely random)."""

    def check(self):
        if self.learning_rates_per_cell <= 0:
            yield "learning_rates_per_cell", f"must be positive, got {self.learning_rates_per_cell}"
        if self.startup_samples < 1:
            yield "startup_samples", f"must be at least 1, got {self.startup_samples}"
        if not 0 < self.lr_min < self.lr_max:
            yield "lr_min", f"need 0 < lr_min < lr_max, got {self.lr_min} and {self.lr_max}"


@dataclass(kw_only=True, slots=True)
class TaskBudgetSpec:
    max_steps: int | None = None
    """Optimizer steps per trial at most, for this task (None: finetuning.max_steps)."""
    epochs: float | None = None
    """Passes over this task's training split at most (None: finetuning.epochs)."""

    def check(self):
        if self.max_steps is not None and self.max_steps <= 0:
            yield "max_steps", f"must be positive, got {self.max_steps}"
        if self.epochs is not None and self.epochs <= 0:
            yield "epochs", f"must be positive, got {self.epochs}"


@dataclass(kw_only=True, slots=True)
class FinetuningSpec:
    tasks: list[str]
    """Task names (see `sweeper.catalog.TASKS`)."""
    search: Literal["grid", "optuna"] = "grid"
    """grid: every learning rate x seed; optuna: TPE over the learning rate per cell, seeds as repeats,
    objective = seed-averaged validation score."""
    learning_rates: list[float] = field(default_factory=lambda: [1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4])
    """Peak learning rates of the grid (search: grid)."""
    optuna: OptunaSpec = field(default_factory=OptunaSpec)
    """Learning-rate search per cell (search: optuna)."""
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
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    """AdamW betas."""
    eps: float = 1e-5
    """AdamW epsilon."""
    weight_decay: float = 0.1
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Gradient-norm clipping threshold."""
    eval_batch_size: int = 128
    """Examples per forward pass when scoring."""
    eval_every: int = 0
    """Also score validation every this many steps (the eval-curve table); 0: final weights only."""
    max_train_examples: int | None = None
    """Cap on training examples per task (None: the whole split)."""
    max_eval_examples: int | None = None
    """Cap on validation and test examples per task (None: whole splits)."""

    def check(self):
        for i, task in enumerate(self.tasks):
            if task not in TASKS:
                yield f"tasks[{i}]", f"unknown task {task!r}{suggestion(task, list(TASKS))}"
            elif TASKS[task].train_task and TASKS[task].train_task not in self.tasks:
                trained_on = TASKS[task].train_task
                yield f"tasks[{i}]", (f"{task!r} is an evaluation-only set scored with the model trained on "
                                      f"{trained_on!r}; add {trained_on!r} to tasks")
        for task in self.task_budgets:
            if task not in self.tasks:
                yield f"task_budgets.{task}", f"{task!r} is not in tasks{suggestion(task, self.tasks)}"
        if any(TASKS[t].family == "extractive_qa" for t in self.tasks if t in TASKS) and (
                not 0 <= self.doc_stride < self.max_length // 2):
            yield "doc_stride", (f"must be in [0, max_length / 2) so a window advances over a long context, "
                                 f"got {self.doc_stride} with max_length {self.max_length}")
        if self.retrieval_temperature <= 0:
            yield "retrieval_temperature", f"must be positive, got {self.retrieval_temperature}"
        for key in ("tasks", "learning_rates", "seeds"):
            if not getattr(self, key) and not (key == "learning_rates" and self.search == "optuna"):
                yield key, "empty grid: give at least one value"
        for i, lr in enumerate(self.learning_rates):
            if lr <= 0:
                yield f"learning_rates[{i}]", f"must be positive, got {lr}"
        if self.eval_every < 0:
            yield "eval_every", f"must not be negative, got {self.eval_every}"
        for key in ("batch_size", "micro_batch_size", "max_steps", "max_length", "eval_batch_size"):
            if getattr(self, key) <= 0:
                yield key, f"must be positive, got {getattr(self, key)}"
        if not 0 <= self.warmup_ratio < 1:
            yield "warmup_ratio", f"{self.warmup_ratio} is outside [0, 1)"
        if self.epochs <= 0:
            yield "epochs", f"must be positive, got {self.epochs}"


@dataclass(kw_only=True, slots=True)
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

    def check(self):
        if self.pretraining_workers < 0:
            yield "pretraining_workers", f"must not be negative, got {self.pretraining_workers}"
        for key in ("cpus_per_worker", "gpus_per_worker", "cpus_per_trial", "gpus_per_trial"):
            if getattr(self, key) < 0:
                yield key, f"must not be negative, got {getattr(self, key)}"
        if self.cpus_per_trial == 0 and self.gpus_per_trial == 0:
            yield "cpus_per_trial", "a trial needs some CPU or GPU"
        if self.trials_per_shard <= 0:
            yield "trials_per_shard", f"must be positive, got {self.trials_per_shard}"


@dataclass(kw_only=True, slots=True)
class CostSpec:
    gpu_peak_tflops: float = 989.0
    """Peak dense bf16 TFLOP/s of one GPU (H100 SXM: 989)."""
    utilization: float = 0.4
    """Model FLOPs utilisation assumed for the estimate (share of peak actually achieved)."""
    finetune_eval_examples: int = 5000
    """Validation + test examples scored per trial, for the estimate."""

    def check(self):
        if self.gpu_peak_tflops <= 0:
            yield "gpu_peak_tflops", f"must be positive, got {self.gpu_peak_tflops}"
        if not 0 < self.utilization <= 1:
            yield "utilization", f"{self.utilization} is outside (0, 1]"


@dataclass(kw_only=True, slots=True)
class TrackingSpec:
    wandb: bool = False
    """Also log pretraining curves and trial results to Weights & Biases (the Parquet store stays the record)."""
    project: str = "sweeper"
    """W&B project."""
    mode: Literal["online", "offline"] = "offline"
    """W&B mode; offline writes runs locally for `wandb sync`."""


@dataclass(kw_only=True, slots=True)
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
    tracking: TrackingSpec = field(default_factory=TrackingSpec)
    """Optional experiment tracking."""

    def check(self):
        if not self.study or "/" in self.study:
            yield "study", f"must be a non-empty name without '/', got {self.study!r}"
        if self.storage is not None and (problem := scheme_error(self.storage)):
            yield "storage", problem
        yield from self.check_references()

    def check_references(self):
        """CPT sources must be runs of this study (non-CPT ones, so the order is well defined)."""
        from sweeper.plan import expand_base_runs  # the same expansion the plan uses

        base_names = {run.name for run in expand_base_runs(self)}
        for i, grid in enumerate(self.pretraining.runs):
            for j, source in enumerate(grid.init_from or []):
                if not source.startswith("hf:") and source not in base_names:
                    yield (f"pretraining.runs[{i}].init_from[{j}]",
                           f"no run named {source!r} in this study{suggestion(source, sorted(base_names))}"
                           " (a study run name, or hf:<path> for a Hugging Face causal LM)")


def load_spec(path: str | Path) -> StudySpec:
    """Parse and validate a spec file; raises SpecError on any mistake."""
    data, context = load_yaml(path)
    return build_dataclass(StudySpec, data, "", context)


__all__ = ["StudySpec", "SpecError", "load_spec"]
