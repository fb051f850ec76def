"""Pretraining objectives: one loss signature (`ObjectiveLoss`), MLM and CLM implementing it.

A batch is a `TokenBatch` of packed windows; segment boundaries (documents, or samples under
`data.sample_lengths: variable`) come from the corpus packing, so no objective lets attention or
a target cross them. Which loss a step uses is the run's
business (`PretrainConfig.phase_at`); a loss is named by `module:function` in
`sweeper.contract.registry.OBJECTIVES` and resolved on the worker, so a new objective is a function with
this signature plus one registration line.

Randomness is counter-based (`RowDraws`): a draw is a hash of (seed, step, row of the global
batch, column, call), so the masks of a step do not depend on how its global batch is split
into workers and micro-batches, and a resumed run draws what it drew before, on any device.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Protocol

import torch

from trainables.lm_loss import IGNORE, head_loss_for


@dataclass(frozen=True, slots=True)
class TokenBatch:
    """One rank's slice of a global batch; every tensor is (batch, seq), on the device."""

    input_ids: torch.Tensor
    document_ids: torch.Tensor
    """Packed segment of each token: its document (a separator closes its own document), or its
    sample under `data.sample_lengths: variable` (trainables.corpus)."""
    position_ids: torch.Tensor
    """Position inside its segment (restarts at 0 with every document, or sample)."""
    special_mask: torch.Tensor
    """True at special tokens (separators), which no objective selects as a target."""
    cu_seqlens: torch.Tensor | None = None
    """`trainables.model.varlen_segments(document_ids)`, kept on the host (None: the model
    computes it where it needs it): flash-attn's document table, counted on the CPU."""

    def to(self, device) -> TokenBatch:
        return TokenBatch(*(t.to(device) for t in (self.input_ids, self.document_ids, self.position_ids,
                                                   self.special_mask)), cu_seqlens=self.cu_seqlens)

    def rows(self, start: int, stop: int) -> TokenBatch:
        """Rows [start, stop) (views, no copy): one micro-batch."""
        cu = self.cu_seqlens
        if cu is not None:  # every row starts a document: the rows' entries, shifted to start at 0
            seq = self.input_ids.shape[1]
            cu = cu[(cu >= start * seq) & (cu <= stop * seq)] - start * seq
        return TokenBatch(*(t[start:stop] for t in (self.input_ids, self.document_ids, self.position_ids,
                                                    self.special_mask)), cu_seqlens=cu)


UINT32 = 0xFFFF_FFFF


def mix32(x):
    """A 32-bit integer hash (xor-shift and multiply rounds) of ints or int64 tensors holding
    values in [0, 2**32). The multiplier is below 2**31, so no product reaches 2**63: the
    arithmetic is exact, and the bits are the same on CPU and CUDA. Three rounds: with two, a
    histogram of the uniforms was measurably (2 sigma) less flat than torch.rand's."""
    for _ in range(3):
        x = x ^ (x >> 16)
        x = (x * 0x45D9F3B) & UINT32
    return x ^ (x >> 16)


@dataclass(frozen=True, slots=True)
class RowDraws:
    """Random numbers of one batch keyed by (seed, step, global row, column, call).

    Row r of a batch is row `first_row + r` of the step's global batch; its draws are the same
    whether it is trained in one pass, in a micro-batch or on another worker. Each call draws a
    fresh stream (the n-th call of a loss gets stream n), so a loss must make the same calls
    whatever the data: no draw inside a branch on the batch's contents.
    """

    seed: int
    step: int
    """The global batch's index in the data order (a continued run's steps follow its source's)."""
    first_row: int = 0
    """Index of this batch's first row within the global batch."""
    device: torch.device | str = "cpu"
    calls: itertools.count = field(default_factory=itertools.count, compare=False)

    def rows(self, offset: int) -> RowDraws:
        """The draws of the rows from `offset` on (a micro-batch), streams restarting at 0."""
        return RowDraws(self.seed, self.step, self.first_row + offset, self.device)

    def bits(self, shape: tuple[int, ...]) -> torch.Tensor:
        """Uniform 32-bit integers (int64) of `shape`, whose first dimension is the batch's rows."""
        call = next(self.calls)
        stream = mix32((mix32((mix32(self.seed & UINT32) + self.step) & UINT32) + call) & UINT32)
        rows = torch.arange(self.first_row, self.first_row + shape[0], device=self.device)
        row_keys = mix32((rows * 0x9E3779B1 + stream) & UINT32)  # golden-ratio spacing, then mixed
        columns = mix32(torch.arange(math.prod(shape[1:]), device=self.device) + 0x632BE5AB)
        return mix32((row_keys[:, None] + columns) & UINT32).view(shape)

    def uniform(self, shape: tuple[int, ...]) -> torch.Tensor:
        """float32 in [0, 1) on a grid of 2**-24 (exact, so `u < p` is the same everywhere)."""
        return (self.bits(shape) >> 8).to(torch.float32) * 2.0 ** -24

    def integers(self, high: int, shape: tuple[int, ...]) -> torch.Tensor:
        """int64 in [0, high) (modulo bias below high / 2**32)."""
        return self.bits(shape) % high


