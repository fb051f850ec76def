"""Typed configurations that cross from the driver to Ray workers: a pretraining run, a trial,
a fine-tuning shard's trials.

Torch-free and Ray-free, so both sides import them: the driver builds them from the spec and
the plan, Ray pickles them as they are, and the worker loops read attributes, never string keys.
Every class is a frozen dataclass; `AdamWConfig` is reused by the spec (its fields are the
`pretraining.optimizer` and `finetuning` AdamW settings).

Keys: a run key and a trial key are SHA-256 hashes of the resolved configuration
(`stable_key`). What enters them is stated once, here (`FinetuneProtocol.key_fields`,
`trial_identity`) and in `sweeper.plan.study_plan` (runs), in the layout that earlier versions hashed, so
the keys of recorded cells never change with a refactor (tests/unit/plan/test_pinned_keys.py).
"""
from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass, field, fields, replace
from typing import ClassVar, Literal

# Re-exported (`X as X`): the spec imports the checks from here, and TaskInfo is named from here too.
from sweeper.contract.checks import (
    SEED_LIMIT as SEED_LIMIT, distinct as distinct, each_positive as each_positive, non_blank as non_blank,
    non_empty as non_empty, non_negative as non_negative, positive as positive, seeds as seeds,
)
from sweeper.contract.tasks import TaskInfo as TaskInfo


def canonical(value) -> str:
    """Canonical JSON (sorted keys, unknown types as str): what keys hash."""
    return json.dumps(value, sort_keys=True, default=str)


@functools.lru_cache(maxsize=65_536, typed=True)  # typed: 1, 1.0 and True write differently
def scalar_text(value: str | int | float | None) -> str:
    """`canonical` of a scalar, remembered: a plan writes the same names, run keys, steps, seeds
    and learning rates for thousands of trial keys."""
    return canonical(value)


def stable_key(payload: dict) -> str:
    """16 hex digits of SHA-256 over canonical JSON: equal configs, equal keys."""
    return hashlib.sha256(canonical(payload).encode()).hexdigest()[:16]


def stable_key_of_parts(parts: dict[str, str]) -> str:
    """`stable_key` of a dict whose values are given as their canonical JSON: json.dumps writes a
    dict as its sorted items joined by ', ' with ': ' after each key, so the text, and the key, are
    the same; a part that many payloads share (a task's definition, a protocol) is written once."""
    text = "{" + ", ".join(f"{scalar_text(name)}: {part}" for name, part in sorted(parts.items())) + "}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def params_text(params: dict | None) -> str:
    """A trial's swept values as canonical JSON (sorted keys, tuples as lists): the `params`
    column of the store, and the part of a cell that tells its points apart ('{}': none)."""
    return json.dumps(params or {}, sort_keys=True)


@dataclass(frozen=True, kw_only=True, slots=True)
class AdamWConfig:
    """AdamW with gradient-norm clipping; the learning rate comes from the schedule."""

    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW betas, each in [0, 1)."""
    eps: float = 1e-5
    """AdamW epsilon."""
    weight_decay: float = 0.1
    """AdamW weight decay (decoupled)."""
    grad_clip: float = 1.0
    """Gradient-norm clipping threshold."""

    def check(self):
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            yield "betas", f"must be two numbers in [0, 1), got {list(self.betas)}"
        yield from positive(self, "eps", "grad_clip")
        yield from non_negative(self, "weight_decay")

    @classmethod
    def of(cls, owner) -> AdamWConfig:
        """The AdamW settings of a spec section that carries them as its own fields."""
        return cls(**{f.name: getattr(owner, f.name) for f in fields(cls)})

    def torch_kwargs(self) -> dict:
        """Keyword arguments of `torch.optim.AdamW` (the clip is applied by the loop)."""
        return {"betas": tuple(self.betas), "eps": self.eps, "weight_decay": self.weight_decay}


@dataclass(frozen=True, kw_only=True, slots=True)
class CorpusConfig:
    """What shapes a prepared corpus (`trainables.corpus_prep.prepare_corpus`)."""

    source: str
    """Built-in `wordnet`, a local .jsonl/.parquet/.txt path, or a hub dataset id."""
    text_column: str = "text"
    tokenizer: str = "train-wordpiece"
    """`train-wordpiece` (trained on the corpus) or a Hugging Face tokenizer name or path."""
    vocab_size: int = 2048
    """Vocabulary size of a tokenizer trained here."""
    max_documents: int | None = None
    """Read at most this many documents (None: all)."""
    max_tokens: int | None = None
    """Stop the token stream at this many tokens (None: the whole source)."""
    tokenizer_sample_documents: int = 100_000
    """A trained tokenizer learns from the stream's first this many documents."""
    mask_token: str = "added"
    """A hub tokenizer without a mask token: `added` ([MASK], one more row) or `reserved` (its
    first reserved special token, vocabulary unchanged; `added` where it has none)."""


