"""Micro-batches with gradient accumulation, split-independent randomness, activation
checkpointing and checkpoint retention (trainables.train_step, trainables.pretrain_loop)."""
from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sweeper.contract.configs import AdamWConfig, InitSource, PhaseConfig, PretrainConfig
from sweeper.contract.registry import objective_of
from trainables.corpus import document_layout
from trainables.model import LlamaEncoderConfig, build_model
from trainables.objectives import (
    IGNORE, LossContext, MaskingConfig, RowDraws, TokenBatch, clm_loss, mask_tokens, mlm_loss,
)
from trainables.pretrain_loop import evaluated_steps, retention, retention_priority, saved_steps
from trainables.train_step import train_step



VOCAB, MASK_ID, SEP_ID = 256, 4, 3
MLM = {"mask_ratio": 0.4, "random_replace": 0.1, "keep_original": 0.1}
TINY = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2)


def packed_batch(rows: int, seq: int, seed: int) -> TokenBatch:
    ids = torch.randint(5, VOCAB, (rows, seq), generator=torch.Generator().manual_seed(seed))
    ids[:, seq // 3] = SEP_ID  # two documents per row
    docs, positions = document_layout(ids, SEP_ID)
    return TokenBatch(ids, docs, positions, ids == SEP_ID)


def context(step: int, first_row: int = 0) -> LossContext:
    return LossContext(draws=RowDraws(7, step, first_row), mask_token_id=MASK_ID, vocab_size=VOCAB)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2 ** 31), step=st.integers(0, 10 ** 6), micro=st.sampled_from([1, 2, 4, 8, 16]))
def test_a_rows_draws_do_not_depend_on_the_split(seed, step, micro):
    whole = RowDraws(seed, step)
    expected = [whole.uniform((16, 24)), whole.integers(1000, (16, 24, 2))]
    parts = [RowDraws(seed, step).rows(start) for start in range(0, 16, micro)]
    got = [torch.cat([p.uniform((micro, 24)) for p in parts]), torch.cat([p.integers(1000, (micro, 24, 2))
                                                                          for p in parts])]
    assert all(torch.equal(a, b) for a, b in zip(expected, got))
    assert not torch.equal(expected[0], RowDraws(seed, step + 1).uniform((16, 24)))


def test_mlm_masks_are_the_same_in_one_pass_in_micro_batches_and_on_two_workers():
    batch = packed_batch(16, 40, seed=0)
    masking = MaskingConfig(mask_token_id=MASK_ID, vocab_size=VOCAB, **MLM)

    def masks(first_row: int, rows: int, micro: int):
        share = batch.rows(first_row, first_row + rows)
        return torch.cat([torch.cat(mask_tokens(share.input_ids[s:s + micro], share.special_mask[s:s + micro],
                                                masking, context(3, first_row).draws.rows(s)), dim=1)
                          for s in range(0, rows, micro)])

    one_pass = masks(0, 16, 16)
    assert torch.equal(one_pass, masks(0, 16, 4))
    assert torch.equal(one_pass, torch.cat([masks(0, 8, 8), masks(8, 8, 8)]))  # 2 workers x 8 rows
    assert (one_pass[:, 40:] != IGNORE).any()


@pytest.mark.parametrize("loss", [mlm_loss, clm_loss], ids=["mlm", "clm"])
def test_four_micro_batches_of_four_train_the_weights_of_one_pass_of_sixteen(loss):
    """In float64: AdamW divides by sqrt(v) + eps, so where a gradient is near zero a rounding
    difference of the summation order becomes an update of up to lr (float32 weights differed by
    1e-5 to 3e-5 after 3 steps, depending on the CPU's vector path). The gradients, which are what
    accumulation must get right, are compared after the first step in float32 as well."""
    one_pass = build_model(LlamaEncoderConfig(**TINY), seed=0).double()
    accumulated = copy.deepcopy(one_pass)
    lr, eps = 1e-3, 1e-8
    optimizers = {id(m): torch.optim.AdamW(m.parameters(), lr=lr, betas=(0.9, 0.95), eps=eps, weight_decay=0.1)
                  for m in (one_pass, accumulated)}
    for step in range(3):
        batch = packed_batch(16, 32, seed=step)
        results = [train_step(model, optimizers[id(model)], batch, loss, MLM, context(step), micro_batch_size=micro,
                              grad_clip=0.5)  # the clip binds: it must see the global gradient
                   for model, micro in ((one_pass, None), (accumulated, 4))]
        assert results[0].tokens == results[1].tokens > 0
        # float64 sums of <= 16 x 32 token losses in another grouping: ~1e-15 relative.
        assert results[0].loss == pytest.approx(results[1].loss, rel=1e-12)
    # Float64 gradients differ by rounding, |dg| <~ 1e-15; AdamW turns that into at most lr / eps
    # times as much per step (d(g / (|g| + eps)) / dg <= 1 / eps): 1e-3 / 1e-8 * 1e-15 = 1e-10, x 3 steps.
    bound = 3 * lr / eps * 1e-15
    for (name, a), b in zip(one_pass.named_parameters(), accumulated.parameters()):
        assert torch.allclose(a, b, rtol=0, atol=bound), (name, (a - b).abs().max().item())
    assert not torch.allclose(one_pass.lm_head.weight,
                              build_model(LlamaEncoderConfig(**TINY), 0).lm_head.weight.double(), atol=1e-4)


