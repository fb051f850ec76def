"""The one backbone of the study: a Llama-style transformer whose attention is a forward argument.

MLM, CLM and biphasic runs all train this exact module; only `causal=` differs between
objectives, so every checkpoint has the same architecture and the same `config.json`
(the paper's central control). Parameter names follow Hugging Face's Llama
(`model.layers.N.self_attn.q_proj`, ...) so a Llama-family causal LM maps in by name for
continued pretraining.

Importing this module as `trainables.model` registers the architecture with the Auto classes,
so `AutoModel.from_pretrained(checkpoint)` works with no `trust_remote_code`; that locally
registered class is the one loaded even when a caller passes `trust_remote_code=True`.

Checkpoints others can load: the classes are also registered for transformers' custom-code
mechanism (`register_for_auto_class`), so `save_pretrained` copies this file next to the
weights and writes `auto_map` into config.json, and a process without this package loads the
checkpoint with `AutoModel.from_pretrained(path, trust_remote_code=True)` (or
AutoModelForMaskedLM) by running the copy. This file must therefore stay self-contained:
imports of the standard library, torch and transformers only, no project module, and no
import statement of an optional package (transformers' loader would require it installed;
flash-attn is imported with `importlib` below). tests/unit/trainables/test_shared_checkpoints.py checks it.
"""
from __future__ import annotations

import importlib
import warnings
from typing import NamedTuple
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    PretrainedConfig,
    PreTrainedModel,
)
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutput, MaskedLMOutput

MODEL_TYPE = "llama_encoder"
_MODULE = __name__.rsplit(".", 1)[-1]  # "model", here and in the copy saved with a checkpoint
AUTO_MAP = {
    "AutoConfig": f"{_MODULE}.LlamaEncoderConfig",
    "AutoModel": f"{_MODULE}.LlamaEncoderModel",
    "AutoModelForMaskedLM": f"{_MODULE}.LlamaEncoderForMaskedLM",
}
"""config.json's `auto_map`: the class of this file each Auto class builds from a shared checkpoint.
`save_pretrained` writes only the saved class's own entry, so the config carries all three (a
checkpoint saves the masked LM; colleagues load its backbone with AutoModel too)."""


