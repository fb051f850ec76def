"""Pretraining objectives: one loss signature (`ObjectiveLoss`), MLM and CLM implementing it.

A batch is a `TokenBatch` of packed windows; document boundaries come from the corpus packing,
so no objective lets attention or a target cross documents. Which loss a step uses is the run's
business (`PretrainConfig.phase_at`); a loss is named by `module:function` in
`sweeper.registry.OBJECTIVES` and resolved on the worker, so a new objective is a function with
this signature plus one registration line.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F

IGNORE = -100


@dataclass(frozen=True, slots=True)
class TokenBatch:
    """One rank's slice of a global batch; every tensor is (batch, seq), on the device."""

    input_ids: torch.Tensor
    document_ids: torch.Tensor
    """Packed document of each token (a separator closes its own document)."""
    position_ids: torch.Tensor
    """Position inside its document (restarts at 0 with every document)."""
    special_mask: torch.Tensor
    """True at special tokens (separators), which no objective selects as a target."""

    def to(self, device) -> TokenBatch:
        return TokenBatch(*(t.to(device) for t in (self.input_ids, self.document_ids, self.position_ids,
                                                   self.special_mask)))


@dataclass(frozen=True, slots=True)
class LossContext:
    """What a loss may need beyond the batch and its settings; the same for a whole run."""

    generator: torch.Generator
    """On the batch's device, re-seeded by the loop before every step (resume is exact)."""
    mask_token_id: int
    vocab_size: int


class ObjectiveLoss(Protocol):
    """The signature every pretraining objective's loss has.

    `loss(model, batch, settings, context) -> (mean loss, number of predicted tokens)`:
    - `model` is a `LlamaEncoderForMaskedLM` (possibly DDP/FSDP-wrapped); call it as
      `model(input_ids, document_ids=, position_ids=, causal=, logits_positions=)`.
    - `settings` are the phase's settings, the registry's defaults filled in
      (`ObjectiveInfo.settings`): the loss reads its own keys and ignores the rest.
    - Randomness comes from `context.generator` only, so a resumed run draws what it drew before.
    - The loss is a 0-dim tensor the loop backpropagates; the count is the number of target tokens
      it averages over (0 is allowed only if the loss is still finite).
    """

    def __call__(self, model, batch: TokenBatch, settings: dict, context: LossContext) -> tuple[torch.Tensor, int]:
        ...


@dataclass(kw_only=True, slots=True)
class MaskingConfig:
    mask_ratio: float
    """Probability that each non-special token is selected for prediction."""
    mask_token_id: int
    vocab_size: int
    random_replace: float = 0.0
    """Of the selected tokens, the share replaced by a random token (BERT's 80/10/10 is 0.1)."""
    keep_original: float = 0.0
    """Of the selected tokens, the share left unchanged (BERT's 80/10/10 is 0.1)."""


def mask_tokens(
    input_ids: torch.Tensor,
    special_mask: torch.Tensor,
    config: MaskingConfig,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Select each non-special token i.i.d. with probability p; return (corrupted ids, labels).

    Labels hold the original id at selected positions and IGNORE elsewhere, so the loss is on
    selected positions only. By default every selected token becomes the mask token (the paper).
    """
    draws = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)
    selected = (draws < config.mask_ratio) & ~special_mask
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE))
    corrupted = input_ids.clone()
    # A second uniform draw splits the selected tokens into mask / random / keep.
    how = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)
    use_mask = selected & (how >= config.random_replace + config.keep_original)
    use_random = selected & (how < config.random_replace)
    corrupted[use_mask] = config.mask_token_id
    if use_random.any():
        random_ids = torch.randint(
            config.vocab_size, input_ids.shape, generator=generator, device=input_ids.device
        )
        corrupted[use_random] = random_ids[use_random]
    return corrupted, labels


def labelled_token_loss(model, inputs: torch.Tensor, labels: torch.Tensor, batch: TokenBatch,
                        causal: bool) -> tuple[torch.Tensor, int]:
    """Cross-entropy at the positions whose label is not IGNORE; logits are computed there only."""
    positions = labels != IGNORE
    logits = model(
        inputs, document_ids=batch.document_ids, position_ids=batch.position_ids,
        causal=causal, logits_positions=positions,
    ).logits
    return F.cross_entropy(logits.float(), labels[positions]), int(positions.sum())


def mlm_loss(model, batch: TokenBatch, settings: dict, context: LossContext) -> tuple[torch.Tensor, int]:
    """Masked-token cross-entropy with bidirectional attention. Settings: mask_ratio,
    random_replace, keep_original (MaskingConfig)."""
    masking = MaskingConfig(mask_ratio=settings["mask_ratio"], mask_token_id=context.mask_token_id,
                            vocab_size=context.vocab_size, random_replace=settings["random_replace"],
                            keep_original=settings["keep_original"])
    corrupted, labels = mask_tokens(batch.input_ids, batch.special_mask, masking, context.generator)
    return labelled_token_loss(model, corrupted, labels, batch, causal=False)


def clm_targets(input_ids: torch.Tensor, document_ids: torch.Tensor) -> torch.Tensor:
    """Next-token labels; IGNORE where the next token starts another document or past the end."""
    labels = torch.full_like(input_ids, IGNORE)
    same_doc = document_ids[:, 1:] == document_ids[:, :-1]
    labels[:, :-1] = torch.where(same_doc, input_ids[:, 1:], IGNORE)
    return labels


def clm_loss(model, batch: TokenBatch, settings: dict, context: LossContext) -> tuple[torch.Tensor, int]:
    """Next-token cross-entropy with a causal mask inside each packed document (no settings)."""
    labels = clm_targets(batch.input_ids, batch.document_ids)
    return labelled_token_loss(model, batch.input_ids, labels, batch, causal=True)
