"""Continued MLM pretraining of a Hugging Face causal LM as its own model (`init_from: hf:...`
with `hf_init: native`): no conversion to the study's encoder.

`CausalLMForMaskedLM` gives any `AutoModelForCausalLM` the call every pretraining objective makes
(`model(input_ids, document_ids=, position_ids=, causal=, logits_positions=)`, as
`LlamaEncoderForMaskedLM`): the base model runs bidirectionally with a document-separated 4-D
attention mask (`trainables.backbones.HuggingFaceBackbone`, the fine-tuning side's adapter), and
the model's own LM head (tied to the embeddings or not, as the family has it; Gemma's final logit
soft-capping applied) projects the positions that carry a loss.

Before training, the attention is checked on the worker, never assumed (`attention_check`):
- bidirectional: a change of the last token must move the first token's hidden state; a model
  whose attention stays causal is refused (ValueError), never trained causally in silence;
- packed: `trainables.tasks.packing.packing_error`, the fine-tuning probe. A family that fails
  it trains padded (`padded = True`): each document of a packed row runs in its own row, padded
  to the longest, and the reason is printed and written into every checkpoint marker
  (`attention`).

The vocabulary grows by the [MASK] token the corpus preparation added to the tokenizer (and by
nothing when the model's embedding already has the rows, or the mask is one of the tokenizer's
reserved tokens: `data.mask_token: reserved`): new rows start at the mean embedding
(and, untied, the mean LM-head row), as `trainables.convert` does. A checkpoint is the causal
LM's own `save_pretrained` folder: `AutoModel.from_pretrained` loads it (the fine-tuning grid
does), `AutoModelForCausalLM` too.
"""
from __future__ import annotations

import torch
from torch import nn
from transformers.modeling_outputs import MaskedLMOutput

from trainables.backbones import HuggingFaceBackbone, load_hugging_face_model
from trainables.convert import grow_rows
from trainables.lm_loss import logits_cross_entropy
from trainables.tasks.packing import PROBE_TOLERANCE, packing_error

PROBE_TOKENS = 8
"""Tokens of the bidirectionality check's row: short, so that a sliding window of any family
reaches from its last token to its first."""


class CausalLMForMaskedLM(nn.Module):
    """A causal LM (transformers' own class) behind `LlamaEncoderForMaskedLM.forward`'s call,
    bidirectional only. `causal_lm` is the one registered module: its parameter names, hence
    the optimizer state's order, are the family's."""

    def __init__(self, causal_lm: nn.Module):
        super().__init__()
        self.causal_lm = causal_lm
        # Not a registered module: the same base model seen through the fine-tuning adapter.
        self._adapter = (HuggingFaceBackbone(causal_lm.base_model),)
        self.padded = False
        self.attention = "packed"
        """How documents are kept apart: `packed` (a document-separated mask) or `padded (<why>)`."""

    @property
    def config(self):
        return self.causal_lm.config

    @property
    def backbone(self) -> HuggingFaceBackbone:
        return self._adapter[0]

    def blocks(self) -> list[nn.Module]:
        """The transformer blocks (what `compile` compiles one by one): the base model's layer list."""
        base = self.causal_lm.base_model
        return list(getattr(base, "layers", None) or getattr(base, "h", None) or [])

    def activation_checkpointing_enable(self, kwargs: dict | None = None) -> bool:
        """The family's own activation checkpointing, where it supports it; False where not."""
        if not getattr(self.causal_lm, "supports_gradient_checkpointing", False):
            return False
        self.causal_lm.activation_checkpointing_enable(kwargs)
        return True

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                document_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                causal: bool = False, logits_positions: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, head_loss=None, **_unused) -> MaskedLMOutput:
        """As `LlamaEncoderForMaskedLM.forward`; `head_loss` is used where the family's head is a
        plain linear layer (no bias, no soft-capping), else the loss is taken on its logits."""
        if causal:
            raise ValueError("a causal LM continued natively is trained with MLM only (causal=False)")
        if self.padded and document_ids is not None:
            hidden = self.per_document(input_ids, document_ids, position_ids)
        else:
            hidden = self.backbone(input_ids, attention_mask=attention_mask, document_ids=document_ids,
                                   position_ids=position_ids).last_hidden_state
        if logits_positions is not None:
            hidden = hidden[logits_positions]
        head = self.causal_lm.get_output_embeddings()
        cap = getattr(self.config, "final_logit_softcapping", None)
        if head_loss is not None and not cap and getattr(head, "bias", None) is None:
            return MaskedLMOutput(loss=head_loss(hidden, head.weight, labels))
        logits = head(hidden)
        if cap:  # Gemma 2/3: the LM head's logits are soft-capped in the family's own forward
            logits = torch.tanh(logits / cap) * cap
        if head_loss is not None:
            return MaskedLMOutput(loss=logits_cross_entropy(logits, labels))
        return MaskedLMOutput(logits=logits)

    def per_document(self, input_ids: torch.Tensor, document_ids: torch.Tensor,
                     position_ids: torch.Tensor | None) -> torch.Tensor:
        """Hidden states of packed rows computed one document per row (right-padded to the
        longest document, a padding mask only), laid back out as the packed rows."""
        n, seq = input_ids.shape
        starts = torch.ones_like(document_ids, dtype=torch.bool)
        starts[:, 1:] = document_ids[:, 1:] != document_ids[:, :-1]
        flat_starts = starts.flatten()
        segment = torch.cumsum(flat_starts, 0) - 1  # document (row of the padded batch) of each token
        first = torch.nonzero(flat_starts, as_tuple=True)[0]
        rank = torch.arange(n * seq, device=input_ids.device) - first[segment]
        lengths = torch.bincount(segment)
        shape = (len(lengths), int(lengths.max()))
        ids = input_ids.new_zeros(shape)
        ids[segment, rank] = input_ids.flatten()
        mask = input_ids.new_zeros(shape)
        mask[segment, rank] = 1
        positions = input_ids.new_zeros(shape)
        positions[segment, rank] = (position_ids if position_ids is not None
                                    else torch.arange(seq, device=input_ids.device).expand(n, seq)).flatten()
        hidden = self.backbone(ids, attention_mask=mask, position_ids=positions).last_hidden_state
        return hidden[segment, rank].view(n, seq, -1)