# --- pretraining -------------------------------------------------------------------------------

MIN_SAMPLE = 12
"""Shortest sample of `sample_lengths: variable` (`min_doc_size` of the authors' packer)."""

@dataclass(frozen=True, kw_only=True, slots=True)
class PhaseConfig:
    """One stretch of a run's steps trained with one objective."""

    objective: str
    """A registered objective (sweeper.contract.registry)."""
    loss: str
    """`module:function` of its loss on the worker side (resolved there, so a plugin objective
    needs no registration in the worker process)."""
    start_step: int
    """First step of the phase (0-based)."""
    end_step: int
    """First step after the phase."""
    settings: dict = field(default_factory=dict)
    """The objective's settings (MLM: mask_ratio, random_replace, keep_original)."""


def phase_at(phases: tuple[PhaseConfig, ...], step: int) -> PhaseConfig:
    """The phase 0-based `step` trains in (past the last phase's end: the last one). The worker
    trains by it (`PretrainConfig.phase_at`); the plan compares runs' steps by it
    (sweeper.plan.branches)."""
    for phase in phases:
        if phase.start_step <= step < phase.end_step:
            return phase
    return phases[-1]


@dataclass(frozen=True, kw_only=True, slots=True)
class InitSource:
    """Where a run's weights start."""

    kind: str
    """`scratch` (seeded random weights), `study` (a checkpoint folder of this study, weights
    only), `hf` (a Hugging Face causal LM, converted to the encoder) or `hf-native` (a Hugging
    Face causal LM trained as its own model, bidirectionally: trainables.causal_mlm)."""
    location: str | None = None
    """The checkpoint location (`study`) or the model path or name (`hf`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TrackingConfig:
    wandb: bool = False
    """Also log pretraining curves and trial results to Weights & Biases (the Parquet store stays the record)."""
    project: str = "sweeper"
    """W&B project."""
    entity: str | None = None
    """W&B entity (a user or team name); None: the logged-in user's default entity."""
    mode: Literal["online", "offline", "disabled"] = "offline"
    """W&B mode: online (needs `wandb login`), offline (files for `wandb sync`) or disabled (no-op)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PretrainConfig:
    """Everything one pretraining run's loop reads (`trainables.pretrain_loop`)."""

    name: str
    """Run name (`tiny-clm-150-mlm40-600`)."""
    run_key: str
    """Hash of everything that shapes the run's weights (sweeper.plan.runs); names its markers."""
    objective: str
    """The run's objective as rows and markers describe it (mlm, clm, clm-mlm, or the phases'
    objectives joined by '-')."""
    mask_ratio: float | None
    """The masking ratio of its last masking phase (None: it masks nothing)."""
    clm_fraction: float
    """Share of its steps trained with CLM."""
    switch_step: int
    """First step of its last phase (0 for a single-phase MLM run, total_steps for CLM)."""
    run_dir: str
    """The run's folder (a path or an object-store URI): checkpoints `step-<N>`, markers."""
    corpus_dir: str
    """The prepared corpus (tokenizer + token stream) this run reads."""
    model_config: dict
    """LlamaEncoderConfig fields (empty for a Hugging Face source: its own config)."""
    init: InitSource
    """Where the starting weights come from: scratch, a study checkpoint, or a Hugging Face causal LM."""
    phases: tuple[PhaseConfig, ...]
    """The objectives of the run in step order; together they cover [0, total_steps)."""
    total_steps: int
    """Steps this run trains (continued pretraining: the added steps)."""
    checkpoint_steps: tuple[int, ...]
    """Intermediate evaluated checkpoints; the final step is always saved too."""
    global_batch_size: int
    """Sequences per optimizer step, over all workers and micro-batches."""
    seq_len: int
    """Tokens per packed row."""
    sample_lengths: str = "fixed"
    """`fixed`: a row is one sample (positions and attention per document); `variable`: two
    samples of MIN_SAMPLE tokens or more (the authors' packer: trainables.corpus)."""
    peak_lr: float
    """Learning rate of the stable phase of the warmup-stable-decay schedule."""
    optimizer: AdamWConfig
    """AdamW's betas, eps, weight decay and gradient clip."""
    warmup_steps: int
    """Steps of linear warmup from 0 to peak_lr."""
    decay_steps: int
    """Final steps of decay from peak_lr to 0 (sweeper.contract.schedules.wsd_lr)."""
    seed: int
    """Weight initialisation and masking seed (a replicate's own: sweeper.plan.replicates.init_seed)."""
    data_seed: int
    """Sample-order seed of the corpus (the same for every run)."""
    replicate: int = 0
    """Which replicate of its configuration the run is: 0 reads the corpus in the study's order,
    r >= 1 in an order of its own (`trainables.corpus.PackedCorpus`)."""
    data_offset_steps: int = 0
    """Steps of data already seen by the starting checkpoint (continued runs read on)."""
    log_every: int = 100
    """Steps between progress lines and log rows (the loss is averaged over them)."""
    save_every: int = 1000
    """Steps between resume checkpoints (0: only the evaluated ones)."""
    workers: int = 0
    """Train workers (0: local mode, in the Ray task's process)."""
    threads: int = 1
    """torch intra-op threads per worker (its CPUs)."""
    sharding: str = "ddp"
    """How a worker group shares the model: `ddp` (replicated) or `fsdp` (FSDP2, sharded)."""
    micro_batch_size: int | None = None
    """Sequences per forward pass on one worker (None: its whole share of the global batch)."""
    activation_checkpointing: bool = False
    """Recompute each block's activations in the backward pass (less memory, ~1/3 more compute)."""
    keep_resume_checkpoints: int = 1
    """Resume-only checkpoints kept; evaluated ones are always kept (optimizer state dropped
    once the run is past them)."""
    compile: bool = False
    """torch.compile each block."""
    lm_loss: str = "auto"
    """The LM head's loss: `auto`, `fused` or `reference` (trainables.lm_loss.head_loss_for)."""
    use_gpu: bool = False
    """Train on a CUDA device (bf16 autocast) when one is there."""
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    """Experiment tracking (W&B), from rank 0 only."""
    branch_from: str | None = None
    """The checkpoint folder, at `branch_step`, of the run this one shares its first steps with
    (sweeper.plan.branches): a run with no checkpoint of its own starts there (weights, optimizer
    state, step) instead of from scratch; its log starts at that step."""
    branch_step: int = 0
    """The step `branch_from` was saved at (0: the run trains from its own start)."""
    branch_steps: tuple[int, ...] = ()
    """Steps other runs branch from this one at: saved there with their training state kept."""

    def phase_at(self, step: int) -> PhaseConfig:
        return phase_at(self.phases, step)

    def tokens_seen(self, step: int) -> int:
        """Pretraining tokens behind step `step`, those of the starting checkpoint included."""
        return (self.data_offset_steps + step) * self.global_batch_size * self.seq_len


