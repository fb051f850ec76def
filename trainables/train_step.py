"""One optimizer step of pretraining: micro-batches, gradient accumulation, clipping, update.

The pretraining loop calls `train_step` once per step, and so may a benchmark (the peak memory
of one step of a preset): it needs a model, an optimizer, this rank's rows of a global batch
and the objective's loss, nothing of Ray.

Normalisation: a loss returns its summed token loss and its token count (`ObjectiveLoss`).
Each micro-batch's sum is backpropagated as is; once all are done, the counts of every
micro-batch on every rank are summed (one all-reduce, which also carries the summed losses for
the log) and the gradients are scaled by world / total count before clipping. DDP and FSDP2
average gradients over ranks, so the result is the gradient of the token mean over the whole
global batch: any micro-batch size and any worker count train the same weights (up to float
rounding). Gradient sync runs on the last micro-batch only (`no_sync` for DDP,
`set_requires_gradient_sync` for FSDP2).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.distributed as dist

from trainables.objectives import LossContext, ObjectiveLoss, TokenBatch


@dataclass(frozen=True, slots=True)
class StepResult:
    loss: float
    """Token-mean loss over the whole global batch (every micro-batch of every rank)."""
    tokens: int
    """Predicted (target) tokens in the whole global batch."""


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def gradient_sync(model, enabled: bool):
    """Context in which backward passes all-reduce gradients (`enabled`) or only accumulate them."""
    if hasattr(model, "set_requires_gradient_sync"):  # FSDP2 (fully_shard)
        model.set_requires_gradient_sync(enabled)
        return contextlib.nullcontext()
    if not enabled and isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return model.no_sync()
    return contextlib.nullcontext()


def adamw(parameters, lr: float, settings: dict, device: torch.device) -> torch.optim.AdamW:
    """The pretraining optimizer: AdamW with `settings` (`AdamWConfig.torch_kwargs`), its fused
    kernel on CUDA (one kernel over all parameters, as torchtitan's default; FSDP2's DTensors take
    it too), the default for-each implementation elsewhere (the CPU studies train bit for bit as
    before). Fused and for-each differ by float rounding only."""
    return torch.optim.AdamW(parameters, lr=lr, **settings, fused=True if torch.device(device).type == "cuda" else None)


def train_step(model, optimizer: torch.optim.Optimizer, batch: TokenBatch, loss: ObjectiveLoss, settings: dict,
               context: LossContext, *, micro_batch_size: int | None = None, grad_clip: float | None = 1.0,
               autocast_dtype: torch.dtype | None = None) -> StepResult:
    """One optimizer step on this rank's rows of a global batch; returns the global loss and count.

    - `model`: a `LlamaEncoderForMaskedLM`, possibly wrapped by DDP or sharded by FSDP2 (then
      every rank of the process group calls `train_step` with its own rows).
    - `batch`: this rank's rows, on the model's device; `context`: the loss context of these
      rows (`context.draws.first_row` = index of the first one in the global batch).
    - `loss`, `settings`: the objective's loss function and the phase's settings.
    - `micro_batch_size`: rows per forward/backward pass (None: all of them in one); must
      divide the batch's rows.
    - `grad_clip`: max global gradient norm (None: no clipping).
    - `autocast_dtype`: forward passes under autocast to this dtype on the batch's device
      (the loop passes bfloat16 on GPU); None: full precision.
    The learning rate is the caller's (set it on the optimizer's groups before the call).
    """
    rows = batch.input_ids.shape[0]
    micro = micro_batch_size or rows
    if rows % micro:
        raise ValueError(f"micro_batch_size {micro} does not divide this rank's {rows} rows")
    autocast = (torch.autocast(batch.input_ids.device.type, dtype=autocast_dtype) if autocast_dtype is not None
                else contextlib.nullcontext())
    starts = range(0, rows, micro)
    loss_sum = torch.zeros((), dtype=torch.float64, device=batch.input_ids.device)
    count = 0
    for start in starts:
        with gradient_sync(model, enabled=start == starts[-1]):
            with autocast:
                summed, predicted = loss(model, batch.rows(start, start + micro), settings, context.rows(start))
            summed.backward()
        loss_sum += summed.detach()
        count += predicted
    world = world_size()
    totals = torch.stack([loss_sum, loss_sum.new_tensor(float(count))])
    if world > 1:
        dist.all_reduce(totals)
    global_loss, global_count = totals.tolist()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if grads:
        # Ranks' gradients are averaged by DDP/FSDP2: x world turns the mean back into the sum.
        torch._foreach_mul_(grads, world / max(global_count, 1.0))
    if grad_clip is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return StepResult(loss=global_loss / max(global_count, 1.0), tokens=int(global_count))
