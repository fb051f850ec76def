"""A checkpoint folder -> the backbone a task head calls: the study's own, or any Hugging Face one.

Every head calls its backbone as `LlamaEncoderModel` is called: `backbone(input_ids,
attention_mask=, document_ids=, position_ids=, causal=False).last_hidden_state`, through
`trainables.tasks.packing.PackedBackbone`, which packs several examples into a row and relies on
`document_ids` to keep them apart. A checkpoint whose `config.json` says `llama_encoder` is the
study's own model and is loaded as such. Any other (BERT, ModernBERT, EuroBERT, or a decoder-only
Llama, Qwen3, Mistral, Gemma, ...) is loaded with `AutoModel` (no remote code) and wrapped in
`HuggingFaceBackbone`, which gives it that call.

transformers models take `**kwargs` and silently ignore `document_ids`, so the wrapper turns
padding, document ids and bidirectionality into the one thing they all read the same way: an
explicit 4-D attention mask (batch, 1, query, key), which `transformers.masking_utils` passes
through untouched (`_preprocess_mask_arguments` returns a 4-D mask as it is). Models whose layers
differ (ModernBERT's sliding-window local layers, Qwen3/Gemma sliding layers) get one mask per
layer type, a dict keyed as their `config.layer_types`, as `generate` hands them. Decoders are
made bidirectional: the mask allows every key of the example, and each attention module's
`is_causal` is cleared. The original position ids are passed on, so a packed token sits where it
sat in its padded row. Whether a given architecture really honours all this is not assumed: the
fine-tuning loop probes it (`trainables.tasks.packing.packing_error`) before trusting packing.
"""
from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutput

from sweeper.store import folders
from sweeper.store.layout import CHECKPOINT_MARKER, TRAINING_STATE
from trainables.model import MODEL_TYPE, build_attention_mask

ATTENTION_IMPLEMENTATIONS = ("sdpa", "eager")
"""Tried in this order: both read an explicit 4-D mask (SDPA a boolean one, eager an additive
float one). flash-attention kernels take no mask (they would need varlen metadata instead) and
flex attention a BlockMask: neither is asked for."""
SLIDING = "sliding_attention"


def sliding_window_of(config) -> int | None:
    """How far (in tokens, either way) a sliding-window layer of `config` sees, or None."""
    return getattr(config, "sliding_window", None)


def layer_types_of(config) -> tuple[str, ...]:
    """The attention type of each layer: `config.layer_types` where the family has them, else
    one type for all (a config with only a `sliding_window`, as Mistral's, slides everywhere)."""
    listed = getattr(config, "layer_types", None)
    if listed:
        return tuple(listed)
    return (SLIDING if sliding_window_of(config) else "full_attention",) * config.num_hidden_layers


class HuggingFaceBackbone(nn.Module):
    """A transformers base model behind `LlamaEncoderModel.forward`'s call (bidirectional only)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.layer_types = sorted(set(layer_types_of(model.config)))
        self.window = sliding_window_of(model.config)
        model.config.use_cache = False  # no key/value cache in a bidirectional pass
        for module in model.modules():  # decoders made bidirectional (a no-op for encoders)
            if hasattr(module, "is_causal"):
                module.is_causal = False

    @property
    def config(self):
        return self.model.config

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        causal: bool = False,
        **_unused,
    ) -> BaseModelOutput:
        if causal:
            raise ValueError("a Hugging Face backbone is fine-tuned bidirectionally only (causal=False)")
        seq = input_ids.shape[1]
        if attention_mask is None and document_ids is None:
            # Always an explicit mask: with none, SDPA falls back to the module's own causality.
            attention_mask = torch.ones_like(input_ids)
        allowed, _ = build_attention_mask(attention_mask, document_ids, False, seq, input_ids.device)
        masks = {kind: self.as_model_mask(self.windowed(allowed) if kind == SLIDING else allowed)
                 for kind in self.layer_types}
        mask = masks if len(masks) > 1 else next(iter(masks.values()))
        # Position ids as given (packed tokens keep their padded positions); None: the model's 0..seq-1.
        hidden = self.model(input_ids=input_ids, attention_mask=mask, position_ids=position_ids).last_hidden_state
        return BaseModelOutput(last_hidden_state=hidden)

    def windowed(self, allowed: torch.Tensor) -> torch.Tensor:
        """`allowed` within the sliding window: keys at most `window` positions away either side
        (transformers' `sliding_window_bidirectional_overlay`). Row distance is position
        distance inside one example, packed or padded: an example's tokens sit side by side."""
        seq = allowed.shape[-1]
        index = torch.arange(seq, device=allowed.device)
        near = (index[:, None] - index[None, :]).abs() <= self.window
        # The diagonal stays: a padding query that sees only itself keeps a visible key.
        return allowed & near

    def as_model_mask(self, allowed: torch.Tensor) -> torch.Tensor:
        """The form the model's attention reads: SDPA a boolean mask (True = may attend), eager an
        additive one (0 or the dtype's lowest value) in the model's dtype."""
        if self.model.config._attn_implementation == "sdpa":
            return allowed
        dtype = self.model.dtype
        return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
            ~allowed, torch.finfo(dtype).min)