class LlamaEncoderConfig(PretrainedConfig):
    """Architecture hyper-parameters (paper Table 1 names; defaults are a tiny CPU model)."""

    model_type = MODEL_TYPE

    def __init__(
        self,
        vocab_size: int = 2048,
        hidden_size: int = 128,
        intermediate_size: int = 512,
        num_hidden_layers: int = 4,
        num_attention_heads: int = 4,
        num_key_value_heads: int = 4,
        max_position_embeddings: int = 2048,
        rms_norm_eps: float = 1e-5,
        rope_theta: float = 10_000.0,
        initializer_range: float = 0.02,
        pad_token_id: int = 0,
        mask_token_id: int = 4,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.max_position_embeddings = max_position_embeddings
        self.rms_norm_eps = rms_norm_eps
        self.rope_theta = rope_theta
        self.initializer_range = initializer_range
        self.mask_token_id = mask_token_id
        kwargs.setdefault("tie_word_embeddings", False)  # the paper's LM head is untied
        kwargs.setdefault("auto_map", dict(AUTO_MAP))  # a loaded config keeps the one it was saved with
        super().__init__(pad_token_id=pad_token_id, **kwargs)


def rotary_tables(position_ids: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """cos/sin of shape (batch, 1, seq, head_dim) for the given integer positions."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=position_ids.device).float() / head_dim))
    angles = position_ids.float()[..., None] * inv_freq  # (batch, seq, head_dim / 2)
    angles = torch.cat((angles, angles), dim=-1)[:, None]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def build_attention_mask(
    attention_mask: torch.Tensor | None,
    document_ids: torch.Tensor | None,
    causal: bool,
    seq_len: int,
    device: torch.device,
) -> tuple[torch.Tensor | None, bool]:
    """Boolean SDPA mask (batch, 1, q, k) where True = may attend, or None plus an is_causal flag.

    Padding hides keys; document ids keep packed documents from seeing each other; `causal`
    hides the future. With none of them SDPA needs no mask at all (its fastest path).
    """
    if attention_mask is None and document_ids is None:
        return None, causal
    allowed = torch.ones(1, 1, seq_len, seq_len, dtype=torch.bool, device=device)
    if causal:
        allowed = allowed & torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()
    if document_ids is not None:
        allowed = allowed & (document_ids[:, None, :, None] == document_ids[:, None, None, :])
    if attention_mask is not None:
        allowed = allowed & attention_mask.bool()[:, None, None, :]
        # A query row with no visible key (a padding position) would give NaN; let it see itself.
        allowed = allowed | torch.eye(seq_len, dtype=torch.bool, device=device)
    return allowed, False


FLASH_DTYPES = (torch.float16, torch.bfloat16)
"""The dtypes flash-attn 2's kernels compute in; a float32 pass (numerics checks) stays on SDPA."""


class Varlen(NamedTuple):
    """What a block needs to run packed rows through flash-attn's varlen kernel."""

    kernel: Callable
    """`flash_attn.flash_attn_varlen_func`, as decided usable for this process (`FlashChoice`)."""
    cu_seqlens: torch.Tensor
    """int32 cumulative lengths of the documents of the flattened (batch x seq) rows, on the device."""
    dtype: torch.dtype
    """The kernel's dtype (the autocast dtype): q/k/v are float32 after rotary under autocast."""


def varlen_segments(document_ids: torch.Tensor) -> torch.Tensor:
    """Packed rows -> flash-attn's varlen layout: int32 cumulative lengths of the documents of
    the flattened (batch x seq) tokens. A document never spans two rows (a row boundary always
    starts a new segment). Meant for host tensors, where the batch is built (trainables.corpus,
    trainables.tasks.packing): on a GPU tensor `nonzero` waits for the GPU to count them."""
    batch, seq = document_ids.shape
    starts = torch.ones_like(document_ids, dtype=torch.bool)
    starts[:, 1:] = document_ids[:, 1:] != document_ids[:, :-1]
    positions = torch.nonzero(starts.flatten(), as_tuple=True)[0]
    return torch.cat([positions, positions.new_tensor([batch * seq])]).to(torch.int32)


def flash_capable(device: torch.device) -> bool:
    """A GPU flash-attn 2 runs on: CUDA, compute capability 8.0 (Ampere) or newer."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0)


def compute_dtype(hidden: torch.Tensor) -> torch.dtype:
    """The dtype the attention computes in: the autocast dtype where autocast is on, else the model's."""
    device_type = hidden.device.type
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else hidden.dtype


class FlashChoice:
    """Whether flash-attn's varlen kernel serves this process, decided once (the first packed
    forward that could use it) and kept: flash-attn where it imports and a first call, forward
    and backward on a tiny batch, runs on this GPU; else SDPA with a block mask, with one
    warning for the process. The call is tried because an import is not enough: a wheel built
    for another torch fails at import ("undefined symbol"), but an unsupported GPU or dtype only
    when a kernel launches, and inside a compiled block a failing kernel could not fall back."""

    def __init__(self):
        self.decided = False
        self.kernel: Callable | None = None

    def refuse(self, reason: str) -> None:
        if not self.decided:
            self.decided, self.kernel = True, None
            warnings.warn(f"flash-attn not used ({reason}): packed batches run SDPA with a block mask",
                          RuntimeWarning, stacklevel=2)

    @torch.compiler.disable
    def kernel_for(self, device: torch.device, dtype: torch.dtype, config: LlamaEncoderConfig) -> Callable | None:
        if self.decided:
            return self.kernel
        try:
            # Not an import statement: transformers' custom-code loader would demand flash-attn.
            kernel = importlib.import_module("flash_attn").flash_attn_varlen_func
        except ModuleNotFoundError as missing:  # flash-attn's own module, or one it needs
            self.refuse("not installed" if missing.name == "flash_attn" else f"import failed: {missing}")
            return None
        except Exception as broken:
            self.refuse(f"import failed: {type(broken).__name__}: {broken}")
            return None
        try:
            probe_kernel(kernel, device, dtype, config)
        except Exception as failed:
            self.refuse(f"a first call failed: {type(failed).__name__}: {failed}")
            return None
        self.decided, self.kernel = True, kernel
        return kernel


FLASH_CHOICE = FlashChoice()
"""This process's decision (a worker runs one device)."""


def probe_kernel(kernel: Callable, device: torch.device, dtype: torch.dtype, config: LlamaEncoderConfig) -> None:
    """One forward and backward of `kernel` on two short documents with the model's heads;
    raises what the kernel raises. Constant inputs: no draw from the global RNG."""
    head_dim = config.hidden_size // config.num_attention_heads
    cu_seqlens = torch.tensor([0, 3, 8], dtype=torch.int32, device=device)
    with torch.inference_mode(False), torch.enable_grad(), torch.autocast(device.type, enabled=False):
        q, k, v = (torch.full((8, heads, head_dim), 0.5, dtype=dtype, device=device, requires_grad=True)
                   for heads in (config.num_attention_heads, config.num_key_value_heads, config.num_key_value_heads))
        out = kernel(q, k, v, cu_seqlens, cu_seqlens, 5, 5, causal=True)
        torch.autograd.grad(out.float().sum(), (q, k, v))
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # a kernel's error surfaces here, not in a later step


def flash_kernel_for(hidden: torch.Tensor, attention_mask, document_ids, config: LlamaEncoderConfig):
    """flash-attn's varlen kernel for packed batches (no padding to mask) computed in fp16/bf16
    on a GPU it runs on (see `FlashChoice`), else None: SDPA with a block mask (CPU, padded
    fine-tuning batches, float32 passes, or a flash-attn that cannot run)."""
    if document_ids is None or attention_mask is not None:
        return None
    dtype = compute_dtype(hidden)
    if dtype not in FLASH_DTYPES:
        return None
    if not flash_capable(hidden.device):
        if hidden.is_cuda:
            major, minor = torch.cuda.get_device_capability(hidden.device)
            FLASH_CHOICE.refuse(f"compute capability {major}.{minor}; flash-attn 2 needs 8.0 or newer")
        return None
    return FLASH_CHOICE.kernel_for(hidden.device, dtype, config)


class Attention(nn.Module):
    def __init__(self, config: LlamaEncoderConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, hidden, cos, sin, mask, is_causal, varlen=None):
        batch, seq, _ = hidden.shape
        q = self.q_proj(hidden).view(batch, seq, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden).view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden).view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if varlen is not None:  # packed documents as separate sequences: no mask, no wasted FLOPs
            flat = [t.transpose(1, 2).reshape(batch * seq, t.shape[1], self.head_dim).to(varlen.dtype)
                    for t in (q, k, v)]
            # The longest document is at most a row (`seq`): flash-attn sizes its launch grid by this
            # bound and reads each document's true length from cu_seqlens. Taking the bound, not the
            # batch's maximum, costs no device-to-host sync and gives compiled blocks no Python int
            # that changes from batch to batch (a recompile each time).
            out = varlen.kernel(*flat, varlen.cu_seqlens, varlen.cu_seqlens, seq, seq, causal=is_causal)
            return self.o_proj(out.reshape(batch, seq, -1).to(hidden.dtype))
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=is_causal,
            enable_gqa=self.num_kv_heads != self.num_heads,
        )
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, -1))


