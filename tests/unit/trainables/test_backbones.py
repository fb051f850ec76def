"""Checkpoints the study did not train fine-tune as its own do (trainables/backbones.py).

On a tiny BERT, ModernBERT, EuroBERT, Llama and Qwen3 (tests/support/tiny_checkpoints.py) with their own
tokenizers: the wrapper computes what each model computes with its own masks (decoders: made
bidirectional), packed batches give the padded loss, gradients and scores through the real task
heads, the probe trusts packing for each of them and catches a backbone that lets packed
examples see each other, which then trains with dynamic padding; QA encodes with tokenizers that
have no CLS or BOS. Tolerances as in tests/unit/trainables/test_packing.py: fp32 where a single pass is
compared, fp64 where AdamW's steps would amplify rounding.
"""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from transformers import AutoModel

from sweeper.contract.configs import TrialConfig, TrialRuntime
from sweeper.contract.registry import family_of, get_task, resolve
from trainables import finetune_loop
from trainables.backbones import HuggingFaceBackbone, load_backbone
from trainables.finetune_loop import cached_task_data, run_trial
from trainables.model import LlamaEncoderConfig, LlamaEncoderModel, build_model
from trainables.tasks import data as task_data
from trainables.tasks.packing import PROBE_TOLERANCE, TOKEN_COUNTS, PackedBackbone, packing_error
from trainables.tasks.qa import best_answers, encode_examples, special_ids

from test_packing import (  # noqa: F401  (a fixture: float64 on demand)
    DEFAULT_LENGTH, MAX_LENGTH, STRIDE, TASK_NAMES, float64_default, loss_and_gradients, protocol_for)
from tiny_checkpoints import KINDS, build_tiny_checkpoint

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, str]:
    return {kind: str(build_tiny_checkpoint(kind, tmp_path_factory.mktemp(kind))) for kind in KINDS}


@pytest.fixture(scope="module")
def prepared(checkpoints, tmp_path_factory) -> dict[tuple[str, str], tuple[str, int]]:
    """(kind, task) -> (the task tokenised by the kind's own tokenizer, max_length). A task's rows
    do not depend on the tokenizer: they are read from the shipped files once, not once per kind
    (reading WordNet's rows is most of a preparation's time), and each kind encodes its own copy."""
    read = {}
    rows = task_data.load_task_splits

    def rows_read_once(task, *args):
        if (task.name, *args) not in read:
            read[task.name, *args] = rows(task, *args)
        return copy.deepcopy(read[task.name, *args])

    out = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(task_data, "load_task_splits", rows_read_once)
        for kind, folder in checkpoints.items():
            for name in TASK_NAMES:
                task = get_task(name)
                length = MAX_LENGTH.get(task.family, DEFAULT_LENGTH)
                location = str(tmp_path_factory.mktemp(f"{kind}-{name}"))
                task_data.prepare_task_data(task, family_of(task.family).implementation, folder, length, location,
                                            32, 24, {"doc_stride": STRIDE})
                out[kind, name] = (location, length)
    assert len(read) == len(TASK_NAMES)
    return out


@pytest.fixture
def fresh_probe_verdicts():
    """Verdicts are cached per process: a test that swaps the backbone a path loads must not
    read (or leave) another test's."""
    finetune_loop.packing_is_sound.cache_clear()
    yield
    finetune_loop.packing_is_sound.cache_clear()


def padded_batch(lengths: list[int], width: int, vocab_size: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).to(torch.int64)
    return torch.randint(5, vocab_size, (len(lengths), width), generator=generator) * mask, mask