# --- fine-tuning -------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class FinetuneProtocol:
    """The settings a trial's outcome depends on, resolved for its task (budget and family
    settings applied). `learning_rate` is a field like the others: a searched value replaces it."""

    learning_rate: float | None
    """Peak learning rate (None in a plan whose search proposes it at run time)."""
    batch_size: int
    max_steps: int
    epochs: float
    max_length: int
    warmup_ratio: float
    optimizer: AdamWConfig
    max_train_examples: int | None = None
    max_eval_examples: int | None = None
    family_settings: dict = field(default_factory=dict)
    """The settings the task's family declares (`FamilyInfo.settings`), e.g. QA's doc_stride."""
    precision: Literal["fp32", "bf16"] = "fp32"
    """fp32: float32 weights and AdamW state, forward passes under bf16 autocast on a GPU (float32
    on a CPU); bf16: the weights themselves, and so AdamW's state, in bfloat16."""
    weight_decay_exempt: Literal["none", "bias_and_norm"] = "none"
    """Parameters AdamW does not decay: none (all of them decay); bias_and_norm: biases and
    normalisation weights (LayerNorm, RMSNorm), as the Hugging Face Trainer's AdamW."""
    scoring: Literal["standard", "paper"] = "standard"
    """standard: each family's usual labels, inputs and metric; paper: the authors' (EncodEval's)
    labels, inputs and metric where a family implements them (docs/paper-protocol.md)."""

    KEYED_IF_SET: ClassVar = {"precision": "fp32", "weight_decay_exempt": "none", "scoring": "standard"}
    """Fields hashed only when they differ from these defaults (what every trial ran with before
    they existed), so the keys of earlier trials stay."""

    def key_fields(self) -> dict:
        """What trial keys hash: every field but the learning rate (hashed beside the seed),
        the AdamW settings and family settings flattened in (the layout pinned trial keys hash),
        and each KEYED_IF_SET field away from its default."""
        return {"batch_size": self.batch_size, "max_steps": self.max_steps, "epochs": self.epochs,
                "max_length": self.max_length, "warmup_ratio": self.warmup_ratio, **asdict(self.optimizer),
                "max_train_examples": self.max_train_examples, "max_eval_examples": self.max_eval_examples,
                **self.family_settings,
                **{name: getattr(self, name) for name, default in self.KEYED_IF_SET.items()
                   if getattr(self, name) != default}}

    @property
    def in_batch_negatives(self) -> int:
        """Negatives per query of an in-batch contrastive loss (retrieval): every other pair of the
        optimizer step's batch, whatever `micro_batch_size` is (`trainables.tasks.gradcache`)."""
        return self.batch_size - 1


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialRuntime:
    """How a trial runs, not what it computes: never part of a key."""

    micro_batch_size: int = 32
    """Examples per forward pass (gradient accumulation to batch_size; retrieval's loss is
    gradient-cached, so its in-batch negatives are the whole batch's either way)."""
    eval_batch_size: int = 128
    eval_every: int = 0
    """Validation every this many steps (the eval-curve table); 0: final weights only."""
    threads: int = 1
    packing: bool = True
    """Examples packed into rows (document-aware attention) so compute follows real tokens; off:
    every example padded to max_length (the reference the packed path equals)."""
    keep_predictions: bool = False
    """Return each evaluated example's prediction and gold with the scores (the store's
    `predictions` table)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CompanionSet:
    """An evaluation-only set scored with the trial's trained weights (retrieval's NQ, MLDR)."""

    trial_key: str
    task_data_dir: str


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialConfig:
    """Everything one fine-tuning trial reads (`trainables.finetune_loop.run_trial`)."""

    trial_key: str
    task: TaskInfo
    family: str
    """`module:Class` of the task family's implementation (resolved on the worker)."""
    protocol: FinetuneProtocol
    seed: int
    checkpoint_path: str | None
    """The backbone checkpoint folder; None trains the random-weights control."""
    task_data_dir: str
    """The task tokenised once for this tokenizer and length (sweeper.run.task_prep)."""
    runtime: TrialRuntime = field(default_factory=TrialRuntime)
    companions: tuple[CompanionSet, ...] = ()
    random_init_config: dict | None = None
    """Architecture of the random-weights control (with checkpoint_path None)."""
    params: dict = field(default_factory=dict)
    """The swept protocol fields' values at this trial's point (sweeper.plan.study_plan.Trial.params); the
    protocol holds them already, this says which were swept."""

    @property
    def learning_rate(self) -> float:
        return self.protocol.learning_rate


