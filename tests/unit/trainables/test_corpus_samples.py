"""`data.sample_lengths: variable` (trainables.corpus): the authors' packer's sample lengths, two
samples per row with attention, positions and CLM targets kept inside each, the cut a pure
function of (order_seed, window), memory flat in the corpus size, and a tiny model training on it."""
from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from sweeper.contract.configs import CorpusConfig
from sweeper.store.layout import CORPUS_MARKER
from trainables.corpus import ORDER_BLOCK_WINDOWS, PackedCorpus
from trainables.corpus_prep import prepare_corpus
from trainables.model import LlamaEncoderConfig, build_model, varlen_segments
from trainables.objectives import IGNORE, LossContext, RowDraws, clm_loss, clm_targets, mlm_loss
from trainables.train_step import train_step



BLOCK = 2048
"""The authors' block (`--block_size 2048`, optimus/dataprocess/README)."""


def meta_only_corpus(folder: Path, windows: int, seq_len: int = BLOCK) -> str:
    """A corpus whose marker says `windows` windows of tokens: enough for the order and the cuts,
    which read the marker only (no token of it is read here)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CORPUS_MARKER).write_text(json.dumps({"tokens": windows * seq_len, "special_ids": [0],
                                                    "separator_id": 0, "mask_token_id": 1, "vocab_size": 8}))
    return str(folder)


def tiny_model(corpus: PackedCorpus):
    return build_model(LlamaEncoderConfig(vocab_size=corpus.meta["vocab_size"], hidden_size=32, intermediate_size=64,
                                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2), seed=0)


def sample_lengths(corpus: PackedCorpus, windows: range) -> np.ndarray:
    cuts = np.array([corpus.split_at(w) for w in windows])
    return np.concatenate([cuts, corpus.seq_len - cuts])


@pytest.fixture(scope="module")
def words_corpus(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("words")
    (folder / "docs.txt").write_text("".join(f"w{i % 89} w{i % 13} w{i % 7}\n" for i in range(6000)))
    out = folder / "corpus"
    prepare_corpus(CorpusConfig(source=str(folder / "docs.txt"), vocab_size=200), str(out), workers=0)
    return str(out)


def test_sample_lengths_are_the_authors_uniform_12_to_2036_mean_1024(tmp_path):
    corpus = PackedCorpus(meta_only_corpus(tmp_path / "c", 3 * ORDER_BLOCK_WINDOWS), BLOCK, 0,
                          sample_lengths="variable")
    lengths = sample_lengths(corpus, range(corpus.num_windows))  # 393,216 samples
    # The packer's np.random.randint(12, 2048 - 11): 12 to 2,036, each as likely; every block of
    # 2,048 tokens is two samples, so the mean is 1,024 (the paper's 1,030 is (12 + 2,048) / 2).
    assert lengths.min() == 12 and lengths.max() == BLOCK - 12
    assert abs(lengths.mean() - 1024) < 4  # 4 standard errors (585 / sqrt(393,216) = 0.93)
    counts = np.bincount(lengths - 12, minlength=BLOCK - 23)
    assert stats.chisquare(counts).pvalue > 1e-3
    print(f"sample lengths: n={lengths.size:,} min={lengths.min()} max={lengths.max()} "
          f"mean={lengths.mean():.2f} median={np.median(lengths):.0f}")
    # Deliberate breakage the checks must catch: lengths uniform up to 2,048 (the text read
    # literally) move the mean by 6 and reach past 2,036.
    broken = np.random.default_rng(0).integers(12, BLOCK + 1, lengths.size)
    assert broken.max() > BLOCK - 12 and abs(broken.mean() - 1024) > 4


def test_the_cut_is_one_per_window_for_every_run_and_replicate(tmp_path):
    folder = meta_only_corpus(tmp_path / "c", 2 * ORDER_BLOCK_WINDOWS + 10)
    corpus = PackedCorpus(folder, BLOCK, 3, sample_lengths="variable")
    windows = range(0, corpus.num_windows, 997)
    cuts = [corpus.split_at(w) for w in windows]
    assert cuts == [PackedCorpus(folder, BLOCK, 3, replicate=2, sample_lengths="variable").split_at(w)
                    for w in windows]
    assert cuts != [PackedCorpus(folder, BLOCK, 4, sample_lengths="variable").split_at(w) for w in windows]
    # Not the window order's stream: the first cuts are not a function of the permutation's draws.
    assert len(set(cuts)) > len(cuts) // 2


def test_memory_is_flat_as_the_corpus_grows(tmp_path):
    """Two blocks of cuts at most are held (512 KiB each), however many windows the corpus has."""
    peaks = {}
    for blocks in (3, 30):
        corpus = PackedCorpus(meta_only_corpus(tmp_path / f"c{blocks}", blocks * ORDER_BLOCK_WINDOWS), BLOCK, 0,
                              sample_lengths="variable")
        tracemalloc.start()
        for block in range(blocks):
            corpus.split_at(block * ORDER_BLOCK_WINDOWS + 5)
        peaks[blocks] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert len(corpus._splits) == 2
    assert peaks[30] < 1.2 * peaks[3] and peaks[30] < 4 * 8 * ORDER_BLOCK_WINDOWS, peaks


def test_a_row_is_two_whole_samples_and_nothing_crosses_them(words_corpus):
    corpus = PackedCorpus(words_corpus, 64, 0, sample_lengths="variable")
    batch = corpus.batch(step=1, global_batch=6)
    cuts = [corpus.split_at(w) for w in corpus.window_indices(1, 6, 0, 1)]
    index = torch.arange(64)
    separator = corpus.meta["separator_id"]
    for row, cut in enumerate(cuts):
        assert 12 <= cut <= 52
        assert batch.document_ids[row].tolist() == [0] * cut + [1] * (64 - cut)
        assert batch.position_ids[row].tolist() == index[:cut].tolist() + index[:64 - cut].tolist()
        # Documents are joined inside a sample (the authors' packer): their separators are there.
        assert (batch.input_ids[row, :cut] == separator).sum() >= 1
    expected = np.cumsum([0] + [n for cut in cuts for n in (cut, 64 - cut)])
    assert batch.cu_seqlens.tolist() == expected.tolist()
    assert torch.equal(batch.cu_seqlens, varlen_segments(batch.document_ids))
    labels = clm_targets(batch.input_ids, batch.document_ids)
    assert all(labels[row, cut - 1] == IGNORE for row, cut in enumerate(cuts))  # no target across samples

    # Attention: changing the second sample leaves the first one's outputs alone, and changing
    # another document of the same sample does not (documents inside a sample see each other).
    model = tiny_model(corpus).eval()

    def logits(ids):
        with torch.no_grad():
            return model(ids, document_ids=batch.document_ids, position_ids=batch.position_ids, causal=False).logits

    base, cut = logits(batch.input_ids), cuts[0]
    other_sample = batch.input_ids.clone()
    other_sample[0, cut:] = (other_sample[0, cut:] + 1) % corpus.meta["vocab_size"]
    assert torch.allclose(logits(other_sample)[0, :cut], base[0, :cut], atol=1e-6)
    same_sample = batch.input_ids.clone()
    end = int(torch.nonzero(batch.input_ids[0, :cut] == separator)[0])  # the first document's separator
    assert end + 1 < cut  # another document follows in the same sample
    same_sample[0, :end] = (same_sample[0, :end] + 1) % corpus.meta["vocab_size"]
    assert not torch.allclose(logits(same_sample)[0, end + 1:cut], base[0, end + 1:cut])


@pytest.mark.parametrize("loss", [mlm_loss, clm_loss], ids=["mlm", "clm"])
def test_a_tiny_model_trains_on_variable_samples(words_corpus, loss):
    corpus = PackedCorpus(words_corpus, 48, 0, sample_lengths="variable")
    model = tiny_model(corpus)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    settings = {"mask_ratio": 0.4, "random_replace": 0.0, "keep_original": 0.0}
    losses = []
    for step in range(40):
        batch = corpus.batch(step, 8)
        context = LossContext(draws=RowDraws(0, step), mask_token_id=corpus.meta["mask_token_id"],
                              vocab_size=corpus.meta["vocab_size"])
        result = train_step(model, optimizer, batch, loss, settings, context, micro_batch_size=4)
        losses.append(float(result.loss))
    assert np.isfinite(losses).all() and np.mean(losses[-8:]) < 0.85 * np.mean(losses[:4]), losses
