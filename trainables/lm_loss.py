"""The LM head and its cross-entropy as one function: `head_loss(hidden, weight, labels)`.

Two ways to compute the summed cross-entropy of `hidden @ weight.T` against `labels` (the rows
of IGNORE count for nothing), chosen by `pretraining.lm_loss` (`auto`: `fused` on a GPU,
`reference` on a CPU, where the chunked loss measured 3-8 % slower, its backward recomputing the
logits, and the small vocabularies of the CPU presets leave nothing to save; docs/benchmarks.md
section 18):

- `reference`: the full logits in the compute dtype (bf16 under autocast), cast to float32,
  then `F.cross_entropy`: rows x vocabulary floats held two or three times over (logits, their
  float32 copy, the log-softmax and its gradient). At the paper's 128,256-word vocabulary and a
  CLM pass of 8 x 2,048 rows that is 8.4 GB per float32 copy.
- `fused`: on CUDA, a maintained kernel that never writes the logits when one is importable
  (Liger-Kernel's `LigerFusedLinearCrossEntropyLoss`, else Apple's Cut Cross-Entropy
  `linear_cross_entropy`; neither is a dependency of the project and neither has been run by
  its tests, which have no GPU); otherwise, and always on the CPU, `chunked_linear_cross_entropy`
  below: the same arithmetic as `reference` on `chunk_rows` rows at a time, forward and backward,
  so no more than chunk_rows x vocabulary logits exist at once.

Why `lm_loss` is not in a run key: `chunked` computes every logit with the same matmul in the
same dtype as `reference`, rounds it the same way (bf16 under autocast) and takes the same
float32 log-softmax; what differs is the order of float32 sums (the loss over rows, the LM-head
gradient over chunks) and the matmul's blocking, which are float rounding of the size
tests/unit/trainables/test_lm_loss.py bounds, the same kind of difference as another micro-batch
size or worker count (neither of which is keyed either). The CUDA kernels compute the same
quantity, in float32 softmax from bf16 matmuls, with their own rounding.
"""
from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F

from trainables.model import compute_dtype

IGNORE = -100
"""The label of a position without a target (F.cross_entropy's default ignore_index)."""

LM_LOSSES = ("auto", "fused", "reference")

CHUNK_ELEMENTS = 2 ** 25
"""Logits per chunk of `chunked_linear_cross_entropy` (128 MB in float32): 261 rows at the
paper's 128,256-word vocabulary, the whole pass at the CPU presets' small ones."""


def logits_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Summed cross-entropy of materialised logits, in at least float32 (bf16 logits under
    autocast are cast up; float64 stays float64, for the numerics tests)."""
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return F.cross_entropy(logits, labels, ignore_index=IGNORE, reduction="sum")


def reference_linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Summed cross-entropy through the full logits (what every run computed before `fused`)."""
    return logits_cross_entropy(F.linear(hidden, weight), labels)