def with_values(protocol: FinetuneProtocol, values: dict) -> FinetuneProtocol:
    """`protocol` with some fields set (field -> value, as `FinetuningSpec` names them): its own
    fields, the AdamW settings, the family's settings."""
    own, adamw = {f.name for f in fields(FinetuneProtocol)}, {f.name for f in fields(AdamWConfig)}
    return replace(protocol, **{k: v for k, v in values.items() if k in own},
                   optimizer=replace(protocol.optimizer, **{k: v for k, v in values.items() if k in adamw}),
                   family_settings={**protocol.family_settings,
                                    **{k: v for k, v in values.items() if k in protocol.family_settings}})


def protocol_at_point(protocol: FinetuneProtocol, params: dict, point: dict) -> tuple[FinetuneProtocol, dict]:
    """A searched trial's protocol and `params` at the point its cell's search picked (the point
    names the rate `learning_rate`, as the protocol does): the fields in `params` take the point's
    values; a point's field that does not reach the trial's task (an evaluation-only set) is left out.
    The driver plans with it (sweeper.plan.study_plan.at_point), the workers build with it (`SearchedCell`)."""
    params = {name: point[name] for name in params if name in point}
    return with_values(protocol, {"learning_rate": point["learning_rate"], **params}), params


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchedCell:
    """An Optuna cell's planned trials, as the workers build them at the point its search picks:
    the protocol and `params` take the point's values, the task data is the folder prepared for the
    point's data fields (sweeper.run.shards.OptunaShard.for_workers computes the folders on the driver)."""

    trials: tuple[tuple[TrialConfig, ...], ...]
    """[sample][seed index] -> the trial at the plan's point (its learning rate None)."""
    data_fields: tuple[str, ...] = ()
    """The cell's searched fields that choose its prepared task data (max_length, a family's
    encoding settings: each a choice, tokenised per value before the search)."""
    data_dirs: dict[tuple, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    """The data fields' values (in `data_fields` order; () when none is searched) -> the trial's
    task data folder and each companion's, in `companions` order."""

    def at(self, sample: int, seed_index: int, point: dict) -> TrialConfig:
        planned = self.trials[sample][seed_index]
        protocol, params = protocol_at_point(planned.protocol, planned.params, point)
        task_data_dir, companion_dirs = self.data_dirs[tuple(point[name] for name in self.data_fields)]
        companions = tuple(replace(companion, task_data_dir=folder)
                           for companion, folder in zip(planned.companions, companion_dirs, strict=True))
        return replace(planned, protocol=protocol, params=params, task_data_dir=task_data_dir,
                       companions=companions)


@dataclass(frozen=True, kw_only=True, slots=True)
class ShardTrials:
    """What a fine-tuning shard ships to its workers (`tune.with_parameters`, once per shard): the
    config of every trial Tune's config may locate in it, and nothing of the planning around it
    (docs/architecture.md: only these types cross). Tune keeps each trial's config in its
    experiment state, so the config stays a location (sweeper.run.search) and this turns it into
    the trial's `TrialConfig`."""

    trials: dict[int, TrialConfig] = field(default_factory=dict)
    """Grid and random shards: `trial_index` -> the planned trial's config."""
    cells: dict[int, SearchedCell] = field(default_factory=dict)
    """Optuna shards: `cell` -> its trials, built at the point the search picks."""

    def config_at(self, config: dict) -> TrialConfig:
        """The trial Tune's `config` locates: `trial_index`, or `cell`, `sample`, `seed_index`, `point`."""
        if "trial_index" in config:
            return self.trials[config["trial_index"]]
        return self.cells[config["cell"]].at(config["sample"], config["seed_index"], config["point"])


def trial_identity(run_key: str, step: int, task: TaskInfo, protocol: FinetuneProtocol, seed: int,
                   search: dict | None = None, sample: int | None = None) -> dict:
    """What a trial key hashes: the checkpoint (run key, step), the task's definition, the
    protocol, and the learning rate and seed (grid) or the search and sample number (Optuna)."""
    cell = {"run_key": run_key, "step": step, "task": task.identity(), "protocol": protocol.key_fields()}
    if search is None:
        return {**cell, "lr": protocol.learning_rate, "seed": seed}
    return {**cell, "search": search, "sample": sample, "seed": seed}


def trial_key(run_key: str, step: int, task_text: str, protocol_text: str, seed: int, *,
              learning_rate: float | None = None, search_text: str | None = None, sample: int | None = None) -> str:
    """`stable_key(trial_identity(...))` from the canonical JSON of the task's identity and of the
    protocol's key fields (and of the search), each written once per task and protocol rather than
    once per trial: a plan of 165,000 trials keys them in seconds, not a minute. The layout is
    trial_identity's; tests/unit/contract/test_configs.py holds the two equal."""
    # trial_identity's keys in sorted order, as json.dumps(sort_keys=True) writes them (`stable_key_of_parts`),
    # spelled out: this runs once per trial
    tail = f'"seed": {scalar_text(seed)}, "step": {scalar_text(step)}, "task": {task_text}}}'
    if search_text is None:
        text = (
            f'{{"lr": {scalar_text(learning_rate)}, "protocol": {protocol_text}, "run_key": {scalar_text(run_key)}, '
            + tail
        )
    else:
        text = (f'{{"protocol": {protocol_text}, "run_key": {scalar_text(run_key)}, "sample": {scalar_text(sample)}, '
                f'"search": {search_text}, ' + tail)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
