"""FSDP2 loading (trainables.sharding, through trainables.pretrain_loop) on two gloo ranks on the
CPU: while a resume checkpoint loads, rank 1 never holds the full model or the full optimizer
state, and a run resumed half-way trains the weights of the uninterrupted run.

Two process groups of two ranks each, real torch.distributed (~20 s): the first trains 4 steps
(CLM then MLM, 2 micro batches a rank) and saves a checkpoint at step 2 as the loop does; the
second, in fresh processes, resumes from it, measuring each rank's memory across the load, and
trains steps 2 and 3.

Memory is the resident set of the process (what the OS gives it), read from /proc/self/status:
writing 5 to /proc/self/clear_refs resets the peak (VmHWM) to the current resident set, so the
peak after a stage minus the resident set before it is the most the stage added at any moment,
tensors freed within the stage included. The loading processes are fresh: the allocator holds no
freed memory it could reuse unseen. Their mmap threshold is fixed (MALLOC_MMAP_THRESHOLD_): glibc
otherwise raises it to the size of each large block it frees (up to 32 MB), after which tensors
of that size come from the heap, whose holes between live shards stay resident (25-40% more
here), so the resident set would measure glibc's heuristics more than the tensors the code
holds. The measurement is shown to see a full read: a plain `torch.load` of the training state
(what every rank did before) adds at least 90% of the file.
"""
from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from sweeper.contract.registry import resolve
from sweeper.store.layout import TRAINING_STATE
from sweeper.contract.schedules import wsd_lr
from trainables.objectives import LossContext, RowDraws
from trainables.pretrain_loop import (
    full_states, prepared_model, restore_training_state, save_hf, write_training_state,
)
from trainables.sharding import mixed_precision
from trainables.train_step import train_step

from test_accumulation import MASK_ID, packed_batch, planned_run

WORLD = 2
MODEL = dict(vocab_size=512, hidden_size=512, intermediate_size=1408, num_hidden_layers=8, num_attention_heads=8,
             num_key_value_heads=8)
"""26.2 M parameters: 105 MB of fp32 weights, 210 MB of AdamW state (large enough to see in RSS)."""
STEPS, RESUME_AT = 4, 2
CPU = torch.device("cpu")


def sharded_run(folder: Path):
    """4 steps, CLM then MLM from step 2 (the resume crosses the switch), 8 rows a rank of 8
    tokens: the model's size is what the test measures, not its tokens (rows of 32 tokens cost
    the fixture 4 CPU-s more)."""
    return replace(planned_run(STEPS, run_dir=str(folder / "run"), workers=WORLD, micro_batch_size=4),
                   sharding="fsdp", model_config=MODEL, seq_len=8)


def resident_kib() -> dict[str, int]:
    status = Path("/proc/self/status").read_text()
    return {key: int(re.search(rf"{key}:\s+(\d+) kB", status).group(1)) for key in ("VmRSS", "VmHWM")}


def reset_peak() -> int:
    """Reset the peak resident set to the current one; returns the current one (bytes)."""
    Path("/proc/self/clear_refs").write_text("5")
    return resident_kib()["VmRSS"] * 1024


def peak() -> int:
    return resident_kib()["VmHWM"] * 1024


def join(rank: int, folder: Path, name: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder / name}", rank=rank, world_size=WORLD)


def train(model, optimizer, run, steps: range, rank: int) -> None:
    """The loop's step (trainables.pretrain_loop.train_loop_per_worker) on synthetic packed rows."""
    share = run.global_batch_size // WORLD
    for step in steps:
        phase = run.phase_at(step)
        for group in optimizer.param_groups:
            group["lr"] = wsd_lr(step, peak_lr=run.peak_lr, total_steps=run.total_steps,
                                 warmup_steps=run.warmup_steps, decay_steps=run.decay_steps)
        batch = packed_batch(run.global_batch_size, run.seq_len, seed=step).rows(rank * share, (rank + 1) * share)
        context = LossContext(draws=RowDraws(run.seed, step, first_row=rank * share), mask_token_id=MASK_ID,
                              vocab_size=MODEL["vocab_size"])
        train_step(model, optimizer, batch, resolve(phase.loss), phase.settings, context,
                   micro_batch_size=run.micro_batch_size, grad_clip=run.optimizer.grad_clip)


def save_full(model, optimizer, run, path: Path, rank: int) -> None:
    model_state, optimizer_state = full_states(model, optimizer, run, WORLD)
    if rank == 0:
        torch.save({"model": model_state, "optimizer": optimizer_state}, path)


def uninterrupted(rank: int, folder: Path) -> None:
    """Steps 0-3 from the initial weights; the loop's checkpoint at step 2, the full state at 4."""
    join(rank, folder, "rendezvous-uninterrupted")
    run = sharded_run(folder)
    model = prepared_model(None, run, MODEL["vocab_size"], WORLD, CPU)
    optimizer = torch.optim.AdamW(model.parameters(), lr=run.peak_lr, **run.optimizer.torch_kwargs())
    train(model, optimizer, run, range(RESUME_AT), rank)
    model_state, optimizer_state = full_states(model, optimizer, run, WORLD)
    if rank == 0:
        checkpoint = folder / f"step-{RESUME_AT}"
        save_hf(model, checkpoint, model_state)
        write_training_state(checkpoint, optimizer_state, RESUME_AT, [{"step": RESUME_AT}])
    del model_state, optimizer_state
    train(model, optimizer, run, range(RESUME_AT, STEPS), rank)
    save_full(model, optimizer, run, folder / "uninterrupted.pt", rank)
    dist.destroy_process_group()