class SwiGLU(nn.Module):
    def __init__(self, config: LlamaEncoderConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(GradientCheckpointingLayer):
    """Pre-norm attention + SwiGLU. A `GradientCheckpointingLayer`: after
    `model.activation_checkpointing_enable()` its forward is recomputed in the backward pass
    (torch.utils.checkpoint, non-reentrant) instead of keeping its activations; FSDP2's hooks
    stay outside the checkpoint."""

    def __init__(self, config: LlamaEncoderConfig):
        super().__init__()
        self.input_layernorm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = SwiGLU(config)

    def forward(self, hidden, cos, sin, mask, is_causal, varlen=None):
        hidden = hidden + self.self_attn(self.input_layernorm(hidden), cos, sin, mask, is_causal, varlen)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class LlamaEncoderPreTrainedModel(PreTrainedModel):
    config_class = LlamaEncoderConfig
    base_model_prefix = "model"
    _no_split_modules = ["Block"]
    # Hugging Face's switch (`activation_checkpointing_enable`): pretraining and fine-tuning alike.
    supports_gradient_checkpointing = True


class LlamaEncoderModel(LlamaEncoderPreTrainedModel):
    """The backbone: token embeddings, N pre-norm blocks, final RMSNorm. Bidirectional by default."""

    def __init__(self, config: LlamaEncoderConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.num_hidden_layers))
        self.norm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        causal: bool = False,
        cu_seqlens: torch.Tensor | None = None,
        **_unused,
    ) -> BaseModelOutput:
        """`cu_seqlens`: `varlen_segments(document_ids)`, computed on the host where the batch is
        built; read only on the flash-attn path, which otherwise computes it from the device's
        `document_ids` (a sync)."""
        batch, seq = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(seq, device=input_ids.device).expand(batch, seq)
        hidden = self.embed_tokens(input_ids)
        head_dim = self.config.hidden_size // self.config.num_attention_heads
        cos, sin = rotary_tables(position_ids, head_dim, self.config.rope_theta, hidden.dtype)
        kernel = flash_kernel_for(hidden, attention_mask, document_ids, self.config)
        if kernel is not None:
            if cu_seqlens is None:
                cu_seqlens = varlen_segments(document_ids)
            cu_seqlens = cu_seqlens.to(hidden.device, non_blocking=True)  # host -> GPU, no wait
            if not torch.compiler.is_compiling():
                # The number of documents changes from batch to batch: one compiled graph for all.
                torch._dynamo.maybe_mark_dynamic(cu_seqlens, 0)
            mask, is_causal = None, causal
            varlen = Varlen(kernel, cu_seqlens, compute_dtype(hidden))
        else:
            mask, is_causal = build_attention_mask(attention_mask, document_ids, causal, seq, input_ids.device)
            varlen = None
        for layer in self.layers:
            hidden = layer(hidden, cos, sin, mask, is_causal, varlen)
        return BaseModelOutput(last_hidden_state=self.norm(hidden))


