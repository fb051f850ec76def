"""Memory as `sweeper plan` checks it (no torch): the estimated peak accelerator memory of one
pretraining worker and of one fine-tuning trial, the plan's check of both, and a node's
fine-tuning actors against its host memory.

The estimate (`estimate_peak`; a trial's, `estimate_trial_peak`) follows what
`trainables.pretrain_loop` and `trainables.model` do: fp32 parameters and AdamW state, bf16
autocast on CUDA (fp32 on CPU), one micro batch of `seq_len`-token rows forward and backward at
a time, logits only at the positions that carry a loss, and the optimizer step once the micro
batches' activations are gone. Bytes, per worker:

| term                 | cuda-bf16                                   | cpu-fp32                       |
|----------------------|---------------------------------------------|--------------------------------|
| weights              | 4 P (fsdp: 4 P / W)                         | 4 P (fsdp: 4 P / W)            |
| gradients            | 4 P (fsdp: 4 P / W; 4 P when it accumulates) | same                          |
| AdamW exp_avg, _sq   | 8 P (fsdp: 8 P / W)                         | same                           |
| DDP buckets          | 4 P with W > 1 workers under ddp            | same                           |
| FSDP gathered        | 4 P_root + 10 P_block (bf16 gathers)        | 8 P_root + 12 P_block          |
| bf16 weight copies   | 2 P_matmul (autocast's casts, kept for bw;  | 0                              |
|                      | fsdp: 0, its gathers are bf16)              |                                |
| block activations    | L T a (checkpointing: L T 4h + T a)         | same, with the CPU's `a`       |
| head + logits        | T 8h + S (2h + 16) + 12 V S                 | T 8h + S (4h + 16) + 12 V S    |
| shared per batch     | T (16 + 8 d) + T s                          | same                           |
| runtime              | 1 GB (CUDA context, cuBLAS/NCCL buffers)    | 0                              |
| step transient       | 4 P / W (foreach AdamW's sqrt buffer)       | 8 x the largest tensor         |

P: all parameters (embedding and the untied LM head included), P_root: those outside the blocks
(embedding, final norm, LM head), P_block: one block's, P_matmul: the Linear weights. W: workers.
L blocks, hidden h, FFN f, head size d, kv = kv heads x d, n heads, vocabulary V. T = micro batch
x seq_len tokens; S = tokens given logits (MLM: mask_ratio x T; CLM and unknown objectives: T).
`a`, the bytes one block keeps per token for its backward (counted from autograd's saved tensors,
tests/unit/plan/test_memory.py checks the CPU figure against torch):
- cuda-bf16: 32h + 4kv + 8f + 4n + 8 + 2s. The fp32 residual stream feeds two RMSNorms (input
  and x*rstd, 8h each); autocast casts the normed input once per Linear (q, k, v: 6h; gate, up:
  4h, bf16); attention keeps q, k, v, out in bf16 (2h + 4kv + 2h), o_proj its bf16 input (2h);
  the SwiGLU keeps gate, silu, up and their product (8f); 2s is SDPA's bf16 copy of the block
  mask when flash-attn is not installed or cannot run (kept: whether a worker has it is not known here).
- cpu-fp32: 32h + 8kv + 16f + 4n + 8 + 4s: the same tensors in fp32, the normed outputs saved
  once (no casts), each RMSNorm's output too (CPU runs the composite norm), and the boolean
  block mask turned into an fp32 bias by every block's SDPA call (4s).
The logits peak is the start of the backward pass: cross-entropy's fp32 log-softmax output, the
gradient nll_loss hands it and the gradient it returns, 3 x 4V bytes per predicted token (on CUDA
the bf16 logits and their float upcast, 6V, are gone by then). Gradients are counted whole next
to the activations (so from the second micro batch of a step on). The optimizer step runs after
the activations are freed: the peak is static + max(activations, step transient).
Under FSDP the activations are counted as unsharded training keeps them (fp32 residual stream):
FSDP2's bf16 policy casts each block's inputs to bf16, so this overstates them somewhat.

A run fits when its estimate is at most FIT_SHARE of the memory a worker has: what the model
leaves out (allocator fragmentation, kernels' workspaces, short-lived temporaries) needs room.

`sweeper plan`'s check (`check_runs`, `check_trials`, `summary`, `refusal`, `trial_refusal`):
every pretraining run against a worker's accelerator memory (`resources.gpu_memory_gb`), every
(model, task) pair of the fine-tuning grid against a trial's GPU share, the lines that summarise
them and the refusal that names the settings that would fit (the micro batches tried: the
batch's divisors, sweeper.plan.divisors), and a node's fine-tuning actors against its host
memory (`host_line`, `host_refusal`):

Fine-tuning trials run in reused Ray actors (sweeper.run.tune_grid: `reuse_actors=True`), and
each actor keeps the backbones it loaded in host memory (`trainables.backbones.cached_backbone`,
an LRU of CACHED_BACKBONES states, fp32 whatever dtype was saved, without the LM head) so that
the next trial of a checkpoint skips the load. A starting trial deep-copies its cached backbone
on the host before moving the copy to its GPU, so an actor holds up to CACHED_BACKBONES + 1 fp32
backbones at once: 3 x 4.75 GB at 1b. Fractional GPUs pack several actors on a GPU, so at
`gpus_per_trial: 0.25` an 8-GPU node runs 32 actors: ~300 GB of cached states at 1b, ~450 GB
while they start, which no GPU check sees.

The check counts those backbones of the largest backbone the grid fine-tunes for every actor a
node runs (gpus_per_node / gpus_per_trial, at most max_concurrent_trials) against HOST_FIT_SHARE
of `resources.node_memory_gb`. Left out: the process itself (Python, torch, CUDA's host side),
the prepared task data each actor caches (a few MB to a few hundred MB a task), the driver. Trials
on CPUs (gpus_per_trial 0) are not checked: how many a node runs depends on its CPUs, which the
spec does not state, and their training state is on the host too (see the trial estimate).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from math import gcd
from typing import Literal

from sweeper.contract.registry import family_of, get_task
from sweeper.plan.divisors import divisors, largest_fitting
from sweeper.plan.study_plan import task_points
from sweeper.spec.parsing import values_of

Device = Literal["cuda-bf16", "cpu-fp32"]

GB = 1e9
"""Decimal gigabytes throughout (`resources.gpu_memory_gb: 80` is an H100's 80 GB, ~79 GiB)."""
FIT_SHARE = 0.9
"""A run fits when its estimate is at most this share of a worker's accelerator memory."""
CUDA_RUNTIME_BYTES = 1 * GB
"""CUDA context, cuBLAS workspaces and NCCL buffers: outside PyTorch's tensors, inside the GPU."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSizes:
    """Parameter counts of one `LlamaEncoderForMaskedLM` config (sweeper.plan.cost counts the same)."""

    total: int
    root: int
    """Outside the blocks: embedding, final norm, LM head (FSDP2's root unit)."""
    block: int
    """One transformer block."""
    matmul: int
    """Linear weights (blocks and LM head): what autocast casts to bf16."""
    largest: int
    """The largest single tensor (the embedding or the LM head)."""

    @classmethod
    def of(cls, config: dict) -> ModelSizes:
        hidden, ffn = config["hidden_size"], config["intermediate_size"]
        head_dim = hidden // config["num_attention_heads"]
        kv = config["num_key_value_heads"] * head_dim
        attention = 2 * hidden * hidden + 2 * hidden * kv  # q, o and k, v projections
        block_matmul = attention + 3 * hidden * ffn
        block = block_matmul + 2 * hidden  # + two RMSNorm weights
        vocab_rows = config["vocab_size"] * hidden
        root = 2 * vocab_rows + hidden  # embedding + LM head (untied) + final norm
        layers = config["num_hidden_layers"]
        return cls(total=layers * block + root, root=root, block=block, matmul=layers * block_matmul + vocab_rows,
                   largest=max(vocab_rows, hidden * ffn))


@dataclass(frozen=True, kw_only=True, slots=True)
class MemorySetup:
    """How one worker trains a run: what the estimate depends on besides the model."""

    micro_batch_size: int
    """Sequences per forward pass on one worker."""
    seq_len: int
    predicted_share: float
    """Share of a micro batch's tokens given logits (MLM: the mask ratio; CLM: 1)."""
    workers: int = 1
    """Workers of the run's group (local mode: 1)."""
    accumulates: bool = False
    """Whether a step runs several micro batches on a worker (micro batch below its share of the batch)."""
    sharding: Literal["ddp", "fsdp"] = "ddp"
    activation_checkpointing: bool = False
    device: Device = "cuda-bf16"


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    terms: dict[str, float]
    """Bytes per term of the table above (the step transient is counted only when it is the peak)."""

    @property
    def peak(self) -> float:
        return sum(self.terms.values())

    @property
    def peak_gb(self) -> float:
        return self.peak / GB


def block_bytes_per_token(config: dict, seq_len: int, device: Device) -> float:
    """`a` of the table: what one block keeps for its backward pass, per token."""
    hidden, ffn, heads = config["hidden_size"], config["intermediate_size"], config["num_attention_heads"]
    kv = config["num_key_value_heads"] * (hidden // heads)
    if device == "cuda-bf16":
        return 32 * hidden + 4 * kv + 8 * ffn + 4 * heads + 8 + 2 * seq_len
    return 32 * hidden + 8 * kv + 16 * ffn + 4 * heads + 8 + 4 * seq_len


def estimate_peak(config: dict, setup: MemorySetup) -> MemoryEstimate:
    """Peak memory of one worker training a model of `config` (LlamaEncoderConfig fields)."""
    sizes = ModelSizes.of(config)
    hidden, vocab, layers = config["hidden_size"], config["vocab_size"], config["num_hidden_layers"]
    head_dim = hidden // config["num_attention_heads"]
    cuda = setup.device == "cuda-bf16"
    sharded = setup.sharding == "fsdp" and setup.workers > 1
    state_share = sizes.total / setup.workers if sharded else sizes.total
    terms = {"weights": 4 * state_share, "gradients": 4 * state_share, "adamw": 8 * state_share}
    if sharded and setup.accumulates:
        # FSDP2 without gradient sync (trainables.train_step, every micro batch but the last) keeps each
        # parameter's gradient unsharded in fp32 until the step's last micro batch reduce-scatters it:
        # the whole 4 P on every rank (measured on 2 gloo ranks: 4 P held, no sharded gradient yet).
        terms["gradients"] = 4 * sizes.total
    if setup.workers > 1 and not sharded:
        terms["ddp_buckets"] = 4 * sizes.total  # DDP's flat gradient buckets (not views of .grad)
    if sharded:
        # What a rank holds beside its 1/W shards (trainables.sharding: weights and optimizer state are
        # loaded once and distributed, so no rank ever holds the whole of either). The root unit
        # (embedding, final norm, LM head) stays gathered through forward and backward (FSDP2 does not
        # reshard the root after forward) and its gradient stays unsharded until the end of backward;
        # of the blocks, the running one and the prefetched next are gathered, and one block's
        # gradient is unsharded at a time. On CUDA (MixedPrecisionPolicy: bf16 gathers, fp32
        # reduction) a gathered parameter takes 2 bytes, an unsharded gradient 2 in bf16 plus its
        # 4-byte copy for the reduce-scatter (the root's copy is made at the end of backward, when
        # the activations are gone: not counted); on the CPU nothing is cast, 4 bytes each. The bf16
        # shard copies FSDP makes before each all-gather (2 bytes / W a parameter) are left out.
        terms["fsdp_gathered"] = (2 * sizes.root + 2 * 2 * sizes.block + 2 * sizes.root + (2 + 4) * sizes.block
                                  if cuda else 8 * sizes.root + 12 * sizes.block)
    if cuda:
        if not sharded:  # FSDP's gathered weights are bf16 already: autocast's casts of them copy nothing
            terms["bf16_weight_copies"] = 2 * sizes.matmul
        terms["cuda_runtime"] = CUDA_RUNTIME_BYTES
    tokens = setup.micro_batch_size * setup.seq_len
    predicted = setup.predicted_share * tokens
    per_block = block_bytes_per_token(config, setup.seq_len, setup.device)
    if setup.activation_checkpointing:
        # Only each block's fp32 input is kept; the block being recomputed holds its own.
        blocks = layers * tokens * 4 * hidden + tokens * per_block
    else:
        blocks = layers * tokens * per_block
    head = tokens * 8 * hidden + predicted * ((2 if cuda else 4) * hidden + 16)
    logits = 12 * vocab * predicted
    shared = tokens * (16 + 8 * head_dim) + tokens * setup.seq_len  # ids/positions, cos/sin, bool mask
    activations = blocks + head + logits + shared
    step = 4 * state_share if cuda else 8 * sizes.largest
    if step > activations:
        terms["optimizer_step"] = step
    else:
        terms.update(block_activations=blocks, head=head, logits=logits, shared=shared)
    return MemoryEstimate(terms)


# What `trainables.finetune_loop` holds on its device: the backbone without its LM head (the
# task head is a few thousand weights) in fp32 with gradients and AdamW state, autocast's bf16
# copies of the block weights, and the peak of one training micro batch (every row padded to
# max_length: the encoders lay rows out that way; a family may put several rows per example in a
# forward pass: a retrieval micro batch runs its queries and their documents, 2 x rows, both kept
# for the InfoNCE backward) or of one scoring batch
# (`eval_batch_size` rows under no_grad: about one block's activations at a time; retrieval
# moves each batch's embeddings to the CPU, so the pool's embeddings take no device memory),
# or of the optimizer step.
def estimate_trial_peak(config: dict, rows: int, max_length: int, eval_batch: int,
                        device: Device = "cuda-bf16") -> MemoryEstimate:
    """Peak memory of one fine-tuning trial of a model of `config` whose training forward pass
    runs `rows` rows (the micro batch x its family's `FamilyEstimate.forward_rows`)."""
    sizes = ModelSizes.of(config)
    hidden, vocab, layers = config["hidden_size"], config["vocab_size"], config["num_hidden_layers"]
    head_dim = hidden // config["num_attention_heads"]
    cuda = device == "cuda-bf16"
    params = sizes.total - vocab * hidden  # no LM head
    terms = {"weights": 4 * params, "gradients": 4 * params, "adamw": 8 * params}
    if cuda:
        terms["bf16_weight_copies"] = 2 * (sizes.matmul - vocab * hidden)  # block Linears only
        terms["cuda_runtime"] = CUDA_RUNTIME_BYTES
    per_block = block_bytes_per_token(config, max_length, device)

    def shared(tokens: int) -> float:  # ids/positions, cos/sin, the boolean mask
        return tokens * (16 + 8 * head_dim) + tokens * max_length

    train_tokens = rows * max_length
    training = layers * train_tokens * per_block + train_tokens * 8 * hidden + shared(train_tokens)
    eval_tokens = eval_batch * max_length
    scoring = eval_tokens * per_block + eval_tokens * 8 * hidden + shared(eval_tokens)
    step = 4 * params if cuda else 8 * sizes.largest
    peak = max(training, scoring, step)
    if peak == training:
        terms["activations"] = training
    elif peak == scoring:
        terms["scoring_batch"] = scoring
    else:
        terms["optimizer_step"] = step
    return MemoryEstimate(terms)


# --- `sweeper plan`'s check, pretraining: one run against a worker's memory -----------------

@dataclass(frozen=True, kw_only=True, slots=True)
class RunMemory:
    """One run's estimate against what a worker has."""

    run: str
    preset: str
    setup: MemorySetup | None
    """None: the model's size is known only at run time (a Hugging Face source)."""
    estimate: MemoryEstimate | None
    budget: float | None
    """Bytes a worker may use (FIT_SHARE of its GPU memory); None on CPU-only specs."""

    @property
    def fits(self) -> bool:
        return self.budget is None or self.estimate is None or self.estimate.peak <= self.budget


def study_device(spec) -> Device:
    """What the loop runs on: CUDA under bf16 autocast when workers have GPUs."""
    return "cuda-bf16" if spec.resources.gpus_per_worker > 0 else "cpu-fp32"


def worker_budget(spec) -> float | None:
    """A worker's usable accelerator memory: gpu_memory_gb x FIT_SHARE, scaled down when workers
    share a GPU (gpus_per_worker < 1); a worker with several GPUs trains on one."""
    gpus = spec.resources.gpus_per_worker
    return spec.resources.gpu_memory_gb * GB * min(1.0, gpus) * FIT_SHARE if gpus > 0 else None


def predicted_share(run) -> float:
    """The largest share of tokens any phase computes logits for (MLM: its mask ratio)."""
    return max(float(phase.settings.get("mask_ratio", 1.0)) for phase in run.phases)


def run_setup(spec, run) -> MemorySetup:
    workers = max(1, spec.resources.pretraining_workers)
    share = run.global_batch_size // workers
    micro = spec.pretraining.micro_batch_size or share
    return MemorySetup(micro_batch_size=micro, accumulates=micro < share, seq_len=run.seq_len,
                       predicted_share=predicted_share(run), workers=workers, sharding=spec.resources.sharding,
                       activation_checkpointing=spec.pretraining.activation_checkpointing,
                       device=study_device(spec))


def check_runs(spec, runs) -> list[RunMemory]:
    budget = worker_budget(spec)
    checked = []
    for run in runs:
        setup = run_setup(spec, run) if run.model_config else None
        estimate = estimate_peak(run.model_config, setup) if setup else None
        checked.append(RunMemory(run=run.name, preset=run.preset, setup=setup, estimate=estimate, budget=budget))
    return checked


def micro_batch_choices(spec) -> list[int]:
    """Micro batches the spec accepts, ascending: the divisors of a worker's share of the global
    batch (found from its prime factors: a share of 2^40 is not tried number by number)."""
    share = gcd(*values_of(spec.pretraining.global_batch_size)) // max(1, spec.resources.pretraining_workers)
    return divisors(max(1, share))


def largest_fitting_micro_batch(config: dict, setup: MemorySetup, choices: list[int], budget: float) -> int | None:
    """The largest of the ascending `choices` whose estimate fits `budget` (the estimate grows
    with the micro batch: a bisection)."""
    return largest_fitting(choices, lambda m: estimate_peak(config, replace(setup, micro_batch_size=m)).peak <= budget)


def fitting_settings(spec, runs) -> list[str]:
    """Settings that would make every run of `runs` fit (they share one spec, so one value each):
    the largest micro batch as things are, then with fsdp sharding, then with activation
    checkpointing, then with both; each with the largest micro batch that fits under it."""
    budget, choices = worker_budget(spec), micro_batch_choices(spec)
    known = [(run.model_config, run_setup(spec, run)) for run in runs if run.model_config]
    if budget is None or not known:
        return []
    workers = max(1, spec.resources.pretraining_workers)
    variants = [({}, "")]
    if workers > 1 and spec.resources.sharding != "fsdp":
        variants.append(({"sharding": "fsdp"}, "resources.sharding: fsdp"))
    if not spec.pretraining.activation_checkpointing:
        variants.append(({"activation_checkpointing": True}, "pretraining.activation_checkpointing: true"))
    if len(variants) == 3:
        variants.append(({"sharding": "fsdp", "activation_checkpointing": True},
                         "resources.sharding: fsdp + pretraining.activation_checkpointing: true"))
    lines = []
    for changes, words in variants:
        micros = [largest_fitting_micro_batch(config, replace(setup, **changes), choices, budget)
                  for config, setup in known]
        if None in micros:
            lines.append(f"{words or 'as set'}: does not fit even at micro batch 1")
            continue
        micro = min(micros)
        worst = max(estimate_peak(config, replace(setup, micro_batch_size=micro, **changes)).peak
                    for config, setup in known)
        setting = f"pretraining.micro_batch_size: {micro}"
        lines.append(f"{words + ' + ' if words else ''}{setting} (largest estimate {worst / GB:.1f} GB)")
    if workers <= 1:
        lines.append("resources.sharding: fsdp shards only over pretraining_workers > 1")
    return lines


def refusal(spec, checked: list[RunMemory], runs) -> str | None:
    """Why the plan cannot run on the accelerators it states (None: every run fits)."""
    failing = [memory for memory in checked if not memory.fits]
    if not failing:
        return None
    gpu = spec.resources.gpu_memory_gb * min(1.0, spec.resources.gpus_per_worker)
    lines = [f"{len(failing)} pretraining run(s) would not fit in a worker's GPU memory "
             f"(resources.gpu_memory_gb {spec.resources.gpu_memory_gb:g} x gpus_per_worker "
             f"{min(1.0, spec.resources.gpus_per_worker):g} = {gpu:g} GB; a run may use {FIT_SHARE:.0%}, "
             f"{failing[0].budget / GB:.1f} GB):"]
    groups: dict[tuple[str, str], list[str]] = {}  # runs with the same estimate share a line
    for memory in failing:
        groups.setdefault((f"{memory.estimate.peak_gb:.1f}", describe(memory.setup)), []).append(memory.run)
    lines += [
        f"  {', '.join(names)}: estimated {peak} GB per worker ({setup})" for (peak, setup), names in groups.items()
    ]
    names = {memory.run for memory in failing}
    lines.append("Settings that would make every such run fit:")
    lines += [f"  {line}" for line in fitting_settings(spec, [run for run in runs if run.name in names])]
    return "\n".join(lines)


def describe(setup: MemorySetup) -> str:
    return (f"micro batch {setup.micro_batch_size} x {setup.seq_len:,} tokens, {setup.workers} worker(s), "
            f"{setup.sharding if setup.workers > 1 else 'unsharded'}, activation checkpointing "
            f"{'on' if setup.activation_checkpointing else 'off'}, {setup.device}")


def summary(spec, checked: list[RunMemory]) -> list[str]:
    """`sweeper plan`'s memory lines: one per preset (range of its runs' estimates); `-v` adds
    each run's own figure to its run line (`run_figure`)."""
    if not checked:
        return []
    setup = next((memory.setup for memory in checked if memory.setup), None)
    budget = worker_budget(spec)
    against = (f"a run may use {FIT_SHARE:.0%} of resources.gpu_memory_gb "
               f"{spec.resources.gpu_memory_gb * min(1.0, spec.resources.gpus_per_worker):g} = {budget / GB:.1f} GB"
               if budget else "for information: the workers have no GPU")
    lines = [f"  estimated peak memory per worker ({describe(setup) if setup else study_device(spec)}; {against}):"]
    presets: dict[str, list[RunMemory]] = {}
    for memory in checked:
        presets.setdefault(memory.preset, []).append(memory)
    for preset, group in presets.items():
        peaks = [memory.estimate.peak_gb for memory in group if memory.estimate]
        count = f"{len(group)} run{'s' if len(group) > 1 else ''}"
        if not peaks:
            lines.append(f"    {preset:10s} {count:>8s}   sized at run time (a Hugging Face source)")
            continue
        spread = f"{min(peaks):.1f} GB" if max(peaks) - min(peaks) < 0.05 else f"{min(peaks):.1f}-{max(peaks):.1f} GB"
        failing = sum(not memory.fits for memory in group)
        verdict = "" if budget is None else ("  fit" if not failing else f"  {failing} do not fit")
        lines.append(f"    {preset:10s} {count:>8s}   {spread}{verdict}")
    return lines


def run_figure(memory: RunMemory) -> str:
    """The memory part of a run's `-v` line."""
    if memory.estimate is None:
        return "memory sized at run time"
    verdict = "" if memory.budget is None else (" (fits)" if memory.fits else " (DOES NOT FIT)")
    return f"memory {memory.estimate.peak_gb:.1f} GB per worker{verdict}"


# --- fine-tuning: one trial against its share of a GPU --------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class TrialMemory:
    """One (model, task) pair of the fine-tuning grid against what a trial may use."""

    preset: str
    config: dict
    """The preset's LlamaEncoderConfig fields."""
    task: str
    forward_rows: int
    """Rows one example puts in a training forward pass (its family's `FamilyEstimate.forward_rows`)."""
    rows: int
    """Rows per training forward pass: the micro batch x forward_rows (retrieval: queries and documents)."""
    estimate: MemoryEstimate
    budget: float | None
    """Bytes a trial may use (FIT_SHARE of its GPU share); None when trials run on CPUs."""

    @property
    def fits(self) -> bool:
        return self.budget is None or self.estimate.peak <= self.budget


def trial_budget(spec) -> float | None:
    """A trial's usable accelerator memory: gpus_per_trial (at most one GPU: the loop trains on
    one device) x gpu_memory_gb x FIT_SHARE."""
    gpus = spec.resources.gpus_per_trial
    return spec.resources.gpu_memory_gb * GB * min(1.0, gpus) * FIT_SHARE if gpus > 0 else None


def trial_device(spec) -> Device:
    return "cuda-bf16" if spec.resources.gpus_per_trial > 0 else "cpu-fp32"


def trial_shapes(spec, task: str) -> list[tuple[int, int]]:
    """(micro batch, max_length) of each distinct shape the task's trials take (swept batch sizes
    and lengths included), largest first."""
    micro = spec.finetuning.micro_batch_size
    shapes = {(min(micro, protocol.batch_size), protocol.max_length) for _, protocol in task_points(spec, task)}
    return sorted(shapes, key=lambda shape: shape[0] * shape[1], reverse=True)


def largest_shape(spec) -> tuple[int, int, int]:
    """(micro batch, max_length, batch size) at their largest over the grid's points: what the
    memory lines and the refusal name."""
    ft = spec.finetuning.at({})
    points = [spec.finetuning.at(point) for point in spec.finetuning.points()]
    return (max(min(ft.micro_batch_size, p.batch_size) for p in points), max(p.max_length for p in points),
            max(p.batch_size for p in points))


def check_trials(spec, checkpoints) -> list[TrialMemory]:
    """Every (architecture, task) pair of the grid, an architecture being a run's preset or a
    checkpoint from elsewhere (sized from its config.json): trials of one pair share their
    estimate, that of their largest shape (micro batch x max_length) when batch size or length
    is swept."""
    ft, budget, checked, seen = spec.finetuning, trial_budget(spec), [], set()
    for checkpoint in checkpoints:
        config = checkpoint.model_config
        label = checkpoint.run.preset if checkpoint.run is not None else checkpoint.external.name
        if not config or label in seen:
            continue
        seen.add(label)
        for task in ft.tasks:
            if get_task(task).train_task:  # scored inside its training task's trial
                continue
            forward_rows = family_of(get_task(task).family).estimate.forward_rows
            estimates = [(estimate_trial_peak(config, micro * forward_rows, length, ft.eval_batch_size,
                                              trial_device(spec)), micro) for micro, length in trial_shapes(spec, task)]
            estimate, micro = max(estimates, key=lambda pair: pair[0].peak)
            checked.append(TrialMemory(preset=label, config=config, task=task,
                                       forward_rows=forward_rows, rows=micro * forward_rows, estimate=estimate,
                                       budget=budget))
    return checked


def trial_summary(spec, checked: list[TrialMemory]) -> list[str]:
    """`sweeper plan`'s fine-tuning memory lines: per preset, the range over its tasks."""
    if not checked:
        return []
    budget = trial_budget(spec)
    against = (f"a trial may use {FIT_SHARE:.0%} of gpus_per_trial {min(1.0, spec.resources.gpus_per_trial):g} x "
               f"gpu_memory_gb {spec.resources.gpu_memory_gb:g} = {budget / GB:.1f} GB"
               if budget else "for information: trials have no GPU")
    micro, length, _ = largest_shape(spec)
    lines = [f"  estimated peak memory per fine-tuning trial (micro batch {micro} "
             f"x {length:,} tokens, {trial_device(spec)}; {against}):"]
    presets: dict[str, list[TrialMemory]] = {}
    for memory in checked:
        presets.setdefault(memory.preset, []).append(memory)
    for preset, group in presets.items():
        peaks = [memory.estimate.peak_gb for memory in group]
        spread = f"{min(peaks):.1f} GB" if max(peaks) - min(peaks) < 0.05 else f"{min(peaks):.1f}-{max(peaks):.1f} GB"
        failing = [memory.task for memory in group if not memory.fits]
        verdict = "" if budget is None else ("  fit" if not failing else f"  do not fit: {', '.join(failing)}")
        lines.append(f"    {preset:10s} {len(group):>3d} tasks   {spread}{verdict}")
    return lines + host_line(spec, checked)


def trial_refusal(spec, checked: list[TrialMemory]) -> str | None:
    """Why the fine-tuning grid cannot run: a trial above its GPU share, or a node's actors above
    its host memory (`host_refusal`); None when it can."""
    return gpu_refusal(spec, checked) or host_refusal(spec, checked)


def gpu_refusal(spec, checked: list[TrialMemory]) -> str | None:
    """Why the fine-tuning grid cannot run on the GPU share it states (None: every trial fits),
    with the settings that would fit."""
    failing = [memory for memory in checked if not memory.fits]
    if not failing:
        return None
    ft, budget = spec.finetuning, trial_budget(spec)
    largest_micro_batch, max_length, _ = largest_shape(spec)
    lines = [f"fine-tuning trials would not fit in their GPU share (resources.gpus_per_trial "
             f"{spec.resources.gpus_per_trial:g} x gpu_memory_gb {spec.resources.gpu_memory_gb:g}; a trial may use "
             f"{FIT_SHARE:.0%}, {budget / GB:.1f} GB) at finetuning.micro_batch_size "
             f"{largest_micro_batch} x max_length {max_length:,}:"]
    groups: dict[tuple[str, str, int], list[str]] = {}  # tasks with the same estimate share a line
    for memory in failing:
        groups.setdefault((memory.preset, f"{memory.estimate.peak_gb:.1f}", memory.rows), []).append(memory.task)
    lines += [f"  {preset} on {', '.join(tasks)}: estimated {peak} GB per trial ({rows} rows per forward pass)"
              for (preset, peak, rows), tasks in groups.items()]
    lines.append("Settings that would make every trial fit (the largest micro batch dividing batch_size):")
    # A micro batch must divide every swept batch size: the divisors of their gcd.
    batch_sizes = {spec.finetuning.at(point).batch_size for point in spec.finetuning.points()}
    choices = divisors(gcd(*batch_sizes))

    def largest_micro(gpus: float, eval_batch: int) -> int | None:
        room = spec.resources.gpu_memory_gb * GB * min(1.0, gpus) * FIT_SHARE
        return largest_fitting(choices, lambda m: all(
            estimate_trial_peak(memory.config, m * memory.forward_rows, max_length, eval_batch).peak <= room
            for memory in failing))

    for gpus in sorted({spec.resources.gpus_per_trial, 0.5, 1.0}):
        if gpus < spec.resources.gpus_per_trial:
            continue
        change = "" if gpus == spec.resources.gpus_per_trial else f"resources.gpus_per_trial: {gpus:g} + "
        for eval_batch in (ft.eval_batch_size, 32, 8):  # scoring batches of max_length rows can be the peak
            if eval_batch > ft.eval_batch_size or (micro := largest_micro(gpus, eval_batch)) is None:
                continue
            extra = "" if eval_batch == ft.eval_batch_size else f" + finetuning.eval_batch_size: {eval_batch}"
            lines.append(f"  {change}finetuning.micro_batch_size: {micro}{extra}")
            break
        else:
            lines.append(f"  {change or 'as set: '}does not fit even at micro batch 1 and eval batch 8 "
                         f"(a smaller finetuning.max_length)")
    return "\n".join(lines)


# --- a node's host memory: its fine-tuning actors' cached backbones -------------------------

CACHED_BACKBONES = 2
"""Backbone states an actor keeps (`trainables.backbones.cached_backbone`: lru_cache(maxsize=2))."""
HOST_FIT_SHARE = 0.6
"""Share of a node's memory its actors' backbones may take: Ray's object store takes 30 % of a
node's memory by default, and the OS, the raylet, the actors' processes and their task data need
the rest."""


def backbone_bytes(config: dict) -> float:
    """An fp32 backbone without its LM head (what `cached_backbone` keeps), in bytes."""
    return 4 * (ModelSizes.of(config).total - config["vocab_size"] * config["hidden_size"])


def actors_per_node(resources) -> int | None:
    """Fine-tuning actors one node runs at once (None: trials on CPUs, not known from the spec)."""
    if resources.gpus_per_trial <= 0:
        return None
    # Ray packs floor(GPUs / share) fractional trials on a node (the 1e-9 absorbs 8 / (8/3)).
    actors = math.floor(resources.gpus_per_node / resources.gpus_per_trial + 1e-9)
    return min(actors, resources.max_concurrent_trials or actors)


def largest_backbone(checked) -> tuple[str, float] | None:
    """(label, bytes) of the largest backbone among the grid's (model, task) pairs (TrialMemory)."""
    sizes = {memory.preset: backbone_bytes(memory.config) for memory in checked}
    return max(sizes.items(), key=lambda item: item[1]) if sizes else None


def host_need(spec, checked) -> tuple[int, str, float, float] | None:
    """(actors per node, backbone label, bytes per actor, bytes per node), or None when not known."""
    actors, largest = actors_per_node(spec.resources), largest_backbone(checked)
    if actors is None or largest is None:
        return None
    label, backbone = largest
    per_actor = (CACHED_BACKBONES + 1) * backbone
    return actors, label, per_actor, actors * per_actor


def host_line(spec, checked) -> list[str]:
    """`sweeper plan`'s host-memory line for the fine-tuning actors of one node."""
    need = host_need(spec, checked)
    if need is None:
        return []
    actors, label, per_actor, per_node = need
    res = spec.resources
    against = ("not checked: set resources.node_memory_gb" if res.node_memory_gb is None else
               f"{'fits' if per_node <= host_room(res) else 'DOES NOT FIT'} in {HOST_FIT_SHARE:.0%} of "
               f"node_memory_gb {res.node_memory_gb:g} = {host_room(res) / GB:,.0f} GB")
    return [f"  host memory of a node's fine-tuning actors: {actors} actors x {per_actor / GB:.1f} GB "
            f"({CACHED_BACKBONES} cached fp32 {label} backbones + a starting trial's copy) = "
            f"{per_node / GB:,.1f} GB; {against}"]


def host_room(resources) -> float:
    return resources.node_memory_gb * GB * HOST_FIT_SHARE


def host_refusal(spec, checked) -> str | None:
    """Why a node's fine-tuning actors would not fit its host memory, with what would (None: they
    fit, or nothing to check)."""
    res, need = spec.resources, host_need(spec, checked)
    if need is None or res.node_memory_gb is None or need[3] <= host_room(res):
        return None
    actors, label, per_actor, per_node = need
    fitting = int(host_room(res) // per_actor)
    lines = [f"fine-tuning actors would not fit in a node's host memory: {actors} trials at once per node "
             f"(resources.gpus_per_node {res.gpus_per_node} / gpus_per_trial {res.gpus_per_trial:g}"
             f"{', max_concurrent_trials ' + str(res.max_concurrent_trials) if res.max_concurrent_trials else ''}), "
             f"each holding up to {CACHED_BACKBONES + 1} fp32 {label} backbones ({CACHED_BACKBONES} cached by its "
             f"reused actor + the copy a starting trial makes, {per_actor / GB:.1f} GB): {per_node / GB:,.1f} GB, "
             f"above {HOST_FIT_SHARE:.0%} of resources.node_memory_gb {res.node_memory_gb:g} "
             f"({host_room(res) / GB:,.1f} GB; Ray's object store takes 30 %)."]
    if fitting == 0:
        lines.append("Not one trial's backbones fit: a node with more memory (resources.node_memory_gb).")
    else:
        lines.append(f"{fitting} trial(s) per node fit: resources.gpus_per_trial: "
                     f"{math.ceil(res.gpus_per_node / fitting * 1000) / 1000:g} (or more), or a node with "
                     f"at least {per_node / HOST_FIT_SHARE / GB:,.0f} GB (resources.node_memory_gb).")
    return "\n".join(lines)
