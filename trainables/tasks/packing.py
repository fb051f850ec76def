"""Packed fine-tuning batches: compute that follows real tokens, not max_length.

Task data are stored padded to max_length (one array per split), and a batch of short
sentences at the paper's length (2,048 x 0.99) is almost all padding. `PackedBackbone` sits
between a task head and the backbone: it takes the padded batch the head already builds, moves
its real tokens into a few rows of several examples each (first-fit decreasing), runs the
backbone on those rows with document-aware attention (a block mask under SDPA on CPU,
flash-attn's varlen kernel on GPU; `trainables.model`), and scatters the hidden states back to
the padded layout. Each real token keeps its original position id and attends to exactly the
tokens of its own example, as in the padded pass, so every head (mean pooling, first sub-token,
span scores, in-batch negatives) computes what it computed before, up to float summation order;
padding positions come back as zeros, which every head masks.

With packing off the wrapper only counts tokens: the padded pass is the reference the tests
compare against (tests/unit/trainables/test_packing.py), and `TOKEN_COUNTS` gives the useful-token fraction of
either path (benchmarks/finetune_vs_hf.py).

Packing is only as sound as the backbone's attention: a model that ignored `document_ids` would let
packed examples attend to each other, silently. `packing_error` measures it on a probe batch
before a trial trusts packing (`trainables.finetune_loop`); where it fails, the trial runs with
`dynamic_padding`: the same batches, each forward cut to its longest real example.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutput

ROW_TOKENS = 64
"""Smallest row a batch is packed into (a longer example gets a row of its own length). Rows
attend through a dense block mask on CPU, so a row's attention costs its length squared: at
the tiny model's width, rows of 256 spent ~15 % more per step than rows of 64 on short
sentences (docs/benchmarks.md, section 9), while rows of 64 still hold 0.97-0.98 real tokens
(about equal fill: `balanced_rows`). On GPU flash-attn's varlen kernel makes row length free."""


@dataclass
class TokenCounts:
    """Real tokens and tokens computed (real + padding) by fine-tuning forward passes in this process."""

    real: int = 0
    computed: int = 0

    @property
    def useful_fraction(self) -> float:
        return self.real / self.computed if self.computed else float("nan")

    def reset(self) -> None:
        self.real = self.computed = 0


TOKEN_COUNTS = TokenCounts()


def plan_rows(lengths: list[int], capacity: int) -> tuple[list[int], list[int], int]:
    """First-fit decreasing: (row of each example, its offset in the row, rows' common width).
    Every length must be <= capacity."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    fill: list[int] = []
    rows, offsets = [0] * len(lengths), [0] * len(lengths)
    for i in order:
        row = next((r for r, used in enumerate(fill) if used + lengths[i] <= capacity), len(fill))
        if row == len(fill):
            fill.append(0)
        rows[i], offsets[i] = row, fill[row]
        fill[row] += lengths[i]
    return rows, offsets, max(fill, default=0)


def balanced_rows(lengths: list[int], row_tokens: int = ROW_TOKENS) -> tuple[list[int], list[int], int]:
    """`plan_rows` with rows of about equal fill: rows share one width, so a last row left
    nearly empty would cost as much as a full one. Starts from the fewest rows of `row_tokens`
    the tokens need and widens the capacity until first-fit decreasing holds them in that many
    (at most doubling it)."""
    longest, total = max(lengths), sum(lengths)
    n_rows = max(1, -(-total // max(row_tokens, longest)))
    lower = max(longest, -(-total // n_rows))
    step = max(1, lower // 32)
    for capacity in range(lower, 2 * lower + 1, step):
        plan = plan_rows(lengths, capacity)
        if max(plan[0]) < n_rows:
            return plan
    return plan_rows(lengths, max(longest, row_tokens))


def segment_table(rows: list[int], offsets: list[int], lengths: list[int], row_width: int) -> torch.Tensor:
    """The packed rows' `cu_seqlens` (trainables.model.varlen_segments of their document ids),
    from the plan on the host: each row's examples in order, then its padding as one segment."""
    segments = [[] for _ in range(max(rows) + 1)]
    for row, _, length in sorted(zip(rows, offsets, lengths)):
        segments[row].append(length)
    flat = [size for row in segments for size in (*row, row_width - sum(row)) if size]
    return torch.tensor([0, *itertools.accumulate(flat)], dtype=torch.int32)