class LlamaEncoderForMaskedLM(LlamaEncoderPreTrainedModel):
    """Backbone + untied LM head; the class every pretraining objective saves.

    `forward(..., causal=True)` is the CLM view of the same weights. `logits_positions` lets the
    objectives project only the positions that carry a loss (the LM head dominates small models).
    With `head_loss` and `labels` (one per selected position) the output is `loss` =
    `head_loss(hidden, lm_head.weight, labels)` and no logits: the pretraining objectives pass a
    loss that need not materialise them (trainables.lm_loss). It runs inside `forward` so the
    head's weight is the gathered one under FSDP2.
    """

    def __init__(self, config: LlamaEncoderConfig):
        super().__init__(config)
        self.model = LlamaEncoderModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        causal: bool = False,
        logits_positions: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        head_loss: Callable | None = None,
        **_unused,
    ) -> MaskedLMOutput:
        hidden = self.model(
            input_ids, attention_mask=attention_mask, document_ids=document_ids,
            position_ids=position_ids, causal=causal, cu_seqlens=cu_seqlens,
        ).last_hidden_state
        if logits_positions is not None:
            hidden = hidden[logits_positions]
        if head_loss is not None:
            return MaskedLMOutput(loss=head_loss(hidden, self.lm_head.weight, labels))
        return MaskedLMOutput(logits=self.lm_head(hidden))


# Custom code shared with the checkpoint: save_pretrained copies this file and writes `auto_map`.
LlamaEncoderConfig.register_for_auto_class("AutoConfig")
LlamaEncoderModel.register_for_auto_class("AutoModel")
LlamaEncoderForMaskedLM.register_for_auto_class("AutoModelForMaskedLM")


def register_with_auto_classes() -> None:
    """Idempotent: lets AutoConfig/AutoModel/AutoModelForMaskedLM resolve `llama_encoder`."""
    try:
        AutoConfig.register(MODEL_TYPE, LlamaEncoderConfig)
    except ValueError:
        return  # already registered in this process
    AutoModel.register(LlamaEncoderConfig, LlamaEncoderModel)
    AutoModelForMaskedLM.register(LlamaEncoderConfig, LlamaEncoderForMaskedLM)


def build_model(config: LlamaEncoderConfig, seed: int) -> LlamaEncoderForMaskedLM:
    """A freshly initialised model, N(0, initializer_range) weights, reproducible from `seed`."""
    torch.manual_seed(seed)
    return LlamaEncoderForMaskedLM(config)


if __name__ == "trainables.model":  # the study's import; the copy a checkpoint carries registers nothing
    register_with_auto_classes()