@pytest.mark.parametrize("kind", KINDS)
def test_the_wrapper_computes_what_the_model_computes_with_its_own_masks(checkpoints, kind):
    """Encoders: the model's own 2-D padding mask (ModernBERT's sliding window included: the
    examples outgrow its 16-token window); decoders: transformers' own bidirectional masks
    (`config.is_causal = False`). Eager attention, given the additive form, agrees with SDPA."""
    backbone = load_backbone(checkpoints[kind]).eval()
    ids, mask = padded_batch([5, 40, 23, 12], 48, backbone.config.vocab_size)
    real = mask.bool()
    backbone.model.config.is_causal = False  # a decoder's own masks, made bidirectional; encoders ignore it
    eager = HuggingFaceBackbone(AutoModel.from_pretrained(checkpoints[kind], attn_implementation="eager")).eval()
    with torch.no_grad():
        wrapped = backbone(ids, attention_mask=mask).last_hidden_state
        own = backbone.model(input_ids=ids, attention_mask=mask).last_hidden_state
        additive = eager(ids, attention_mask=mask).last_hidden_state
    assert isinstance(backbone, HuggingFaceBackbone) and eager.config._attn_implementation == "eager"
    # Same masks, same kernel: the same float32 operations.
    torch.testing.assert_close(wrapped[real], own[real], rtol=0, atol=1e-6)
    # Eager's matmul + softmax against SDPA's fused kernel: float32 rounding (measured <= 2.5e-7 of the scale).
    torch.testing.assert_close(additive[real], wrapped[real], rtol=0, atol=1e-5 * wrapped.abs().max().item())


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_is_bidirectional_even_a_decoder(checkpoints, kind):
    """Changing an example's last token changes its first token's hidden state, packed or not."""
    backbone = load_backbone(checkpoints[kind]).eval()
    ids, mask = padded_batch([12, 30, 7], 32, backbone.config.vocab_size)
    changed = ids.clone()
    changed[0, 11] = (ids[0, 11] + 1) % backbone.config.vocab_size
    for packing in (False, True):
        wrapped = PackedBackbone(backbone, packing)
        with torch.no_grad():
            before, after = (wrapped(x, mask).last_hidden_state for x in (ids, changed))
        # A causal first token would not move at all; bidirectional, it moves by ~1e-2 of the scale or more.
        assert (after[0, 0] - before[0, 0]).abs().max() > 1e-3 * before.abs().max(), (kind, packing)
        # ... while another example does not see the change (to float32 rounding of a different batch).
        torch.testing.assert_close(after[1:], before[1:], rtol=0, atol=1e-6 * before.abs().max().item())


@pytest.mark.parametrize("kind", KINDS)
def test_the_probe_trusts_packing_for_every_kind(checkpoints, kind):
    error, scale = packing_error(load_backbone(checkpoints[kind]), CPU)
    assert 0 < scale and error <= PROBE_TOLERANCE * scale, (error, scale)


@pytest.mark.parametrize("name", TASK_NAMES)
@pytest.mark.parametrize("kind", KINDS)
def test_packed_and_dynamically_padded_batches_give_the_padded_loss_gradients_and_scores(
        checkpoints, prepared, kind, name):
    folder, length = prepared[kind, name]
    meta, splits = cached_task_data(folder)
    family = resolve(family_of(get_task(name).family).implementation)
    torch.manual_seed(0)
    model = family.build(PackedBackbone(load_backbone(checkpoints[kind])), meta)
    protocol = protocol_for(name, length)
    rows = np.arange(min(8, family.train_size(splits["train"])))
    runs, scores, computed = {}, {}, {}
    for mode, packing, dynamic in (("padded", False, False), ("packed", True, False), ("dynamic", False, True)):
        model.backbone.dynamic_padding = dynamic
        model.train()
        runs[mode] = loss_and_gradients(model, family, splits["train"], rows, protocol, packing)
        model.eval()
        TOKEN_COUNTS.reset()
        with torch.no_grad():  # one split: validation is scored by the same code (test_packing scores both)
            scores[mode] = family.score(model, splits["test"], meta, 16, CPU, protocol)
        computed[mode] = TOKEN_COUNTS.computed
    # Classification heads already cut batches to their longest row; QA windows and retrieval texts are padded.
    assert computed["dynamic"] <= computed["padded"]
    if "retrieval" in name:
        assert computed["dynamic"] < 0.8 * computed["padded"], "dynamic padding skips most of the padding"
    padded_loss, padded_grads = runs["padded"]
    assert len(padded_grads) > 4
    # Some gradients are zero in exact arithmetic (BERT's key bias: softmax ignores a shift shared
    # by a query's logits; the last norm's bias under QA's span softmax): they hold rounding of
    # cancelling terms, <= 2e-9 of the largest gradient measured, so their floor is set by it.
    largest = max(grad.abs().max().item() for grad in padded_grads.values())
    for mode in ("packed", "dynamic"):
        loss, grads = runs[mode]
        # float32 sums of <= 96 terms reordered, x 20 by retrieval's 1/0.05: ~1e-5 (measured <= 1e-7).
        assert loss == pytest.approx(padded_loss, rel=1e-4), mode
        assert grads.keys() == padded_grads.keys()
        for key, grad in padded_grads.items():
            # float32 sums of <= 8 x 96 token terms reordered, through 2 layers: ~1e-6 of the scale (measured <= 6e-6).
            atol = 1e-4 * grad.abs().max().item() + 1e-6 * largest
            torch.testing.assert_close(grads[key], grad, rtol=1e-4, atol=atol, msg=f"{mode} {key}")
        # Same predictions, same float64 score; one changed prediction or relevant rank moves it by >~ 1e-2.
        assert scores[mode] == pytest.approx(scores["padded"], abs=1e-6), mode


