"""The corpus without Ray: the blocked sample order (one-block formula kept, prefix-stable),
windows across shards, errors naming the shard and the corpus, the corpus folder's key, run keys
untouched by the new data fields, and bad sources stopping `sweeper run` with exit 2."""
from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study
from sweeper.run.corpora import ORDER_BLOCK_WINDOWS as DRIVER_BLOCK, corpus_config, corpus_dir, effective_max_tokens
from sweeper.contract.configs import CorpusConfig
from sweeper.store.layout import StudyLayout
from trainables.corpus import ORDER_BLOCK_WINDOWS, PackedCorpus
from trainables.corpus_prep import prepare_corpus

from cli_process import sweeper_cli
from conftest import ROOT

PIPELINE_SPEC = ROOT / "tests" / "specs" / "pipeline.yaml"


@pytest.fixture(scope="module")
def numbers_corpus(tmp_path_factory) -> Path:
    """A text file of 110,000 one-word documents (~2 tokens each with the separator)."""
    folder = tmp_path_factory.mktemp("numbers")
    (folder / "docs.txt").write_text("".join(f"w{i % 97}\n" for i in range(110_000)))
    return folder / "docs.txt"


def prepared(source: Path, out: Path, **config) -> str:
    config = CorpusConfig(source=str(source), tokenizer="train-wordpiece", vocab_size=200, **config)
    prepare_corpus(config, str(out), workers=0, shard_tokens=10_007)
    return str(out)


def test_wordpiece_stream_equals_the_tokenizer_call(tmp_path):
    from transformers import AutoTokenizer

    from sweeper.contract.text_sources import iter_corpus_texts

    out = tmp_path / "c"
    meta = prepare_corpus(CorpusConfig(source="wordnet", vocab_size=512, max_documents=300), str(out), workers=0,
                          shard_tokens=4096)
    texts = list(iter_corpus_texts("wordnet", "text", 300))
    tokenizer = AutoTokenizer.from_pretrained(out / "tokenizer")
    expected = [
        t for ids in tokenizer(texts, add_special_tokens=False)["input_ids"] for t in (*ids, meta["separator_id"])
    ]
    corpus = PackedCorpus(str(out), 16, 0)
    assert corpus.tokens(0, meta["tokens"]).tolist() == expected and meta["documents"] == 300
    assert set(corpus.meta) >= {"documents", "tokens", "vocab_size", "separator_id", "mask_token_id", "pad_token_id",
                                "special_ids", "source", "tokenizer"}


@pytest.mark.long  # ~5 s
def test_windows_span_shards_and_the_order_is_blocked_and_prefix_stable(numbers_corpus, tmp_path):
    assert ORDER_BLOCK_WINDOWS == DRIVER_BLOCK
    short = PackedCorpus(prepared(numbers_corpus, tmp_path / "short", max_tokens=2 * ORDER_BLOCK_WINDOWS), 1, 7)
    grown = PackedCorpus(prepared(numbers_corpus, tmp_path / "grown", max_tokens=3 * ORDER_BLOCK_WINDOWS), 1, 7)
    assert (short.num_windows, grown.num_windows) == (2 * ORDER_BLOCK_WINDOWS, 3 * ORDER_BLOCK_WINDOWS)
    batch = 512
    steps = short.num_windows // batch
    # The first two blocks (all the short corpus holds) are visited in the same order.
    assert all(
        short.window_indices(s, batch, 0, 1) == grown.window_indices(s, batch, 0, 1) for s in range(0, steps, 37)
    )
    visited = [w for s in range(steps) for w in short.window_indices(s, batch, 0, 1)]
    assert sorted(visited) == list(range(short.num_windows))  # a permutation per epoch
    assert max(visited[:ORDER_BLOCK_WINDOWS]) < ORDER_BLOCK_WINDOWS  # block 0 before block 1
    # Windows across shard boundaries (10,007 tokens per shard) read the stream as it is.
    wide = PackedCorpus(str(tmp_path / "short"), 33, 0)
    stream = wide.tokens(0, int(wide.shard_starts[-1]))
    assert len(wide.shard_files) > 10 and stream.size == 2 * ORDER_BLOCK_WINDOWS
    rows = wide.batch(3, 64).input_ids.numpy()
    for row, window in zip(rows, wide.window_indices(3, 64, 0, 1)):
        assert row.tolist() == stream[window * 33:(window + 1) * 33].tolist()


def test_a_corpus_of_one_block_keeps_the_former_order(numbers_corpus, tmp_path):
    corpus = PackedCorpus(prepared(numbers_corpus, tmp_path / "c", max_documents=5000), 8, 3)
    order = np.random.default_rng([3, 1]).permutation(corpus.num_windows)  # epoch 1
    first = corpus.num_windows  # position of epoch 1's first sample
    assert [corpus.window_at(first + i) for i in range(100)] == order[:100].tolist()