def bidirectional_change(backbone: nn.Module, device: torch.device) -> float:
    """max |change| of the first token's hidden state when only the last token of a row changes,
    as a fraction of max |hidden state| (0: the attention is causal)."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, backbone.config.vocab_size, (1, PROBE_TOKENS), generator=generator)
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] + 1) % backbone.config.vocab_size
    was_training = backbone.training
    backbone.eval()
    try:
        with torch.no_grad(), torch.autocast(device.type, enabled=False):
            first, second = (backbone(row.to(device)).last_hidden_state[0, 0].float() for row in (ids, changed))
    finally:
        backbone.train(was_training)
    return float((first - second).abs().max() / first.abs().max().clamp_min(1e-30))


def attention_check(model: CausalLMForMaskedLM, device: torch.device) -> str:
    """Refuse a model whose attention stays causal; decide packed or padded (sets `model.padded`
    and `model.attention`); returns the line that says which."""
    name = type(model.causal_lm).__name__
    if bidirectional_change(model.backbone, device) <= PROBE_TOLERANCE:
        raise ValueError(
            f"{name}: its attention cannot be made bidirectional (the first token's hidden state does not "
            "change when the last token does): refused for MLM, never trained causally")
    error, scale = packing_error(model.backbone, device)
    if error <= PROBE_TOLERANCE * scale:
        model.padded, model.attention = False, "packed"
    else:
        model.padded = True
        model.attention = (f"padded (packing probe failed: packed and padded passes differ by {error:.2e} "
                           f"of {scale:.2e}; each document trains in its own row)")
    return f"{name}: bidirectional, {model.attention}"


def grow_vocabulary(causal_lm: nn.Module, rows: int) -> None:
    """Embedding (and untied LM-head) rows up to `rows`, new ones at the mean of the old ones."""
    embeddings = causal_lm.get_input_embeddings()
    old = embeddings.weight.shape[0]
    if rows <= old:
        return
    head = causal_lm.get_output_embeddings()
    tied = head is not None and head.weight is embeddings.weight
    grown_head = None if head is None or tied else grow_rows(head.weight.detach(), rows).clone()
    grown = grow_rows(embeddings.weight.detach(), rows).clone()
    causal_lm.resize_token_embeddings(rows, mean_resizing=False)
    with torch.no_grad():
        causal_lm.get_input_embeddings().weight.copy_(grown)
        if grown_head is not None:
            causal_lm.get_output_embeddings().weight.copy_(grown_head)


def load_causal_lm(source: str) -> nn.Module:
    """`AutoModelForCausalLM` of `source` in float32, with an attention implementation that reads
    a 4-D mask (`trainables.backbones.ATTENTION_IMPLEMENTATIONS`), no remote code."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    return load_hugging_face_model(source, torch.float32, auto_class="AutoModelForCausalLM")


def masked_lm_from_causal_lm(source: str, vocab_size: int) -> CausalLMForMaskedLM:
    """The causal LM at `source` (path or hub name), its vocabulary grown to `vocab_size` rows."""
    causal_lm = load_causal_lm(source)
    grow_vocabulary(causal_lm, vocab_size)
    return CausalLMForMaskedLM(causal_lm)


def masked_lm_from_checkpoint(folder) -> CausalLMForMaskedLM:
    """A native run's own checkpoint (a resume)."""
    return CausalLMForMaskedLM(load_causal_lm(str(folder)))