def resumed(rank: int, folder: Path) -> None:
    """Fresh processes: load the step-2 checkpoint (measured), then steps 2-3."""
    join(rank, folder, "rendezvous-resumed")
    run, checkpoint = sharded_run(folder), folder / f"step-{RESUME_AT}"
    dist.barrier()  # gloo's first collective sets up its buffers: not part of the load
    before = reset_peak()
    model = prepared_model(checkpoint, run, MODEL["vocab_size"], WORLD, CPU)
    model_peak = peak() - before
    optimizer = torch.optim.AdamW(model.parameters(), lr=run.peak_lr, **run.optimizer.torch_kwargs())
    between = reset_peak()
    step, log, _ = restore_training_state(checkpoint, model, optimizer, run, WORLD)  # and the log window
    optimizer_peak = peak() - between
    load = {"model": model_peak, "optimizer": optimizer_peak, "whole": max(before + model_peak, peak()) - before,
            "step": step, "log": log}
    before_plain = reset_peak()
    plain = torch.load(checkpoint / TRAINING_STATE, weights_only=True)  # what every rank used to do
    load["plain_torch_load"] = peak() - before_plain
    del plain
    (folder / f"load-rank{rank}.json").write_text(json.dumps(load))
    train(model, optimizer, run, range(RESUME_AT, STEPS), rank)
    save_full(model, optimizer, run, folder / "resumed.pt", rank)
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fsdp")
    torch.multiprocessing.spawn(uninterrupted, args=(folder,), nprocs=WORLD, join=True)
    with pytest.MonkeyPatch.context() as patch:
        # Read by glibc as each rank starts; only the measured processes need it (it costs the
        # others a page fault on every block it maps afresh: 6 system CPU-s here).
        patch.setenv("MALLOC_MMAP_THRESHOLD_", str(64 * 1024))
        torch.multiprocessing.spawn(resumed, args=(folder,), nprocs=WORLD, join=True)
    return folder


def state_bytes(state: dict) -> int:
    return sum(t.numel() * t.element_size() for entry in state["state"].values() for t in entry.values())


@pytest.mark.slow  # with the next: ~40 CPU-s of the `runs` fixture (two gloo processes, twice)
def test_rank_1_never_holds_the_full_model_or_optimizer_state_while_a_checkpoint_loads(runs):
    state = torch.load(runs / f"step-{RESUME_AT}" / TRAINING_STATE, weights_only=True)
    optimizer_bytes = state_bytes(state["optimizer"])
    weight_bytes = sum(t.numel() * t.element_size()
                       for t in torch.load(runs / "uninterrupted.pt", weights_only=True)["model"].values())
    assert optimizer_bytes > 200e6 and optimizer_bytes == pytest.approx(2 * weight_bytes, rel=1e-5)  # + step counts
    load = json.loads((runs / "load-rank1.json").read_text())
    assert (load["step"], load["log"]) == (RESUME_AT, [{"step": RESUME_AT}])
    # The measurement sees a full read of the file.
    assert load["plain_torch_load"] > 0.9 * optimizer_bytes, load
    # Rank 1 holds its half of the weights (and one full tensor at a time, 3 MB here), then its
    # half of the optimizer state (and again one tensor at a time); a few MB of Python objects.
    # Before, it read the whole model (4 P bytes) and then the whole optimizer state (8 P bytes)
    # on top of its halves: over 100% of each.
    assert load["model"] < 0.75 * weight_bytes, load
    assert load["optimizer"] < 0.75 * optimizer_bytes, load
    assert load["whole"] < optimizer_bytes, load


@pytest.mark.slow
def test_a_run_resumed_half_way_trains_the_weights_of_the_uninterrupted_run(runs):
    """Same float operations on the same values in the same order (the checkpoint stores the fp32
    weights and AdamW state exactly, batches and draws are functions of the step, the process
    group has the same size): the weights and optimizer state must be equal, bit for bit."""
    uninterrupted, resumed = (torch.load(runs / name, weights_only=True) for name in ("uninterrupted.pt", "resumed.pt"))
    at_resume = torch.load(runs / f"step-{RESUME_AT}" / TRAINING_STATE, weights_only=True)["optimizer"]
    assert uninterrupted["model"].keys() == resumed["model"].keys()
    for key, value in uninterrupted["model"].items():
        assert torch.equal(value, resumed["model"][key]), key
    for name, entry in uninterrupted["optimizer"]["state"].items():
        assert entry.keys() == resumed["optimizer"]["state"][name].keys()
        assert all(torch.equal(value, resumed["optimizer"]["state"][name][key]) for key, value in entry.items()), name
        assert float(entry["step"]) == STEPS
        assert not torch.equal(entry["exp_avg"], at_resume["state"][name]["exp_avg"]), "steps 2-3 trained"


def test_parameters_are_gathered_in_bf16_on_cuda_and_untouched_on_the_cpu():
    on_cuda = mixed_precision(torch.device("cuda"))
    assert (on_cuda.param_dtype, on_cuda.reduce_dtype) == (torch.bfloat16, torch.float32)
    on_cpu = mixed_precision(CPU)
    assert (on_cpu.param_dtype, on_cpu.reduce_dtype) == (None, None)
