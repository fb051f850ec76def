"""Objectives: masking statistics, loss placement, causality, phase switching, LR schedule."""
import inspect
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sweeper.plan.phases import switch_step
from sweeper.contract.configs import AdamWConfig, InitSource, PhaseConfig, PretrainConfig
from sweeper.contract.registry import current, objective_of, resolve
from trainables.corpus import document_layout
from trainables.model import LlamaEncoderConfig, build_model
from trainables.objectives import (
    IGNORE, LossContext, MaskingConfig, ObjectiveLoss, RowDraws, TokenBatch, clm_loss, clm_targets, mask_tokens,
    mlm_loss,
)
from sweeper.contract.schedules import linear_warmup_decay_lr, wsd_lr



VOCAB, MASK_ID, SEP_ID = 512, 4, 3
MLM_SETTINGS = {"mask_ratio": 0.3, "random_replace": 0.0, "keep_original": 0.0}


def tiny_model(seed=0):
    return build_model(LlamaEncoderConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                          num_hidden_layers=2, num_attention_heads=4,
                                          num_key_value_heads=2), seed)


def token_batch(ids: torch.Tensor, position_ids: torch.Tensor | None = None) -> TokenBatch:
    docs, pos = document_layout(ids, SEP_ID)
    return TokenBatch(ids, docs, pos if position_ids is None else position_ids, ids == SEP_ID)


def loss_context(seed: int) -> LossContext:
    return LossContext(draws=RowDraws(seed, step=0), mask_token_id=MASK_ID, vocab_size=VOCAB)


def planned_run(total: int, switch: int) -> PretrainConfig:
    """A run of `total` steps, CLM before `switch` and MLM from there, as the driver plans it
    (a phase of no steps is left out)."""
    phases = tuple(phase for phase in (
        PhaseConfig(objective="clm", loss=objective_of("clm").loss, start_step=0, end_step=switch),
        PhaseConfig(objective="mlm", loss=objective_of("mlm").loss, start_step=switch, end_step=total,
                    settings=objective_of("mlm").settings),
    ) if phase.start_step < phase.end_step)
    return PretrainConfig(
        name="test", run_key="test", objective="-".join(p.objective for p in phases), mask_ratio=0.4,
        clm_fraction=switch / total, switch_step=switch, run_dir="unused", corpus_dir="unused", model_config={},
        init=InitSource(kind="scratch"), phases=phases, total_steps=total, checkpoint_steps=(), global_batch_size=4,
        seq_len=8, peak_lr=1e-3, optimizer=AdamWConfig(), warmup_steps=0, decay_steps=0, seed=0, data_seed=0)


@settings(max_examples=25, deadline=None)
@given(p=st.floats(0.05, 0.95), seed=st.integers(0, 10_000))
def test_masked_fraction_is_close_to_p(p, seed):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (64, 256), generator=generator)
    special = torch.zeros_like(ids, dtype=torch.bool)
    corrupted, labels = mask_tokens(ids, special, MaskingConfig(mask_ratio=p, mask_token_id=MASK_ID,
                                                                vocab_size=VOCAB), RowDraws(seed, step=1))
    fraction = (labels != IGNORE).float().mean().item()
    # 16,384 Bernoulli draws: 5 standard deviations is a tolerance a correct sampler never misses.
    assert abs(fraction - p) < 5 * math.sqrt(p * (1 - p) / ids.numel())
    selected = labels != IGNORE
    assert torch.equal(labels[selected], ids[selected])
    assert (corrupted[selected] == MASK_ID).all(), "default strategy replaces every selected token"
    assert torch.equal(corrupted[~selected], ids[~selected])


def test_special_tokens_are_never_masked():
    ids = torch.full((8, 64), SEP_ID)
    ids[:, ::2] = 100
    special = ids == SEP_ID
    _, labels = mask_tokens(ids, special, MaskingConfig(mask_ratio=0.9, mask_token_id=MASK_ID, vocab_size=VOCAB),
                            RowDraws(0, step=0))
    assert (labels[special] == IGNORE).all()
    assert (labels[~special] != IGNORE).any()


def test_bert_style_replacement_shares():
    ids = torch.randint(5, VOCAB, (128, 256))
    config = MaskingConfig(mask_ratio=0.5, mask_token_id=MASK_ID, vocab_size=VOCAB,
                           random_replace=0.1, keep_original=0.1)
    corrupted, labels = mask_tokens(ids, torch.zeros_like(ids, dtype=torch.bool), config, RowDraws(1, step=0))
    selected = labels != IGNORE
    share_masked = (corrupted[selected] == MASK_ID).float().mean().item()
    share_unchanged = (corrupted[selected] == ids[selected]).float().mean().item()
    # ~16,384 selected tokens: 0.02 is 6 standard deviations of the 0.8 share (0.003), 8 of the 0.1 share (0.0023).
    assert abs(share_masked - 0.8) < 0.02
    assert abs(share_unchanged - 0.1) < 0.02  # kept + random draws that hit the same id (1/512)


def test_mlm_loss_is_on_masked_positions_only():
    model = tiny_model()
    ids = torch.randint(5, VOCAB, (2, 32))
    batch = token_batch(ids)
    docs, pos, special = batch.document_ids, batch.position_ids, batch.special_mask
    loss, n_predicted = mlm_loss(model, batch, MLM_SETTINGS, loss_context(3))
    config = MaskingConfig(mask_ratio=0.3, mask_token_id=MASK_ID, vocab_size=VOCAB)
    corrupted, labels = mask_tokens(ids, special, config, RowDraws(3, step=0))
    logits = model(corrupted, document_ids=docs, position_ids=pos).logits
    selected = labels != IGNORE
    expected = torch.nn.functional.cross_entropy(logits[selected], ids[selected], reduction="sum")
    assert n_predicted == int(selected.sum()) > 0
    # Only the head's rows are laid out otherwise: logits <= 32 * 2**-24 * 0.6 apart, x 2 x ~20 tokens / ~130: 4e-7.
    assert torch.allclose(loss, expected, rtol=1e-6, atol=0)
    # Targets at unmasked positions do not enter the loss: changing them changes nothing.
    assert (labels[~selected] == IGNORE).all()


