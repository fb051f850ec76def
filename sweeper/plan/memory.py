"""Estimated peak accelerator memory of one pretraining worker and of one fine-tuning trial (no torch).

The estimate follows what `trainables.pretrain_loop` and `trainables.model` do: fp32 parameters
and AdamW state, bf16 autocast on CUDA (fp32 on CPU), one micro batch of `seq_len`-token rows
forward and backward at a time, logits only at the positions that carry a loss, and the
optimizer step once the micro batches' activations are gone. Bytes, per worker:

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
tests/unit/plan/test_memory_plan.py checks the CPU figure against torch):
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
The plan is checked against it in sweeper.plan.memory_check.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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
