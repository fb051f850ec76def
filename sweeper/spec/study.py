"""The study spec: what a `search_spaces/*.yaml` file may say, as typed dataclasses.

`StudySpec` holds the sections (sweeper.spec.pretraining: model, data, pretraining;
sweeper.spec.finetuning: finetuning; resources, cost and tracking here) and does the checks that
span them; the checks that need the planned runs (run names, continued-pretraining sources)
are the plan's, made while the spec is loaded (sweeper.plan.load.load_study). Every field has a
one-line docstring; the shipped YAML files repeat them as comments. The spec is frozen: the plan
(sweeper.plan.study_plan) and the worker configs (sweeper.contract.configs) are derived from it,
never edited into it.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Literal

from sweeper.spec import names
from sweeper.contract.catalog import MODEL_PRESETS
from sweeper.contract.configs import TrackingConfig, non_negative, positive
from sweeper.spec.finetuning import FinetuningSpec
from sweeper.spec.ignored import ignored_settings
from sweeper.spec.limits import LimitsSpec, size_problems
from sweeper.spec.parsing import values_of
from sweeper.spec.model_data import DataSpec, ModelSpec
from sweeper.spec.pretraining import PretrainingSpec
from sweeper.spec.resources import RAY_GRANULARITY, custom_resource_problem, layout_problems
from sweeper.store.storage import folder_name_problem


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
    """Restarts of a pretraining run after errors (a crash, an exception), from its last
    checkpoint, before it is failed; preemption notices and lost nodes do not count."""
    max_preemptions: int = 20
    """Restarts of a pretraining run after preemption notices (SIGTERM, a drained node; each from
    the resume state saved at the notice) and lost nodes (local mode; from its last checkpoint),
    together, before it is failed; also the rounds that run fine-tuning trials stopped by SIGTERM,
    a preemption or a lost node again."""
    gpu_memory_gb: float = 80.0
    """Memory of one accelerator (H100: 80); `sweeper plan` checks every run's estimated peak
    per worker against it when workers use GPUs."""
    node_memory_gb: float | None = None
    """Host memory of one node (GB); `sweeper plan` checks the fp32 backbones each fine-tuning
    actor caches on its node against it (None: not checked)."""
    gpus_per_node: int = 8
    """GPUs of one node: with gpus_per_trial, how many fine-tuning actors share its host memory."""
    custom_resources_per_worker: dict[str, float] = field(default_factory=dict)
    """Custom Ray resources (a node's `ray start --resources`) each pretraining worker takes
    (the run's own process in local mode), e.g. {pretrain_node: 1}: runs go to such nodes only."""
    custom_resources_per_trial: dict[str, float] = field(default_factory=dict)
    """Custom Ray resources each fine-tuning trial takes, e.g. {trial_node: 1}: trials go to such nodes only."""

    def check(self):
        yield from non_negative(self, "pretraining_workers", "cpus_per_worker", "gpus_per_worker", "cpus_per_trial",
                                "gpus_per_trial", "max_failures", "max_preemptions")
        yield from positive(self, "gpu_memory_gb")
        if self.cpus_per_trial == 0 and self.gpus_per_trial == 0:
            yield "cpus_per_trial", "a trial needs some CPU or GPU"
        yield from positive(self, "trials_per_shard", "max_concurrent_trials", "node_memory_gb", "gpus_per_node")
        for key in ("custom_resources_per_worker", "custom_resources_per_trial"):
            for name, amount in getattr(self, key).items():
                if problem := custom_resource_problem(name):
                    yield f"{key}.{name}", problem
                elif not amount >= 0:
                    yield f"{key}.{name}", f"must not be negative, got {amount}"
                elif 0 < amount < RAY_GRANULARITY:
                    yield (
                        f"{key}.{name}",
                        f"{amount:g} is below the smallest amount Ray schedules ({RAY_GRANULARITY:g})",
                    )


PAPER_STABILITY_RANGE = (1e-5, 1e-4)
"""The paper's stability range (its Fig. 5 spreads over the learning rates 1e-5..1e-4)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ReportSpec:
    """What `sweeper report` reads beyond the results; never part of a run or trial key."""

    stability_lr_range: tuple[float, float] | None = None
    """Learning rates [low, high] the stability spread and finding 3's stability part pool over
    (the paper: [1.0e-5, 1.0e-4]); None: every rate of the study. The report names the range used."""
    finding_parts: Literal["co-primary", "holm"] = "co-primary"
    """How a finding's parts share its 5 % false-verdict rate (docs/statistics.md): `co-primary`, a
    part supports at 2.5 % one-sided with no split (the finding supports only when every part does:
    an intersection-union test) and contradicts by Holm over the parts at 2.5 %; `holm`, Holm over
    the parts' two-sided p-values at 5 % (the rule before #53). Also the rule a sequential plan's
    looks and `sweeper plan`'s expected cost follow."""

    def check(self):
        low_high = self.stability_lr_range
        if low_high is not None and (len(low_high) != 2 or not 0 < low_high[0] <= low_high[1]):
            yield "stability_lr_range", f"must be [low, high] with 0 < low <= high, got {list(low_high)}"


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
    pretraining: PretrainingSpec = field(default_factory=lambda: PretrainingSpec(runs=[]))
    """The pretraining grid (Ray Train); none in a study that only evaluates
    `finetuning.checkpoints` from elsewhere."""
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
    limits: LimitsSpec = field(default_factory=LimitsSpec)
    """Bounds on the plan's size (runs, checkpoints, trials, swept points, samples), checked first."""
    report: ReportSpec = field(default_factory=ReportSpec)
    """Settings of `sweeper report` (the stability range)."""
    protocol: Literal["paper"] | None = None
    """The published protocol this spec claims to follow (`paper`: arXiv 2507.00994, the table of
    docs/paper-protocol.md): `sweeper plan` then lists every setting that departs from it."""

    def __post_init__(self):  # the budget defaults follow the runs' presets (frozen: set once, here)
        presets = {preset for grid in self.pretraining.runs for preset in grid.preset or [self.model.preset]}
        object.__setattr__(self, "pretraining", self.pretraining.for_presets(presets))

    def check(self):
        if oversized := list(size_problems(self)):  # counted, not expanded: before any check below expands a grid
            yield from oversized
            return
        if problem := folder_name_problem(self.study):
            yield "study", problem
        if not self.pretraining.runs and not self.finetuning.checkpoints:
            yield "pretraining", ("nothing to fine-tune: give pretraining.runs (checkpoints the study trains) or "
                                  "finetuning.checkpoints (checkpoints from elsewhere), or both")
        if self.storage is not None and (problem := names.location_problem(self.storage)):
            yield "storage", problem
        if problem := folder_name_problem(self.tracking.project):  # W&B keeps a project as a folder too
            yield "tracking.project", problem
        yield from ((f"pretraining.{key}", reason) for key, reason in self.pretraining.budget_problems())
        if self.tracking.entity is not None and (problem := folder_name_problem(self.tracking.entity)):
            yield "tracking.entity", problem
        yield from ((f"resources.{key}", reason) for key, reason in layout_problems(self.resources))
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
                    swept = (
                        f" with {', '.join(f'{k}: {v}' for k, v in point.items())}"
                        if point != self.model.overrides
                        else ""
                    )
                    yield (
                        ("model.overrides" if self.model.overrides else "model.preset"),
                        f"preset {preset}{swept}: {problem}",
                    )
                    break
        yield from self.finetuning.sweep_problems()
        yield from ignored_settings(self)  # last: a setting no mode of the spec reads (sweeper.spec.ignored)
