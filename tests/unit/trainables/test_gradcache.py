"""The gradient-cached retrieval loss (trainables/tasks/gradcache.py, `Retrieval.backward`) is the
one-pass loss of the whole batch: every query against all 32 documents of the optimizer step's
batch, at micro-batch 4, 8 and 32, with the loss and every parameter's gradient of one pass.

Tolerance, from the numerics: both sides compute the same function in float32 and differ only in
how sums are grouped (matrix products over 4, 8 or 32 rows instead of 32 at once, the packed rows
of a micro-batch instead of the whole batch's, parameter gradients summed chunk by chunk). A sum
of n float32 terms regrouped moves by at most n x 2**-24 of the sum of its terms' magnitudes, and
typically by sqrt(n) x 2**-24: the widest reduction here (a weight's gradient over 64 texts x at
most 24 tokens, ~1,500 terms, through 2 layers) gives ~40 x 6e-8 ~ 2.4e-6 typically and ~1e-4 at
worst. RTOL = 1e-4 of the largest |gradient| of each tensor (and of the loss) is that worst case;
measured on this machine: at most 6.4e-7 (loss: equal). The breakages below (negatives of the
micro batch only; another seed's dropout draws) move some gradient by 0.8 to 3 x its scale.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from sweeper.contract.configs import AdamWConfig, FinetuneProtocol
from trainables.backbones import HuggingFaceBackbone
from trainables.model import LlamaEncoderConfig, LlamaEncoderModel
from trainables.tasks import gradcache
from trainables.tasks.packing import PackedBackbone
from trainables.tasks.retrieval import BiEncoder, Retrieval, contrastive_loss, embed_pairs


BATCH, WIDTH, VOCAB = 32, 24, 256
RTOL = 1e-4
"""Largest |cached - one pass| accepted, as a fraction of the largest |one pass| of each tensor
(module docstring)."""
PROTOCOL = FinetuneProtocol(learning_rate=1e-3, batch_size=BATCH, max_steps=1, epochs=1.0, max_length=WIDTH,
                            warmup_ratio=0.0, optimizer=AdamWConfig(), family_settings={"retrieval_temperature": 0.05})
CPU = torch.device("cpu")
NO_AUTOCAST = contextlib.nullcontext()




def training_split(pairs: int = BATCH, seed: int = 0) -> dict[str, np.ndarray]:
    """`pairs` (query, document) pairs of random tokens, 3 to WIDTH real tokens each, padded to
    WIDTH; pairs 5 and 6 share their document (so it is no negative of either)."""
    rng = np.random.default_rng(seed)

    def texts(n):
        lengths = rng.integers(3, WIDTH + 1, n)
        mask = (np.arange(WIDTH)[None] < lengths[:, None]).astype(np.int8)
        return (rng.integers(5, VOCAB, (n, WIDTH)) * mask).astype(np.int32), mask

    query_ids, query_mask = texts(pairs)
    doc_ids, doc_mask = texts(pairs)
    pair_doc = np.arange(pairs, dtype=np.int64)
    pair_doc[6] = 5
    return {"query_input_ids": query_ids, "query_attention_mask": query_mask, "doc_input_ids": doc_ids,
            "doc_attention_mask": doc_mask, "pair_query": np.arange(pairs, dtype=np.int64), "pair_doc": pair_doc}


def study_encoder() -> BiEncoder:
    """The study's architecture (no dropout), packed."""
    torch.manual_seed(0)
    config = LlamaEncoderConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2)
    return BiEncoder(PackedBackbone(LlamaEncoderModel(config), packing=True)).train()


def bert_with_dropout() -> BiEncoder:
    """A BERT built from its config with dropout 0.1 on hidden states and attention, packed."""
    from transformers import AutoModel, BertConfig

    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, max_position_embeddings=64, hidden_dropout_prob=0.1,
                        attention_probs_dropout_prob=0.1)
    model = AutoModel.from_config(config, dtype=torch.float32, attn_implementation="sdpa", add_pooling_layer=False)
    return BiEncoder(PackedBackbone(HuggingFaceBackbone(model), packing=True)).train()


def gradients(model, backward) -> tuple[float, dict[str, torch.Tensor]]:
    """(loss, name -> gradient) of one call of `backward()` from zero gradients."""
    model.zero_grad(set_to_none=True)
    loss = backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return float(loss), grads


def one_pass(model, split, rows) -> float:
    """The whole batch in one forward pass."""
    loss = Retrieval.loss(model, split, rows, CPU, PROTOCOL)
    loss.backward()
    return loss.item()


def one_graph(model, split, rows, micro) -> float:
    """The whole batch's loss on one graph, its embeddings computed micro-batch by micro-batch (the
    dropout draws of the cached path's first pass, in the same order)."""
    parts = [embed_pairs(model, split, rows[s:s + micro], CPU) for s in range(0, len(rows), micro)]
    loss = contrastive_loss(torch.cat([q for q, _ in parts]), torch.cat([d for _, d in parts]),
                            split["pair_doc"][rows], PROTOCOL)
    loss.backward()
    return loss.item()


def cached(model, split, rows, micro) -> float:
    return Retrieval.backward(model, split, rows, micro, CPU, PROTOCOL, NO_AUTOCAST)


def micro_batch_negatives(model, split, rows, micro) -> float:
    """The breakage: each micro-batch's queries see only its own documents (gradient accumulation
    of micro-batch losses, the retrieval loss before gradient caching)."""
    total = 0.0
    for start in range(0, len(rows), micro):
        chunk = rows[start:start + micro]
        loss = Retrieval.loss(model, split, chunk, CPU, PROTOCOL)
        (loss * len(chunk) / len(rows)).backward()
        total += loss.item() * len(chunk) / len(rows)
    return total