class CheckpointUnloadable(RuntimeError):
    """A checkpoint folder transformers cannot load, or whose tokenizer is not the one its task data
    was encoded with (trainables.finetune_loop.check_tokenizer); its one-line reason is the message:
    the trial fails with it, recorded, and the study goes on (sweeper.run.tune_grid.finetune_trainable)."""


def model_type_of(folder: Path) -> str:
    return json.loads((folder / "config.json").read_text())["model_type"]


def load_hugging_face_model(folder: Path, dtype: torch.dtype, auto_class: str = "AutoModel") -> nn.Module:
    """`auto_class` (AutoModel; AutoModelForCausalLM for continued MLM pretraining,
    trainables.causal_mlm) in `dtype` with the first attention implementation of
    ATTENTION_IMPLEMENTATIONS the family supports."""
    import transformers

    refusals = []
    for implementation in ATTENTION_IMPLEMENTATIONS:
        try:
            return getattr(transformers, auto_class).from_pretrained(
                folder, dtype=dtype, attn_implementation=implementation, trust_remote_code=False
            )
        except ValueError as refused:  # the family does not support this implementation
            refusals.append(f"{implementation}: {refused}")
    raise ValueError(f"{folder}: no attention implementation that reads a 4-D mask; " + "; ".join(refusals))


@lru_cache(maxsize=2)
def cached_backbone(folder: str, dtype: torch.dtype) -> nn.Module:
    """The checkpoint's backbone as loaded, once per process and dtype (trials of one checkpoint
    placed on one worker share it; each gets its own copy). Optimizer state stays behind. The
    study's architecture resolves through AutoModel: this module imports trainables.model."""
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    local = folders.local_copy(folder, CHECKPOINT_MARKER, skip=(TRAINING_STATE,))
    try:
        if model_type_of(local) == MODEL_TYPE:
            return AutoModel.from_pretrained(local, dtype=dtype, trust_remote_code=False)
        return HuggingFaceBackbone(load_hugging_face_model(local, dtype))
    except (torch.cuda.OutOfMemoryError, MemoryError):
        raise  # not the checkpoint's fault
    except Exception as error:  # corrupt weights, shapes that disagree, a family that needs code: the folder's fault
        text = " ".join(str(error).split())[:300]
        raise CheckpointUnloadable(f"checkpoint {folder} does not load: {type(error).__name__}: {text}") from error


def load_backbone(folder: str) -> nn.Module:
    """A fresh trainable copy of the backbone in the checkpoint `folder` (a path or a study
    location), called as `LlamaEncoderModel` is, with a `.config` that has `hidden_size`. Its
    weights are in the default float dtype whatever dtype was saved: float32, the fine-tuning
    master weights (autocast computes in bf16 on GPU), or float64 where a test asks for it."""
    return copy.deepcopy(cached_backbone(folder, torch.get_default_dtype()))