@pytest.mark.parametrize("loss", [mlm_loss, clm_loss], ids=["mlm", "clm"])
def test_four_micro_batches_of_four_give_the_float32_gradient_of_one_pass_of_sixteen(loss):
    """The accumulated, normalised and clipped gradient of one step, before any optimizer acts."""
    grads = {}
    for micro in (None, 4):
        model = build_model(LlamaEncoderConfig(**TINY), seed=0)
        captured = CapturingSGD(model.parameters())
        train_step(model, captured, packed_batch(16, 32, seed=0), loss, MLM, context(0), micro_batch_size=micro,
                   grad_clip=0.5)
        grads[micro] = captured.grads
    for (name, _), a, b in zip(model.named_parameters(), grads[None], grads[4]):
        # float32 sums of 16 x 32 token terms in another grouping: ~1e-7 relative (atol: entries
        # that cancel to ~0, at float32 epsilon times the clipped gradient's scale).
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-8, msg=name)


class CapturingSGD(torch.optim.Optimizer):
    """An optimizer whose step keeps a copy of each gradient and changes nothing."""

    def __init__(self, params):
        super().__init__(params, {})
        self.grads = []

    def step(self, closure=None):
        self.grads = [p.grad.detach().clone() for group in self.param_groups for p in group["params"]]


def test_activation_checkpointing_gives_the_same_gradients():
    plain = build_model(LlamaEncoderConfig(**TINY), seed=0)
    checkpointed = copy.deepcopy(plain)
    checkpointed.activation_checkpointing_enable()
    attention_calls = []
    for block in checkpointed.model.layers:  # inside the checkpoint: runs again in the backward pass
        block.self_attn.register_forward_hook(lambda *_: attention_calls.append(1))
    batch = packed_batch(4, 32, seed=1)
    for model in (plain, checkpointed):
        summed, _ = mlm_loss(model, batch, MLM, context(0))
        summed.backward()
    assert len(attention_calls) == 2 * len(checkpointed.model.layers), "forward + recompute per block"
    for (name, a), b in zip(plain.named_parameters(), checkpointed.parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-7), name


def test_retention_keeps_evaluated_checkpoints_and_the_newest_resume_points():
    saved = [1, 2, 3, 4, 5, 6]
    assert retention(saved, {3, 6}, keep=1) == ({1, 2, 4, 5}, {3})
    assert retention(saved, {3, 6}, keep=2) == ({1, 2, 4}, {3})
    assert retention(saved[:3], {3, 6}, keep=1) == ({1, 2}, set())  # the newest keeps its state
    # a step another run branches from keeps its weights and its training state
    assert retention(saved, {3, 6}, keep=1, branch={2, 3}) == ({1, 4, 5}, set())


@settings(max_examples=40, deadline=None)
@given(total=st.integers(2, 40), every=st.integers(0, 7), keep=st.integers(1, 3),
       intermediate=st.sets(st.integers(1, 39), max_size=3), branch=st.sets(st.integers(1, 39), max_size=2))
def test_rays_top_n_by_priority_ends_with_the_retention_set(total, every, keep, intermediate, branch):
    """Ray Train (2.60) keeps the `num_to_keep` checkpoints of highest score plus always the latest
    (CheckpointManager._save_state_and_delete_old_checkpoints); with our priorities it never
    deletes an evaluated checkpoint or one of the newest `keep`, and ends with `retention`'s set
    (with keep > 1, plus a resume-only one per evaluated checkpoint among the newest `keep`)."""
    from trainables.pretrain_loop import ray_checkpoint_config

    run = planned_run(total, save_every=every, checkpoint_steps=tuple(s for s in sorted(intermediate) if s < total),
                      keep=keep)
    run = replace(run, branch_steps=tuple(s for s in sorted(branch) if s < total))  # kept like evaluated ones
    num_to_keep = ray_checkpoint_config(run).num_to_keep
    evaluated, kept = evaluated_steps(run) | set(run.branch_steps), []
    for step in saved_steps(run, total):
        kept = sorted(kept + [step], key=lambda s: retention_priority(run, s))
        kept = [s for i, s in enumerate(kept) if i >= len(kept) - num_to_keep or s == step]
        assert evaluated & set(saved_steps(run, step)) <= set(kept)
        assert set(saved_steps(run, step)[-keep:]) <= set(kept)
    drop, _ = retention(saved_steps(run, total), evaluated, keep)
    wanted = set(saved_steps(run, total)) - drop
    assert set(kept) == wanted if keep == 1 else wanted <= set(kept) and len(kept) < len(wanted) + keep


def planned_run(total: int, *, save_every: int = 1, checkpoint_steps: tuple[int, ...] = (), keep: int = 1,
                run_dir: str = "unused", corpus_dir: str = "unused", workers: int = 0,
                micro_batch_size: int | None = None, switch: int | None = None) -> PretrainConfig:
    """A CLM -> MLM run of `total` steps switching at `switch` (default: half-way)."""
    switch = total // 2 if switch is None else switch
    phases = (PhaseConfig(objective="clm", loss=objective_of("clm").loss, start_step=0, end_step=switch),
              PhaseConfig(objective="mlm", loss=objective_of("mlm").loss, start_step=switch, end_step=total,
                          settings={**objective_of("mlm").settings, "mask_ratio": 0.4}))
    return PretrainConfig(
        name=Path(run_dir).name, run_key="accumulation", objective="clm-mlm", mask_ratio=0.4,
        clm_fraction=switch / total, switch_step=switch, run_dir=run_dir, corpus_dir=corpus_dir,
        model_config={**TINY, "vocab_size": 512}, init=InitSource(kind="scratch"), phases=phases,
        total_steps=total, checkpoint_steps=checkpoint_steps, global_batch_size=16, seq_len=32, peak_lr=3e-3,
        # eps bounds AdamW's amplification of rounding (the DDP test's tolerance).
        optimizer=AdamWConfig(eps=1e-5), warmup_steps=1, decay_steps=2, seed=0, data_seed=0, log_every=1,
        save_every=save_every, workers=workers, threads=1, micro_batch_size=micro_batch_size,
        keep_resume_checkpoints=keep)
