"""Task heads on the bidirectional backbone (the paper fine-tunes every checkpoint this way)."""
from __future__ import annotations

import torch
from torch import nn


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)


class LinearHead(nn.Module):
    """A linear layer on the backbone's last hidden states: on their mean over non-padding tokens
    (`pooled`, sequence classification) or on every token (token classification: the labelled
    sub-tokens, `trainables.tasks.classification`)."""

    def __init__(self, backbone: nn.Module, num_labels: int, pooled: bool):
        super().__init__()
        self.backbone, self.pooled = backbone, pooled
        self.head = nn.Linear(backbone.config.hidden_size, num_labels)

    def forward(self, input_ids, attention_mask):
        hidden = self.backbone(input_ids, attention_mask=attention_mask, causal=False).last_hidden_state
        return self.head(mean_pool(hidden, attention_mask) if self.pooled else hidden)