class DocumentBlindBackbone(HuggingFaceBackbone):
    """What a transformers model does with `document_ids` on its own: nothing. Padding is still
    hidden, so its padded passes are sound; its packed rows let examples see each other."""

    def forward(self, input_ids, attention_mask=None, document_ids=None, position_ids=None, causal=False, **_):
        return super().forward(input_ids, attention_mask=attention_mask, position_ids=position_ids)


def trial_config(kind: str, name: str, prepared, checkpoint: str, packing: bool) -> TrialConfig:
    folder, length = prepared[kind, name]
    return TrialConfig(
        trial_key=f"{kind}-{name}-{packing}", task=get_task(name),
        family=family_of(get_task(name).family).implementation,
        seed=3, checkpoint_path=checkpoint, protocol=protocol_for(name, length), task_data_dir=folder,
        runtime=TrialRuntime(micro_batch_size=4, eval_batch_size=16, packing=packing))


@pytest.mark.parametrize("kind", ["modernbert", "qwen3"])  # the smallest and the largest leak (see PROBE_TOLERANCE)
@pytest.mark.usefixtures("float64_default")
def test_a_backbone_blind_to_documents_is_caught_and_trains_with_dynamic_padding(
        checkpoints, prepared, kind, monkeypatch, capsys, fresh_probe_verdicts):
    blind = DocumentBlindBackbone(load_backbone(checkpoints[kind]).model)
    error, scale = packing_error(blind, CPU)
    assert error > 30 * PROBE_TOLERANCE * scale, "the leak is far outside the tolerance"

    monkeypatch.setattr(finetune_loop, "load_backbone",
                        lambda folder: DocumentBlindBackbone(load_backbone(folder).model))
    name = "wordnet-supersense-tag"
    results = {packing: run_trial(trial_config(kind, name, prepared, checkpoints[kind], packing))
               for packing in (True, False)}
    said = capsys.readouterr().out
    assert results[True]["packing"] == results[False]["packing"] == "padded"
    assert said.count("dynamic padding") == 1 and checkpoints[kind] in said and f"model_type {kind}" in said
    # The same batches, padded to their longest example instead of max_length: in float64 (AdamW
    # would amplify float32 rounding), the same losses and scores as the padded reference.
    assert results[True]["train_loss"] == pytest.approx(results[False]["train_loss"], rel=1e-9)
    for key in ("validation_score", "test_score"):
        # Same predictions, same float64 score; one changed prediction moves it by >~ 1e-2.
        assert results[True][key] == pytest.approx(results[False][key], abs=1e-6), key


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.usefixtures("float64_default")
def test_a_trial_fine_tunes_each_kind_packed_as_it_does_padded(checkpoints, prepared, kind, fresh_probe_verdicts):
    name = "wordnet-supersense-cls"
    results = {packing: run_trial(trial_config(kind, name, prepared, checkpoints[kind], packing))
               for packing in (True, False)}
    assert results[True]["packing"] == "packed" and results[False]["packing"] == "padded"
    assert results[True]["status"] == results[False]["status"] == "ok" and results[True]["train_steps"] == 4
    # float64 throughout: rounding differences of reordered sums stay ~1e-15.
    assert results[True]["train_loss"] == pytest.approx(results[False]["train_loss"], rel=1e-9)
    for key in ("validation_score", "test_score"):
        assert results[True][key] == pytest.approx(results[False][key], abs=1e-6), key


