"""Pretraining objectives on packed token batches: MLM, CLM, and which one a step uses.

A batch is (input_ids, document_ids, position_ids), all (batch, seq); document boundaries come
from the corpus packing, so neither objective lets attention or a target cross documents.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

IGNORE = -100


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


def objective_at_step(step: int, switch: int) -> str:
    """'clm' for the steps before `switch`, 'mlm' from there on (0-based). The driver's plan
    computes `switch` from the run's clm_fraction (sweeper.plan.switch_step)."""
    return "clm" if step < switch else "mlm"


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


def mlm_loss(model, input_ids, document_ids, position_ids, special_mask, config, generator):
    """Cross-entropy on the masked positions only, with bidirectional attention."""
    corrupted, labels = mask_tokens(input_ids, special_mask, config, generator)
    positions = labels != IGNORE
    logits = model(
        corrupted, document_ids=document_ids, position_ids=position_ids,
        causal=False, logits_positions=positions,
    ).logits
    return F.cross_entropy(logits.float(), labels[positions]), int(positions.sum())


def clm_targets(input_ids: torch.Tensor, document_ids: torch.Tensor) -> torch.Tensor:
    """Next-token labels; IGNORE where the next token starts another document or past the end."""
    labels = torch.full_like(input_ids, IGNORE)
    same_doc = document_ids[:, 1:] == document_ids[:, :-1]
    labels[:, :-1] = torch.where(same_doc, input_ids[:, 1:], IGNORE)
    return labels


def clm_loss(model, input_ids, document_ids, position_ids):
    """Next-token cross-entropy with a causal mask inside each packed document."""
    labels = clm_targets(input_ids, document_ids)
    positions = labels != IGNORE
    logits = model(
        input_ids, document_ids=document_ids, position_ids=position_ids,
        causal=True, logits_positions=positions,
    ).logits
    return F.cross_entropy(logits.float(), labels[positions]), int(positions.sum())