@dataclass(frozen=True, slots=True)
class LossContext:
    """What a loss may need beyond the batch and its settings; one per (micro-)batch."""

    draws: RowDraws
    """The only source of randomness a loss may use (`draws.uniform`, `draws.integers`)."""
    mask_token_id: int
    vocab_size: int
    lm_loss: str = "auto"
    """How the LM head's loss is computed (`pretraining.lm_loss`, trainables.lm_loss.head_loss_for):
    `fused` (chunked, or a CUDA kernel), `reference` (the full logits), `auto` (fused on a GPU)."""

    def rows(self, offset: int) -> LossContext:
        """The context of the rows from `offset` on (a micro-batch)."""
        return replace(self, draws=self.draws.rows(offset))


class ObjectiveLoss(Protocol):
    """The signature every pretraining objective's loss has.

    `loss(model, batch, settings, context) -> (summed loss, number of predicted tokens)`:
    - `model` is a `LlamaEncoderForMaskedLM` (possibly DDP/FSDP-wrapped); call it as
      `model(input_ids, document_ids=, position_ids=, causal=, logits_positions=)`.
    - `batch` may be a micro-batch: a loss sees some rows of a global batch, never all of them.
    - `settings` are the phase's settings, the registry's defaults filled in
      (`ObjectiveInfo.settings`): the loss reads its own keys and ignores the rest.
    - Randomness comes from `context.draws` only (`uniform(shape)`, `integers(high, shape)`,
      first dimension the batch's rows), called the same way whatever the data: a row then draws
      the same in any split of the global batch, and a resumed run draws what it drew before.
    - The loss is the SUM over its predicted tokens (a 0-dim tensor; 0 when there are none) and
      the count is their number: the loop divides by the count over the whole global batch
      (all micro-batches, all workers), so any split trains the same weights.
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
    draws: RowDraws,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Select each non-special token i.i.d. with probability p; return (corrupted ids, labels).

    Labels hold the original id at selected positions and IGNORE elsewhere, so the loss is on
    selected positions only. By default every selected token becomes the mask token (the paper).
    """
    selected = (draws.uniform(input_ids.shape) < config.mask_ratio) & ~special_mask
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE))
    corrupted = input_ids.clone()
    # A second uniform draw splits the selected tokens into mask / random / keep.
    how = draws.uniform(input_ids.shape)
    use_mask = selected & (how >= config.random_replace + config.keep_original)
    use_random = selected & (how < config.random_replace)
    corrupted[use_mask] = config.mask_token_id
    if config.random_replace > 0:  # decided by the settings, not the data: the same calls in any split
        random_ids = draws.integers(config.vocab_size, input_ids.shape)
        corrupted[use_random] = random_ids[use_random]
    return corrupted, labels


def labelled_token_loss(model, inputs: torch.Tensor, labels: torch.Tensor, batch: TokenBatch,
                        causal: bool, lm_loss: str) -> tuple[torch.Tensor, int]:
    """Summed cross-entropy at the positions whose label is not IGNORE (the LM head runs there
    only, through `lm_loss`'s head loss), and their number."""
    positions = labels != IGNORE
    summed = model(
        inputs, document_ids=batch.document_ids, position_ids=batch.position_ids,
        causal=causal, logits_positions=positions, cu_seqlens=batch.cu_seqlens,
        labels=labels[positions], head_loss=head_loss_for(lm_loss, inputs.device),
    ).loss
    return summed, int(positions.sum())


def mlm_loss(model, batch: TokenBatch, settings: dict, context: LossContext) -> tuple[torch.Tensor, int]:
    """Masked-token cross-entropy with bidirectional attention. Settings: mask_ratio,
    random_replace, keep_original (MaskingConfig)."""
    masking = MaskingConfig(mask_ratio=settings["mask_ratio"], mask_token_id=context.mask_token_id,
                            vocab_size=context.vocab_size, random_replace=settings["random_replace"],
                            keep_original=settings["keep_original"])
    corrupted, labels = mask_tokens(batch.input_ids, batch.special_mask, masking, context.draws)
    return labelled_token_loss(model, corrupted, labels, batch, causal=False, lm_loss=context.lm_loss)


def clm_targets(input_ids: torch.Tensor, document_ids: torch.Tensor) -> torch.Tensor:
    """Next-token labels; IGNORE where the next token starts another document or past the end."""
    labels = torch.full_like(input_ids, IGNORE)
    same_doc = document_ids[:, 1:] == document_ids[:, :-1]
    labels[:, :-1] = torch.where(same_doc, input_ids[:, 1:], IGNORE)
    return labels


def clm_loss(model, batch: TokenBatch, settings: dict, context: LossContext) -> tuple[torch.Tensor, int]:
    """Next-token cross-entropy with a causal mask inside each packed document (no settings)."""
    labels = clm_targets(batch.input_ids, batch.document_ids)
    return labelled_token_loss(model, batch.input_ids, labels, batch, causal=True, lm_loss=context.lm_loss)