class PackedBackbone(nn.Module):
    """The backbone as a head sees it: same call, same output layout, packed inside.

    With `packing` off, the padded reference pass; with `dynamic_padding` too, each pass is cut
    to the batch's last real column and its output padded back with zeros (for backbones whose
    packing the probe refused: no cross-example attention, less padding than max_length)."""

    def __init__(self, backbone: nn.Module, packing: bool = True, dynamic_padding: bool = False):
        super().__init__()
        self.backbone, self.packing, self.dynamic_padding = backbone, packing, dynamic_padding

    @property
    def config(self):
        return self.backbone.config

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                causal: bool = False, **kwargs) -> BaseModelOutput:
        n, width = input_ids.shape
        real = attention_mask.bool() if attention_mask is not None else None
        n_real = int(real.sum()) if real is not None else n * width
        if not self.packing and self.dynamic_padding and real is not None and not kwargs and n_real > 0:
            return self.trimmed(input_ids, attention_mask, causal, n_real)
        if not self.packing or real is None or causal or kwargs or n_real == 0:
            TOKEN_COUNTS.real += n_real
            TOKEN_COUNTS.computed += n * width
            return self.backbone(input_ids, attention_mask=attention_mask, causal=causal, **kwargs)
        lengths = real.sum(1)
        length_list = lengths.tolist()
        rows, offsets, row_width = balanced_rows(length_list)
        n_rows, device = max(rows) + 1, input_ids.device
        # Where each real token goes in the flattened rows, in the order `input_ids[real]` lists them.
        row_starts = torch.tensor([r * row_width + o for r, o in zip(rows, offsets)], device=device)
        first_of_example = torch.cumsum(lengths, 0) - lengths
        rank_in_example = torch.arange(n_real, device=device) - torch.repeat_interleave(first_of_example, lengths)
        destination = torch.repeat_interleave(row_starts, lengths) + rank_in_example
        packed_ids = input_ids.new_zeros(n_rows * row_width)
        packed_ids[destination] = input_ids[real]
        # Padding at a row's end is one more "document" (-1): it sees only itself, and is dropped.
        documents = torch.full((n_rows * row_width,), -1, dtype=torch.long, device=device)
        documents[destination] = torch.repeat_interleave(torch.arange(n, device=device), lengths)
        positions = torch.zeros(n_rows * row_width, dtype=torch.long, device=device)
        positions[destination] = torch.arange(width, device=device).expand(n, width)[real]
        TOKEN_COUNTS.real += n_real
        TOKEN_COUNTS.computed += n_rows * row_width
        hidden = self.backbone(packed_ids.view(n_rows, row_width), document_ids=documents.view(n_rows, row_width),
                               position_ids=positions.view(n_rows, row_width), causal=False,
                               cu_seqlens=segment_table(rows, offsets, length_list, row_width)).last_hidden_state
        out = hidden.new_zeros(n, width, hidden.shape[-1])
        out[real] = hidden.reshape(-1, hidden.shape[-1])[destination]
        return BaseModelOutput(last_hidden_state=out)

    def trimmed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, causal: bool,
                n_real: int) -> BaseModelOutput:
        """The padded pass on columns up to the batch's last real token (right padding: the
        columns kept keep their positions), zeros beyond it."""
        n, width = input_ids.shape
        used = int(torch.nonzero(attention_mask.any(0)).max()) + 1
        TOKEN_COUNTS.real += n_real
        TOKEN_COUNTS.computed += n * used
        hidden = self.backbone(input_ids[:, :used], attention_mask=attention_mask[:, :used],
                               causal=causal).last_hidden_state
        out = hidden.new_zeros(n, width, hidden.shape[-1])
        out[:, :used] = hidden
        return BaseModelOutput(last_hidden_state=out)


PROBE_LENGTHS = (3, 9, 24, 50, 160)
"""Real tokens of the probe's examples: several share a packed row, and the longest outgrows
ModernBERT's 128-token local window, so sliding-window layers are probed too."""
PROBE_TOLERANCE = 1e-4
"""Largest max |packed - padded| accepted, as a fraction of max |hidden state|. The same
attention summed in another order differs by float32 rounding, ~2**-24 x sqrt(keys) per layer
(measured 0 to 1.1e-7 of the scale on the tiny BERT, ModernBERT, EuroBERT, Llama and Qwen3
checkpoints; a few 1e-6 for a deep model); attention that leaks across packed examples moved
them by 8e-3 (ModernBERT), 1.5e-2 (BERT) and 0.8-0.9 (EuroBERT, Llama, Qwen3) of it with their
document ids ignored. 1e-4 sits almost two orders of magnitude from either."""


def packing_error(backbone: nn.Module, device: torch.device) -> tuple[float, float]:
    """(max |packed - padded|, max |padded|) over the real tokens of a synthetic batch of
    examples of PROBE_LENGTHS, run through `PackedBackbone` both ways in float32 on `device`
    (no autocast, no TF32, dropout off)."""
    config = backbone.config
    positions = getattr(config, "max_position_embeddings", None) or max(PROBE_LENGTHS) + 8
    lengths = [min(length, positions - 8) for length in PROBE_LENGTHS]
    width = max(lengths) + 8  # every example padded, as task data are
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (len(lengths), width), generator=generator)
    mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).to(torch.int64)
    pad_id = getattr(config, "pad_token_id", None) or 0
    ids, mask = ids.masked_fill(mask == 0, pad_id).to(device), mask.to(device)
    was_training, precision = backbone.training, torch.get_float32_matmul_precision()
    counted = TOKEN_COUNTS.real, TOKEN_COUNTS.computed  # the probe's tokens are no trial's
    backbone.eval()
    torch.set_float32_matmul_precision("highest")
    try:
        with torch.no_grad(), torch.autocast(device.type, enabled=False):
            padded, packed = (PackedBackbone(backbone, packing)(ids, mask).last_hidden_state.float()
                              for packing in (False, True))
    finally:
        backbone.train(was_training)
        torch.set_float32_matmul_precision(precision)
        TOKEN_COUNTS.real, TOKEN_COUNTS.computed = counted
    real = mask.bool()
    return float((packed - padded)[real].abs().max()), float(padded[real].abs().max())