def test_a_shard_that_cannot_be_read_names_itself_and_the_corpus(numbers_corpus, tmp_path):
    corpus = PackedCorpus(prepared(numbers_corpus, tmp_path / "c", max_documents=9000), 4, 0)
    (tmp_path / "c" / "shards" / "shard-000001.npy").write_bytes(b"not a shard")
    with pytest.raises(RuntimeError, match=r"corpus .*/c: cannot read shard shards/shard-000001.npy"):
        corpus.tokens(0, int(corpus.shard_starts[-1]))


def test_new_data_fields_leave_run_keys_alone_and_the_corpus_key_follows_the_stream():
    spec = load_study(PIPELINE_SPEC).spec
    plan = plan_study(spec)
    assert "max_tokens" not in spec.data.identity() and "tokenizer_sample_documents" not in spec.data.identity()
    assert replace(spec.data, max_tokens=10**9).identity()["max_tokens"] == 10**9
    layout = StudyLayout("/study")
    base = corpus_dir(layout, corpus_config(spec, plan, None))
    # 200 steps x 16 x 128 tokens + 5 %, rounded up to one block of 65,536 windows of 128.
    assert effective_max_tokens(spec, plan) == ORDER_BLOCK_WINDOWS * 128
    for change in ({"vocab_size": 2048}, {"tokenizer": "bert-base-uncased"}, {"max_tokens": 10**10},
                   {"tokenizer_sample_documents": 10}, {"max_documents": 10}, {"text_column": "body"}):
        changed = replace(spec, data=replace(spec.data, **change))
        assert corpus_dir(layout, corpus_config(changed, plan_study(changed), None)) != base, change
    # A hub tokenizer's corpus (continued pretraining) does not depend on data.vocab_size.
    hub = corpus_dir(layout, corpus_config(spec, plan, "some/tokenizer"))
    other_vocab = replace(spec, data=replace(spec.data, vocab_size=4096))
    assert corpus_dir(layout, corpus_config(other_vocab, plan, "some/tokenizer")) == hub


def test_a_changed_vocabulary_trains_on_a_new_corpus(tmp_path):
    """--recompute-changed: the runs' keys change (data enters them), and their new config reads
    a corpus prepared for the new vocabulary, beside the old one."""
    from sweeper.run.train_grid import pretrain_config

    spec = load_study(PIPELINE_SPEC).spec
    layout = StudyLayout(str(tmp_path / "study"))
    small = replace(spec, data=replace(spec.data, max_documents=200, vocab_size=300))
    large = replace(small, data=replace(small.data, vocab_size=600))
    seen = {}
    for version in (small, large):
        plan = plan_study(version)
        config = corpus_config(version, plan, None)
        folder = corpus_dir(layout, config)
        meta = prepare_corpus(config, folder, workers=0)
        run = plan.runs[0]
        pretrain = pretrain_config(run, version, layout, folder, {r.name: r for r in plan.runs})
        seen[version.data.vocab_size] = (run.run_key, pretrain.corpus_dir, meta["vocab_size"])
    (key_small, dir_small, vocab_small), (key_large, dir_large, vocab_large) = seen[300], seen[600]
    assert key_small != key_large and dir_small != dir_large
    assert vocab_small <= 300 < vocab_large <= 600
    assert json.loads(Path(dir_small, "corpus_meta.json").read_text())["vocab_size"] == vocab_small


@pytest.mark.parametrize("corpus, text_column, key, reason", [
    ("/no/such/corpus.jsonl", "text", "data.corpus", "'/no/such/corpus.jsonl' does not exist"),
    ("{folder}/notes.docx", "text", "data.corpus", "unknown file type"),
    ("{folder}/rows.jsonl", "body", "data.text_column", "no column 'body'"),
])
def test_a_bad_corpus_source_exits_2_before_anything_starts(tmp_path, corpus, text_column, key, reason):
    (tmp_path / "notes.docx").write_text("x")
    (tmp_path / "rows.jsonl").write_text(json.dumps({"text": "a b"}) + "\n")
    corpus = corpus.format(folder=tmp_path)
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        PIPELINE_SPEC.read_text().replace(
            "data: {vocab_size: 1024",
            f"data: {{corpus: {json.dumps(corpus)}, text_column: {text_column}, vocab_size: 1024",
        )
    )
    data_line = next(n for n, line in enumerate(spec.read_text().splitlines(), 1) if line.startswith("data:"))
    env = {"RAY_ADDRESS": "127.0.0.1:1"}  # no cluster there: the check comes first
    result = sweeper_cli("run", str(spec), "--storage", str(tmp_path / "s"), env={**os.environ, **env}, timeout=300)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"{spec}:{data_line}: {key}: " in result.stderr and reason in result.stderr, result.stderr
    assert not (tmp_path / "s" / "pretraining").exists()
