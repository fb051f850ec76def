"""A toy pretraining objective added the way a newcomer would: this one module and one
registration line.

Span masking: contiguous spans of `mean_span` tokens are masked until about `mask_ratio` of the
tokens are selected; the loss is MLM's (bidirectional attention, cross-entropy on the masked
positions). Spans never cover a special token, so no target crosses a document boundary.
Loaded through SWEEPER_PLUGINS=toy_span_masking with this folder on PYTHONPATH.
"""
from __future__ import annotations

import torch

from sweeper.contract.registry import ObjectiveInfo, register_objective
from trainables.objectives import IGNORE, LossContext, RowDraws, TokenBatch, labelled_token_loss


def span_selection(special_mask: torch.Tensor, mask_ratio: float, mean_span: int, draws: RowDraws) -> torch.Tensor:
    """Span starts drawn i.i.d. at mask_ratio / mean_span, each covering mean_span tokens."""
    starts = draws.uniform(special_mask.shape) < mask_ratio / mean_span
    selected = starts.clone()
    for offset in range(1, mean_span):
        selected[:, offset:] |= starts[:, :-offset]
    return selected & ~special_mask


def span_mlm_loss(model, batch: TokenBatch, settings: dict, context: LossContext) -> tuple[torch.Tensor, int]:
    """(summed loss, masked tokens); a micro-batch that draws no span adds 0 to the sum."""
    selected = span_selection(batch.special_mask, settings["mask_ratio"], int(settings["mean_span"]),
                              context.draws)
    labels = torch.where(selected, batch.input_ids, torch.full_like(batch.input_ids, IGNORE))
    corrupted = batch.input_ids.masked_fill(selected, context.mask_token_id)
    return labelled_token_loss(model, corrupted, labels, batch, causal=False, lm_loss=context.lm_loss)


register_objective(ObjectiveInfo(name="span-mlm", loss="toy_span_masking:span_mlm_loss",
                                 settings={"mask_ratio": 0.3, "mean_span": 3},
                                 tag=lambda s: f"span{round(s['mask_ratio'] * 100)}x{s['mean_span']}"))