def test_mlm_settings_reach_the_masking():
    """random_replace and keep_original are the phase's settings; the masking draws follow them."""
    ids = torch.randint(5, VOCAB, (2, 32))
    bert = {"mask_ratio": 0.5, "random_replace": 0.1, "keep_original": 0.1}
    seen = []

    def model(inputs, **kwargs):
        seen.append(inputs)
        return tiny_model()(inputs, **kwargs)
    mlm_loss(model, token_batch(ids), bert, loss_context(5))
    config = MaskingConfig(mask_token_id=MASK_ID, vocab_size=VOCAB, **bert)
    expected, _ = mask_tokens(ids, ids == SEP_ID, config, RowDraws(5, step=0))
    assert torch.equal(seen[0], expected)


def test_registered_losses_have_the_objective_loss_signature():
    expected = list(inspect.signature(ObjectiveLoss.__call__).parameters)[1:]
    for info in current().objectives.values():
        loss = resolve(info.loss)
        assert list(inspect.signature(loss).parameters) == expected, info.name
    assert resolve(objective_of("mlm").loss) is mlm_loss and resolve(objective_of("clm").loss) is clm_loss


def test_clm_logits_ignore_the_future():
    model = tiny_model()
    ids = torch.randint(5, VOCAB, (3, 24))
    changed = ids.clone()
    changed[:, 12:] = torch.randint(5, VOCAB, (3, 12))
    before = model(ids, causal=True).logits
    after = model(changed, causal=True).logits
    # Rows that see the same tokens: equal, or sums of <= 64 O(1) terms in another order (64 * 2**-24 ~ 4e-6).
    assert torch.allclose(before[:, :12], after[:, :12], atol=1e-5)
    assert not torch.allclose(before[:, 12:], after[:, 12:], atol=1e-3)  # new tokens move logits by ~0.6
    # Bidirectional attention (MLM, fine-tuning) does see the future: same weights, other mask (~0.1 apart).
    assert not torch.allclose(model(ids).logits[:, :12], model(changed).logits[:, :12], atol=1e-3)


def test_packed_documents_do_not_see_each_other():
    model = tiny_model()
    ids = torch.randint(5, VOCAB, (1, 20))
    ids[0, 9] = SEP_ID  # the first document is positions 0..9
    docs, pos = document_layout(ids, SEP_ID)
    assert docs[0, 9] == 0 and docs[0, 10] == 1 and pos[0, 10] == 0
    changed = ids.clone()
    changed[0, 10:] = torch.randint(5, VOCAB, (10,))
    before = model(ids, document_ids=docs, position_ids=pos).logits
    after = model(changed, document_ids=docs, position_ids=pos).logits
    assert torch.allclose(before[:, :10], after[:, :10], atol=1e-5)  # the same tokens: as in the causal test


def test_clm_targets_stop_at_document_boundaries():
    ids = torch.tensor([[10, 11, SEP_ID, 20, 21, 22]])
    docs, _ = document_layout(ids, SEP_ID)
    assert clm_targets(ids, docs).tolist() == [[11, SEP_ID, IGNORE, 21, 22, IGNORE]]
    loss, n = clm_loss(tiny_model(), token_batch(ids, torch.arange(6)[None]), {}, loss_context(0))
    assert n == 4 and torch.isfinite(loss)


@pytest.mark.parametrize("total,fraction", [(300, 0.25), (300, 0.5), (42_000, 0.25), (12_000, 0.75), (7, 0.5)])
def test_objective_switches_exactly_at_the_planned_step(total, fraction):
    switch = switch_step(total, fraction)
    assert switch == round(fraction * total)
    run = planned_run(total, switch)
    phases = [run.phase_at(s).objective for s in range(total)]
    assert phases[:switch] == ["clm"] * switch
    assert phases[switch:] == ["mlm"] * (total - switch)


def test_pure_objectives_never_switch():
    assert {planned_run(100, switch_step(100, 0.0)).phase_at(s).objective for s in range(100)} == {"mlm"}
    assert {planned_run(100, switch_step(100, 1.0)).phase_at(s).objective for s in range(100)} == {"clm"}


def test_pre_decay_convention_matches_the_authors_names():
    assert switch_step(42_000, 0.25, decay_steps=2000, of="pre_decay") == 10_000
    assert switch_step(42_000, 1.0, decay_steps=2000, of="pre_decay") == 40_000


def test_warmup_stable_decay_shape():
    lrs = [wsd_lr(s, peak_lr=1.0, total_steps=100, warmup_steps=10, decay_steps=20) for s in range(100)]
    # Python floats, the schedule's formula: approx's default.
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(lr == 1.0 for lr in lrs[10:80])
    assert all(a > b for a, b in zip(lrs[80:], lrs[81:]))
    assert lrs[-1] == pytest.approx(0.0)


def test_finetuning_schedule_warms_up_then_decays_to_zero():
    lrs = [linear_warmup_decay_lr(s, peak_lr=1.0, total_steps=50, warmup_ratio=0.1) for s in range(50)]
    # Python floats, the schedule's formula: approx's default.
    assert lrs[4] == pytest.approx(1.0) and max(lrs) == pytest.approx(1.0)
    assert lrs[-1] < lrs[10] and lrs[-1] == pytest.approx(1 / 45)