def test_a_study_checkpoint_loads_as_the_studys_own_model(tmp_path):
    config = LlamaEncoderConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                num_attention_heads=2, num_key_value_heads=2)
    build_model(config, seed=0).save_pretrained(tmp_path)
    backbone = load_backbone(str(tmp_path))
    assert type(backbone) is LlamaEncoderModel and backbone.config.hidden_size == 16
    with torch.no_grad():
        next(backbone.parameters()).add_(1.0)
    assert not torch.equal(next(load_backbone(str(tmp_path)).parameters()), next(backbone.parameters())), \
        "each trial trains its own copy"


@pytest.mark.parametrize("kind", ["bert", "llama", "qwen3"])
def test_qa_windows_keep_the_null_answer_outside_the_context_for_every_tokenizer(checkpoints, kind):
    """BERT: [CLS] question [SEP]; Llama: BOS question EOS; Qwen (no CLS, no BOS): question EOS.
    Position 0 is never context, and the gold spans decode back to their answers."""
    tokenizer = task_data.task_tokenizer(checkpoints[kind])
    first, sep = special_ids(tokenizer)
    assert (first is None) == (kind == "qwen3") and sep is not None
    records = [{"question": "Which word names a body part?", "context": "he hurt his knee on the stairs again",
                "answers": ["knee"], "starts": [12]},
               {"question": "", "context": "a bird sang", "answers": ["bird"], "starts": [2]},
               {"question": "Which word names a place?", "context": "a bird sang", "answers": [], "starts": []}]
    split = encode_examples(records, tokenizer, max_length=32, stride=4)
    assert (split["offsets"][:, 0, 0] < 0).all(), "position 0 (the null answer) is outside the context"
    if first is not None:
        assert (split["input_ids"][:, 0] == first).all()
    opening = 0 if first is None else 1
    assert split["input_ids"][1, opening] == sep, "an empty question: the separator opens the window (after CLS/BOS)"
    start_logits = np.full(split["input_ids"].shape, -10.0)
    end_logits = start_logits.copy()
    rows = np.arange(len(start_logits))
    start_logits[rows, split["start_positions"]] = end_logits[rows, split["end_positions"]] = 10.0
    assert list(split["start_positions"][:2] > 0) == [True, True] and split["start_positions"][2] == 0
    # Byte-level BPE offsets include a token's leading space (as Llama 3's and Qwen's); SQuAD scoring strips it.
    answers = best_answers(start_logits, end_logits, split, with_no_answer=True)
    assert [answer.strip() for answer in answers] == ["knee", "bird", ""]


def test_every_kind_tokenises_the_tasks_padded_on_the_right(checkpoints, prepared):
    """Llama's tokenizer has no pad token: the task tokenizer pads with EOS. Every kind's rows
    are real tokens then padding, so a token's column is its position in both passes."""
    assert task_data.task_tokenizer(checkpoints["llama"]).pad_token == "<|end_of_text|>"
    for (kind, name), (folder, _) in prepared.items():
        meta, splits = cached_task_data(folder)
        for split in splits.values():
            for key in (k for k in split if k.endswith("attention_mask")):
                mask = split[key].astype(bool)
                assert (mask[:, :-1] | ~mask[:, 1:]).all(), (kind, name, key)
        assert json.dumps(meta)  # meta stays JSON, whatever the tokenizer