def chunk_logits(hidden: torch.Tensor, weight: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One chunk's logits as `reference` has them: a matmul in `dtype`, then at least float32."""
    return (hidden.to(dtype) @ weight.to(dtype).T).to(torch.promote_types(dtype, torch.float32))


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    """Forward: per chunk of rows, logits -> logsumexp -> loss, keeping only the row's logsumexp.
    Backward: per chunk, the logits recomputed, softmax - one-hot times the incoming gradient,
    then the chunk's hidden gradient and its share of the weight gradient (float32 accumulated)."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, chunk_rows: int, dtype: torch.dtype):
        with torch.autocast(hidden.device.type, enabled=False):  # dtypes are explicit below
            accumulate = torch.promote_types(dtype, torch.float32)
            total = hidden.new_zeros((), dtype=accumulate)
            lse = hidden.new_empty(hidden.shape[0], dtype=accumulate)
            for start in range(0, hidden.shape[0], chunk_rows):
                rows = slice(start, start + chunk_rows)
                logits = chunk_logits(hidden[rows], weight, dtype)
                lse[rows] = torch.logsumexp(logits, dim=-1)
                valid = labels[rows] != IGNORE
                target = logits.gather(1, labels[rows].clamp(min=0)[:, None])[:, 0]
                total += torch.where(valid, lse[rows] - target, 0).sum()
        ctx.save_for_backward(hidden, weight, labels, lse)
        ctx.chunk_rows, ctx.dtype = chunk_rows, dtype
        return total

    @staticmethod
    def backward(ctx, grad_total):
        hidden, weight, labels, lse = ctx.saved_tensors
        dtype, chunk_rows = ctx.dtype, ctx.chunk_rows
        with torch.autocast(hidden.device.type, enabled=False):
            grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
            grad_weight = (torch.zeros_like(weight, dtype=torch.promote_types(weight.dtype, torch.float32))
                           if ctx.needs_input_grad[1] else None)
            weight_c = weight.to(dtype)
            for start in range(0, hidden.shape[0], chunk_rows):
                rows = slice(start, start + chunk_rows)
                hidden_c = hidden[rows].to(dtype)
                probs = chunk_logits(hidden_c, weight_c, dtype).sub_(lse[rows, None]).exp_()  # in place: one buffer
                valid = labels[rows] != IGNORE
                probs.scatter_add_(1, labels[rows].clamp(min=0)[:, None],
                                   torch.full((probs.shape[0], 1), -1.0, dtype=probs.dtype, device=probs.device))
                probs *= (valid.to(probs.dtype) * grad_total)[:, None]
                grad_logits = probs.to(dtype)  # as autograd casts the float32 gradient back to the matmul's dtype
                if grad_hidden is not None:
                    grad_hidden[rows] = (grad_logits @ weight_c).to(hidden.dtype)
                if grad_weight is not None and grad_weight.dtype == dtype:
                    grad_weight.addmm_(grad_logits.T, hidden_c)  # no chunk-sized temporary
                elif grad_weight is not None:  # bf16 product, float32 sum: the chunk's rounding as reference's
                    grad_weight += grad_logits.T @ hidden_c
        return grad_hidden, None if grad_weight is None else grad_weight.to(weight.dtype), None, None, None


def chunked_linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                                 chunk_rows: int | None = None) -> torch.Tensor:
    """Summed cross-entropy of `hidden @ weight.T` (rows x hidden, vocabulary x hidden) against
    `labels` (rows; IGNORE counts for nothing), `chunk_rows` rows at a time (None: as many as
    CHUNK_ELEMENTS logits)."""
    rows = chunk_rows or max(1, CHUNK_ELEMENTS // weight.shape[0])
    return ChunkedLinearCrossEntropy.apply(hidden, weight, labels, rows, compute_dtype(hidden))


def cuda_kernel() -> tuple[str, Callable] | None:
    """(name, loss) of the first maintained fused kernel importable here, or None."""
    if importlib.util.find_spec("liger_kernel") is not None:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

        liger = LigerFusedLinearCrossEntropyLoss(ignore_index=IGNORE, reduction="sum")
        return "liger-kernel", lambda hidden, weight, labels: liger(weight, hidden, labels)
    if importlib.util.find_spec("cut_cross_entropy") is not None:
        from cut_cross_entropy import linear_cross_entropy

        return "cut-cross-entropy", lambda hidden, weight, labels: linear_cross_entropy(
            hidden, weight, labels, ignore_index=IGNORE, reduction="sum")
    return None


_CUDA_KERNEL: list = []  # resolved once per process: [(name, loss) or None]


def kernel_loss(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The CUDA kernel's summed loss; inputs cast to the compute dtype (the kernels want one)."""
    dtype = compute_dtype(hidden)
    with torch.autocast("cuda", enabled=False):
        return _CUDA_KERNEL[0][1](hidden.to(dtype), weight.to(dtype), labels).float()


def head_loss_for(lm_loss: str, device: torch.device) -> Callable:
    """The `head_loss(hidden, weight, labels)` that `pretraining.lm_loss` (auto, fused or
    reference) names on `device`."""
    if lm_loss not in LM_LOSSES:
        raise ValueError(f"lm_loss {lm_loss!r}: one of {', '.join(LM_LOSSES)}")
    on_gpu = torch.device(device).type == "cuda"
    if lm_loss == "reference" or (lm_loss == "auto" and not on_gpu):
        return reference_linear_cross_entropy
    if not on_gpu:
        return chunked_linear_cross_entropy
    if not _CUDA_KERNEL:
        _CUDA_KERNEL.append(cuda_kernel())
        if _CUDA_KERNEL[0] is None:
            warnings.warn("pretraining.lm_loss: fused found neither liger-kernel nor cut-cross-entropy: "
                          "using the chunked PyTorch loss (install one of them on the GPU nodes for the "
                          "kernel; docs/benchmarks.md section 18)", stacklevel=2)
    return chunked_linear_cross_entropy if _CUDA_KERNEL[0] is None else kernel_loss


def fused_kernel_name(device: torch.device) -> str:
    """What `fused` runs on `device`: a kernel's name, or `chunked`."""
    if torch.device(device).type == "cuda":
        head_loss_for("fused", device)
        if _CUDA_KERNEL[0] is not None:
            return _CUDA_KERNEL[0][0]
    return "chunked"
