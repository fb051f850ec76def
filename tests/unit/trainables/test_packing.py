"""Packed fine-tuning batches compute what padded ones compute (trainables/tasks/packing.py).

Per family, on the shipped WordNet tasks: the same weights give the same loss, the same
gradients and the same score with packing on and off (fp32; the padded pass is the reference),
a whole trial gives the same losses and scores (fp64: AdamW amplifies rounding differences),
and the packed path's forward passes hold almost only real tokens. Extractive QA's long
contexts still become windows that overlap by the stride.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sweeper.contract.configs import AdamWConfig, FinetuneProtocol, TrialConfig, TrialRuntime
from sweeper.contract.registry import family_of, get_task, resolve
from trainables.finetune_loop import cached_task_data, run_trial
from trainables.model import LlamaEncoderConfig, LlamaEncoderModel
from trainables.tasks import data as task_data
from trainables.tasks.packing import TOKEN_COUNTS, PackedBackbone, plan_rows
from trainables.tasks.qa import special_ids


TASK_NAMES = ["wordnet-supersense-cls", "wordnet-supersense-tag", "wordnet-supersense-qa", "wordnet-usage-retrieval"]
MAX_LENGTH = {"extractive_qa": 48}  # short windows: the longer glosses need several
DEFAULT_LENGTH, STRIDE = 96, 8
SETTINGS = {"doc_stride": STRIDE, "retrieval_temperature": 0.05}
BACKBONE = {"vocab_size": 512, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2}
PROTOCOL = FinetuneProtocol(learning_rate=3e-3, batch_size=8, max_steps=4, epochs=1.0, max_length=DEFAULT_LENGTH,
                            warmup_ratio=0.1, optimizer=AdamWConfig(betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1,
                                                                    grad_clip=1.0))




@pytest.fixture
def float64_default():
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(dtype)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, wordpiece_dir):
    """Task name -> (prepared folder, max_length), 64 training and 48 evaluation examples each."""
    out = {}
    for name in TASK_NAMES:
        task = get_task(name)
        length = MAX_LENGTH.get(task.family, DEFAULT_LENGTH)
        folder = tmp_path_factory.mktemp(name)
        task_data.prepare_task_data(task, family_of(task.family).implementation, wordpiece_dir, length, str(folder),
                                    64, 48, {"doc_stride": STRIDE})
        out[name] = (str(folder), length)
    return out


def protocol_for(name: str, length: int) -> FinetuneProtocol:
    family = family_of(get_task(name).family)
    return replace(PROTOCOL, max_length=length, family_settings={k: SETTINGS[k] for k in family.settings})


def model_for(name: str, meta: dict):
    torch.manual_seed(0)
    family = resolve(family_of(get_task(name).family).implementation)
    return family, family.build(PackedBackbone(LlamaEncoderModel(LlamaEncoderConfig(**BACKBONE))), meta)


def loss_and_gradients(model, family, split, rows, protocol, packing: bool):
    model.backbone.packing = packing
    model.zero_grad(set_to_none=True)
    loss = family.loss(model, split, rows, torch.device("cpu"), protocol)
    loss.backward()
    return loss.item(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", TASK_NAMES)
def test_a_packed_batch_gives_the_padded_loss_gradients_and_score(prepared, name):
    folder, length = prepared[name]
    meta, splits = cached_task_data(folder)
    family, model = model_for(name, meta)
    protocol = protocol_for(name, length)
    rows = np.arange(min(8, family.train_size(splits["train"])))
    padded_loss, padded_grads = loss_and_gradients(model, family, splits["train"], rows, protocol, packing=False)
    packed_loss, packed_grads = loss_and_gradients(model, family, splits["train"], rows, protocol, packing=True)
    # float32 sums of <= 96 terms reordered, x 20 by retrieval's 1/0.05: 2 * 20 * sqrt(96) * 2**-24 / 3.5 ~ 7e-6.
    assert packed_loss == pytest.approx(padded_loss, rel=1e-5)
    assert packed_grads.keys() == padded_grads.keys() and len(packed_grads) > 4
    for key, grad in padded_grads.items():
        # float32 sums of <= 8 x 96 token terms reordered: ~sqrt(768) * 2**-24 ~ 2e-6 of the scale, near-0 entries too.
        scale = grad.abs().max().item()
        torch.testing.assert_close(packed_grads[key], grad, rtol=1e-5, atol=1e-5 * scale, msg=key)

    model.eval()
    scores = {}
    with torch.no_grad():
        for packing in (False, True):
            model.backbone.packing = packing
            TOKEN_COUNTS.reset()
            scores[packing] = [family.score(model, splits[split], meta, 16, torch.device("cpu"), protocol)
                               for split in ("validation", "test")]
            if packing:  # QA windows are mostly near max_length: whole ones pack less tightly
                assert TOKEN_COUNTS.useful_fraction >= (0.85 if "qa" in name else 0.9), "rows hold mostly real tokens"
            else:
                padded_fraction = TOKEN_COUNTS.useful_fraction
    # Same predictions, same float64 score; one changed prediction or relevant rank moves it by >~ 1e-2.
    assert scores[True] == pytest.approx(scores[False], abs=1e-6)
    if "qa" not in name:  # QA windows fill max_length; the other families' rows are short
        assert padded_fraction < 0.6, "the padded reference is mostly padding at this length"


@pytest.mark.parametrize("name", TASK_NAMES)
def test_a_packed_trial_trains_and_scores_like_a_padded_one(prepared, name, float64_default):
    """In float64: AdamW (lr 3e-3, eps 1e-5) turns a gradient's rounding difference into an update up to
    lr / eps = 300 times as large (float32 losses differed by up to 2e-6 after 3 steps, by CPU vector path)."""
    folder, length = prepared[name]
    family = family_of(get_task(name).family)
    results = {}
    for packing in (False, True):
        results[packing] = run_trial(TrialConfig(
            trial_key=f"{name}-{packing}", task=get_task(name), family=family.implementation, seed=3,
            checkpoint_path=None, protocol=protocol_for(name, length), task_data_dir=folder,
            runtime=TrialRuntime(micro_batch_size=4, eval_batch_size=16, packing=packing), random_init_config=BACKBONE))
    padded, packed = results[False], results[True]
    assert padded["status"] == packed["status"] == "ok" and packed["train_steps"] == 4
    # Weights <~ 1e-12 apart; the heads' float32 loss at most rounds otherwise: 2 * (1 / 0.05) * 2**-24 ~ 2e-6.
    assert packed["train_loss"] == pytest.approx(padded["train_loss"], rel=1e-5)
    for key in ("validation_score", "test_score"):
        # Same predictions, same float64 score; one changed prediction or relevant rank moves it by >~ 1e-2.
        assert packed[key] == pytest.approx(padded[key], abs=1e-4), key


def test_long_qa_contexts_still_window_with_their_stride(prepared, wordpiece_dir):
    """Windows are made when the task is encoded, before any packing: a context longer than the
    window is cut into windows whose consecutive context spans share STRIDE tokens."""
    folder, length = prepared["wordnet-supersense-qa"]
    meta, splits = cached_task_data(folder)
    from transformers import AutoTokenizer

    first, sep = special_ids(AutoTokenizer.from_pretrained(wordpiece_dir))
    split = splits["train"]
    examples, counts = np.unique(split["example_index"], return_counts=True)
    assert counts.max() > 1, "some contexts need several windows at this length"
    checked = 0
    for example in examples[counts > 1]:
        windows = np.nonzero(split["example_index"] == example)[0]
        spans = []
        for w in windows:
            offsets = split["offsets"][w]
            context = offsets[:, 0] >= 0
            spans.append([tuple(o) for o in offsets[context]])
        for before, after in zip(spans, spans[1:]):
            shared = len(set(before) & set(after))
            # The last window is aligned to the context's end, so it may share more than the stride.
            assert shared >= STRIDE and after[0] > before[0]
            if after is not spans[-1]:
                assert shared == STRIDE
        checked += 1
    assert checked >= 3
    ids = split["input_ids"][windows[0]]
    assert ids[0] == first and sep in ids


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=40), st.integers(1, 400))
def test_rows_hold_every_example_once_within_capacity(lengths, capacity):
    capacity = max(capacity, max(lengths))
    rows, offsets, width = plan_rows(lengths, capacity)
    occupied: dict[int, list[tuple[int, int]]] = {}
    for length, row, offset in zip(lengths, rows, offsets):
        occupied.setdefault(row, []).append((offset, offset + length))
    assert sorted(occupied) == list(range(len(occupied)))
    for spans in occupied.values():
        spans.sort()
        assert spans[0][0] == 0 and spans[-1][1] <= width <= capacity
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), "examples sit back to back"
    # First fit opens a row only for an example no earlier row had room for, so any two rows
    # together hold more than one row can: no two could have been one.
    fills = sorted(spans[-1][1] for spans in occupied.values())
    assert len(fills) < 2 or fills[0] + fills[1] > capacity