def assert_same(result, reference) -> None:
    """Loss and every gradient within RTOL of their one-pass scale."""
    (loss, grads), (ref_loss, ref_grads) = result, reference
    assert grads.keys() == ref_grads.keys()
    assert abs(loss - ref_loss) <= RTOL * abs(ref_loss), (loss, ref_loss)
    for name, ref in ref_grads.items():
        error, scale = float((grads[name] - ref).abs().max()), float(ref.abs().max())
        assert error <= RTOL * scale, f"{name}: max |difference| {error:.3g} > {RTOL:g} x {scale:.3g}"


@pytest.mark.parametrize("micro", [4, 8, 32])
def test_the_cached_loss_is_the_one_pass_loss_of_the_whole_batch(micro):
    model, split, rows = study_encoder(), training_split(), np.arange(BATCH)
    reference = gradients(model, lambda: one_pass(model, split, rows))
    assert_same(gradients(model, lambda: cached(model, split, rows, micro)), reference)
    if micro < BATCH:  # the breakage: 3 or 7 negatives a query instead of 31
        with pytest.raises(AssertionError):
            assert_same(gradients(model, lambda: micro_batch_negatives(model, split, rows, micro)), reference)


@pytest.mark.parametrize("micro", [4, 8, 32])
def test_with_dropout_the_cached_loss_is_the_one_graph_loss_under_a_fixed_seed(micro):
    model, split, rows = bert_with_dropout(), training_split(seed=1), np.arange(BATCH)

    def seeded(backward, seed=7):
        torch.manual_seed(seed)
        return gradients(model, backward)

    reference = seeded(lambda: one_graph(model, split, rows, micro))
    result = seeded(lambda: cached(model, split, rows, micro))
    assert_same(result, reference)
    assert_same(seeded(lambda: cached(model, split, rows, micro)), result)  # deterministic
    with pytest.raises(AssertionError):  # dropout is on: another seed draws other masks
        assert_same(seeded(lambda: cached(model, split, rows, micro), seed=8), reference)


def test_a_second_pass_that_does_not_replay_the_dropout_draws_is_caught(monkeypatch):
    model, split, rows = bert_with_dropout(), training_split(seed=1), np.arange(BATCH)
    torch.manual_seed(7)
    reference = gradients(model, lambda: one_graph(model, split, rows, 4))
    monkeypatch.setattr(gradcache.RngState, "replay", lambda self: contextlib.nullcontext())
    torch.manual_seed(7)
    with pytest.raises(AssertionError):
        assert_same(gradients(model, lambda: cached(model, split, rows, 4)), reference)


def test_the_step_leaves_the_generator_where_the_first_pass_left_it():
    """The second pass replays the draws and gives the generator back: the next step's draws
    follow the first pass's, as they would after one pass without caching."""
    model, split, rows = bert_with_dropout(), training_split(seed=1), np.arange(BATCH)
    torch.manual_seed(3)
    with torch.no_grad():
        for start in range(0, BATCH, 8):
            embed_pairs(model, split, rows[start:start + 8], CPU)
    after_first_pass = torch.get_rng_state()
    torch.manual_seed(3)
    cached(model, split, rows, 8)
    assert torch.equal(torch.get_rng_state(), after_first_pass)


@pytest.fixture(scope="module")
def retrieval_task_data(tmp_path_factory, wordpiece_dir):
    from sweeper.contract.registry import family_of, get_task
    from trainables.tasks import data as task_data

    task = get_task("wordnet-usage-retrieval")
    folder = tmp_path_factory.mktemp("retrieval")
    task_data.prepare_task_data(task, family_of(task.family).implementation, wordpiece_dir, 48, str(folder), 64, 32, {})
    return str(folder)


def test_a_retrieval_trial_at_micro_batch_2_trains_the_weights_of_one_pass_of_8(retrieval_task_data):
    """The loop's path (`backward_batch` -> `Retrieval.backward`) for whole trials, packed, in
    float64 weights (AdamW turns rounding into updates up to lr / eps: tests/test_packing.py);
    the embeddings and the loss are float32 either way (BiEncoder), so the losses agree to float32
    rounding x the temperature's 20, and the scores, which move by >~ 1e-2 per changed rank, exactly."""
    from dataclasses import replace

    from sweeper.contract.configs import TrialConfig, TrialRuntime
    from sweeper.contract.registry import family_of, get_task
    from trainables.finetune_loop import run_trial

    task = get_task("wordnet-usage-retrieval")
    config = dict(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2)
    protocol = replace(PROTOCOL, batch_size=8, max_steps=4, max_length=48, learning_rate=3e-3)
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        results = {micro: run_trial(TrialConfig(
            trial_key=f"micro-{micro}", task=task, family=family_of(task.family).implementation, seed=3,
            checkpoint_path=None, protocol=protocol, task_data_dir=retrieval_task_data,
            runtime=TrialRuntime(micro_batch_size=micro, eval_batch_size=16), random_init_config=config))
            for micro in (2, 8)}
    finally:
        torch.set_default_dtype(dtype)
    cached, one_pass = results[2], results[8]
    assert cached["status"] == one_pass["status"] == "ok" and cached["train_steps"] == 4
    assert cached["train_loss"] == pytest.approx(one_pass["train_loss"], rel=1e-5)
    for key in ("validation_score", "test_score"):
        assert cached[key] == pytest.approx(one_pass[key], abs=1e-4), key
