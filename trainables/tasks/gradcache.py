"""Gradient caching (Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under Memory
Limited Setup"; sentence-transformers' `CachedMultipleNegativesRankingLoss`): a loss that couples
every example of a batch (in-batch negatives) computed over the whole batch with the activation
memory of one micro-batch.

1. Embed each micro-batch without gradients (activations freed at once), keeping the RNG state
   each one started from.
2. Take the loss of the whole batch on those embeddings and its gradient with respect to them
   (a batch x dim tensor: the "cache").
3. Re-run each micro-batch with gradients from its saved RNG state (the same dropout draws, so
   the same embeddings) and backpropagate its slice of the cache into the weights.

The weights' gradient is the one-pass gradient of the whole batch's loss by the chain rule: the
loss depends on the weights only through the embeddings. Cost: one extra forward pass per
micro-batch. The RNG is left as step 1 left it, so the draws of later steps do not depend on
the number of micro-batches beyond what step 1 drew.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch


class RngState:
    """The CPU generator's state and, on a CUDA device, that device's: what dropout draws from."""

    def __init__(self, device: torch.device):
        self.cpu = torch.get_rng_state()
        self.cuda_index = (device.index if device.index is not None else torch.cuda.current_device()) \
            if device.type == "cuda" else None
        self.cuda = torch.cuda.get_rng_state(self.cuda_index) if self.cuda_index is not None else None

    @contextlib.contextmanager
    def replay(self):
        """Run the block from this state; afterwards the generators are back where they were."""
        devices = [self.cuda_index] if self.cuda_index is not None else []
        with torch.random.fork_rng(devices=devices):
            torch.set_rng_state(self.cpu)
            if self.cuda is not None:
                torch.cuda.set_rng_state(self.cuda, self.cuda_index)
            yield


def cached_backward(embed: Callable[[object], Sequence[torch.Tensor]], chunks: Sequence[object],
                    loss_of: Callable[[list[torch.Tensor]], torch.Tensor], device: torch.device,
                    autocast=None) -> torch.Tensor:
    """Backpropagate `loss_of(embeddings of the whole batch)` into the weights `embed` uses, one
    chunk's activations at a time; returns the loss (detached).

    - `embed(chunk)`: the chunk's embeddings, a tuple of tensors each with one row per example
      (retrieval: queries and their documents).
    - `chunks`: the micro-batches, in batch order.
    - `loss_of(parts)`: the loss of the whole batch from the concatenated embeddings, one tensor
      per output of `embed`.
    - `autocast`: the context the forward passes and the loss run under (None: none), as the
      loop's other families run theirs.
    """
    autocast = autocast if autocast is not None else contextlib.nullcontext()
    states, outputs = [], []
    with torch.no_grad():
        for chunk in chunks:
            states.append(RngState(device))
            with autocast:
                outputs.append([part.detach() for part in embed(chunk)])
    cached = [torch.cat(parts).requires_grad_() for parts in zip(*outputs)]
    with autocast:
        loss = loss_of(cached)
    loss.backward()  # only to the cache: nothing before it has a graph
    gradients = [part.grad for part in cached]
    start = 0
    for chunk, state, first in zip(chunks, states, outputs):
        rows = len(first[0])
        with state.replay(), autocast:
            parts = embed(chunk)
        torch.autograd.backward(list(parts), [g[start:start + rows] for g in gradients])
        start += rows
    return loss.detach()
