"""FSDP2 for a pretraining worker group (`resources.sharding: fsdp`): how the model is built,
sharded and loaded so that no rank but 0 ever holds the whole model or optimizer state.

Loading (a fresh start, continued pretraining or a resume) (P parameters, W ranks, bytes):
- rank 0 alone builds the full model on the CPU (initial weights, or `from_pretrained` of the
  checkpoint: 4 P of host memory, freed once loaded) and sends its config to the others;
- every rank builds the model on the meta device (no memory), shards it (`fully_shard` per block,
  then the root) and allocates its shards on its device (4 P / W);
- `set_model_state_dict(broadcast_from_rank0=True)` sends the weights one tensor at a time: rank
  0 copies it to its device and broadcasts it, every rank copies its slice into its shard and
  drops the rest, so beside its shards a rank holds one full tensor at a time (the largest is
  the embedding or the LM head, 4 V h);
- on a resume, rank 0 maps `training_state.pt` (`torch.load(mmap=True)`: pages read from the
  file when touched, nothing copied), every rank creates the AdamW state of its shards (8 P / W,
  one parameter at a time: `init_optimizer_state`) and `set_optimizer_state_dict` broadcasts the
  state one tensor at a time as it does the weights. The other ranks read no file.

Training holds fp32 shards of weights, gradients and AdamW state (16 P / W). On CUDA the
parameters are gathered in bf16 (`mixed_precision`: a gathered block is 2 bytes a parameter
and its forward runs in bf16) and gradients are reduced in fp32; on the CPU (gloo) nothing is
cast, so a CPU worker group trains the weights of a single process (tests/e2e/test_smoke_study.py).

Checkpoints are written as before (`trainables.pretrain_loop.full_states`): the full state
gathered one tensor at a time to rank 0's CPU, so their format is the single process's.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from trainables.model import LlamaEncoderForMaskedLM

T = TypeVar("T")

FROM_RANK0 = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
"""Rank 0 passes the full state, the others an empty dict; each rank keeps its slices."""
TO_RANK0 = StateDictOptions(full_state_dict=True, cpu_offload=True)
"""Gathered one tensor at a time; rank 0 gets the full state on its CPU, the others empty dicts."""


def mixed_precision(device: torch.device) -> MixedPrecisionPolicy:
    """bf16 gathers and fp32 gradient reduction on CUDA; on the CPU no casts (fp32 throughout)."""
    if device.type == "cuda":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def shard(model: LlamaEncoderForMaskedLM, policy: MixedPrecisionPolicy) -> LlamaEncoderForMaskedLM:
    """`fully_shard` on each block, then on the root, so a block's parameters are gathered only
    while it runs. (Ray's parallel_strategy="fsdp" is FSDP1 and GPU-only.)"""
    for block in model.model.layers:
        fully_shard(block, mp_policy=policy)
    return fully_shard(model, mp_policy=policy)


def from_rank0(produce: Callable[[], T]) -> T:
    """`produce()` run on rank 0, its (small, picklable) result handed to every rank. If it fails,
    every rank raises (the others would otherwise wait in the broadcast for good): rank 0 its own
    error, the others a RuntimeError naming it."""
    payload: list = [None]
    failure = None
    if dist.get_rank() == 0:
        try:
            payload = [("ok", produce())]
        except Exception as error:  # handed on below, then raised as is on rank 0
            failure = error
            payload = [("failed", f"{type(error).__name__}: {error}")]
    dist.broadcast_object_list(payload, src=0)
    outcome, value = payload[0]
    if failure is not None:
        raise failure
    if outcome == "failed":
        raise RuntimeError(f"rank 0 failed: {value}")
    return value


def sharded_model(load_full: Callable[[], LlamaEncoderForMaskedLM], device: torch.device,
                  configure: Callable[[LlamaEncoderForMaskedLM], None]) -> LlamaEncoderForMaskedLM:
    """The model `load_full()` gives on rank 0 (called there only, on the CPU), sharded over the
    process group on `device`. `configure` runs on the unsharded meta model of every rank
    (training mode, activation checkpointing, compilation: what must precede `fully_shard`)."""
    full = None

    def config_of_full():
        nonlocal full
        full = load_full()
        return full.config

    config = from_rank0(config_of_full)
    with torch.device("meta"):
        model = LlamaEncoderForMaskedLM(config)
    configure(model)
    shard(model, mixed_precision(device))
    model.to_empty(device=device)  # this rank's shards, uninitialised until the broadcast
    set_model_state_dict(model, full.state_dict() if full is not None else {}, options=FROM_RANK0)
    return model


def init_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Create the optimizer's state of every parameter (zeros) one parameter at a time, with a
    zero gradient for that parameter only and a learning rate of 0 (the parameters do not move).
    torch's own initialisation gives every parameter a zero gradient at once (4 P / W more at
    the load's peak); the loaded state then overwrites these zeros and step counts."""
    if optimizer.state:
        return
    learning_rates = [group["lr"] for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["lr"] = 0.0
    try:
        for group in optimizer.param_groups:
            for param in group["params"]:
                if param.requires_grad:
                    param.grad = torch.zeros_like(param)
                    optimizer.step()
                    param.grad = None
    finally:
        for group, lr in zip(optimizer.param_groups, learning_rates):
            group["lr"] = lr


def restore_optimizer(model, optimizer: torch.optim.Optimizer, full_state: dict | None) -> None:
    """Load the full optimizer state rank 0 passes (the other ranks pass None) into every rank's
    shards of it. Scalars (step counts) are copied: rank 0's may be views of a mapped file."""
    init_optimizer_state(optimizer)
    if full_state is not None:
        full_state = {**full_state, "state": {
            name: {key: value.clone() if torch.is_tensor(value) and value.dim() == 0 else value
                   for key, value in entry.items()}
            for name, entry in full_state["state"].items()}}
    set_optimizer_state_dict(model, optimizer, optim_state_dict=full_state or {}, options=FROM_RANK0)


def gathered_states(model, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """(model, optimizer) full state dicts on rank 0's CPU, FQN-keyed; empty dicts elsewhere (a
    collective: every rank calls it)."""
    return get_model_state_dict(model, options=TO_RANK0), get_optimizer_state_dict(model, optimizer, options=TO_RANK0)
