"""Corpus preparation as a Ray Data job (trainables.corpus_prep): the token stream equals a plain
tokenisation, memory stays flat, a killed build resumes without re-tokenising its finished
shards and ends byte-identical, `max_tokens` stops the reading, and the sample order is blocked,
prefix-stable and unchanged for a one-block corpus.

The Ray runs are subprocess drivers of the session's test cluster (`ray_head`), so this
process never joins Ray and a run can be killed. The synthetic text uses a word-level tokenizer
(one token per word) so that 200 MB tokenise in seconds on two cores; WordPiece is covered by
the order tests and by test_pipeline's study.
"""
from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sweeper.contract.configs import CorpusConfig

from conftest import ROOT

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORD_TOKENIZER = "wordlevel-tokenizer"
PREP_SCRIPT = """
import json, sys, ray
from sweeper.contract.configs import CorpusConfig
from trainables.corpus_prep import peak_rss_kib, prepare_corpus
args = json.loads(sys.argv[1])
ray.init(address=args["address"], log_to_driver=False)
meta = prepare_corpus(CorpusConfig(**args["config"]), args["out"], workers=args["workers"],
                      shard_tokens=args["shard_tokens"], read_log=args["read_log"])
print("RESULT", json.dumps({"meta": meta, "driver_peak_kib": peak_rss_kib()}), flush=True)
"""
DRIVER_PEAK_MIB = 1024
"""Bound on the peak RSS of the preparing driver (it holds one shard and one block)."""
WORKER_PEAK_MIB = 768
"""Bound on the peak RSS of each tokenising Ray worker (one block and a streaming reader)."""


def word_list(count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return np.array(sorted({"".join(rng.choice(letters, rng.integers(8, 15))) for _ in range(count)}))


def write_corpus(folder: Path, megabytes: float, files: int, seed: int = 0) -> int:
    """`files` files (jsonl, jsonl.gz, parquet and txt in turn) holding about `megabytes` MB of
    text in all: documents of 20-400 words drawn from a word list. Returns the bytes of text."""
    words = word_list(3000, seed)
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    text_bytes = 0
    per_file = int(megabytes * 1e6 / files / 11.5)  # ~11.5 bytes per word and space
    for index in range(files):
        drawn = words[rng.integers(0, len(words), per_file)]
        cuts = np.cumsum(rng.integers(20, 400, per_file // 20))
        cuts = cuts[cuts < per_file]
        drawn, bounds = drawn.tolist(), [0, *cuts.tolist(), per_file]  # Python strings: joins 3x faster
        documents = [" ".join(drawn[start:end]) for start, end in zip(bounds, bounds[1:])]
        text_bytes += sum(map(len, documents))
        kind = ("jsonl", "jsonl.gz", "parquet", "txt")[index % 4] if files >= 4 else "jsonl"
        path = folder / f"part-{index:03d}.{kind}"
        if kind == "parquet":
            pq.write_table(pa.table({"text": documents}), path, row_group_size=500)
        elif kind == "txt":
            path.write_text("\n".join(documents) + "\n")
        else:
            lines = "".join(json.dumps({"id": i, "text": d}) + "\n" for i, d in enumerate(documents))
            if kind == "jsonl.gz":
                path.write_bytes(gzip.compress(lines.encode(), compresslevel=1))
            else:
                path.write_text(lines)
    return text_bytes


def save_word_tokenizer(folder: Path, words: np.ndarray) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIALS + words.tolist())}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                            sep_token="[SEP]", mask_token="[MASK]").save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpora")
    tokenizer = save_word_tokenizer(root / WORD_TOKENIZER, word_list(3000, 0))
    sizes = {name: write_corpus(root / name, megabytes, files) for name, megabytes, files in
             (("big", 204, 20), ("small", 12, 8))}
    return {"tokenizer": tokenizer, "big": root / "big", "small": root / "small", "text_bytes": sizes}


def prepare_in_subprocess(address: str, config: CorpusConfig, out: Path, *, workers: int = 2,
                          shard_tokens: int, read_log: Path | None = None, kill_after_shards: int | None = None):
    """Run the preparation as a driver of the test cluster; with `kill_after_shards`, SIGKILL it
    once that many shards are finished and return None."""
    args = {"address": address, "config": {k: getattr(config, k) for k in config.__dataclass_fields__},
            "out": str(out), "workers": workers, "shard_tokens": shard_tokens,
            "read_log": str(read_log) if read_log else None}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([sys.executable, "-c", PREP_SCRIPT, json.dumps(args)], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    if kill_after_shards is not None:
        deadline = time.time() + 300
        while not (out / "shards" / f"shard-{kill_after_shards - 1:06d}.json").exists():
            assert process.poll() is None, process.stdout.read()[-3000:]
            assert time.time() < deadline
            time.sleep(0.02)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        return None
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 0, output[-4000:]
    result = [line for line in output.splitlines() if line.startswith("RESULT ")]
    assert result, output[-4000:]
    return json.loads(result[-1].removeprefix("RESULT ")), output


def documents_of(folder: Path):
    from sweeper.contract.text_sources import read_documents, resolve_files

    for file in resolve_files(str(folder)):
        yield from read_documents(file, "text")


def stream_of(corpus: Path) -> np.ndarray:
    index = json.loads((corpus / "index.json").read_text())
    return np.concatenate([np.load(corpus / "shards" / entry["file"]) for entry in index["shards"]])


def read_log(path: Path) -> list[tuple[int, int, int, int, int]]:
    """(pid, file, first row, rows, peak RSS KiB) per tokenised block."""
    return [tuple(map(int, line.split())) for line in path.read_text().splitlines()]


def test_a_200mb_corpus_in_20_files_streams_through_ray_data_in_flat_memory(ray_head, corpora, tmp_path):
    address, _ = ray_head
    config = CorpusConfig(source=str(corpora["big"]), tokenizer=corpora["tokenizer"])
    log = tmp_path / "reads.log"
    (result, output), out = prepare_in_subprocess(address, config, tmp_path / "corpus", shard_tokens=1 << 22,
                                                  read_log=log), tmp_path / "corpus"
    assert "[corpus] shard 0 written" in output and "tokens/s" in output
    meta = result["meta"]
    assert meta["shards"] >= 4 and corpora["text_bytes"]["big"] >= 200e6 and len(list(corpora["big"].iterdir())) == 20
    # Equal to a plain tokenisation of the same documents, in order, each ended by the separator
    # (compared file by file: the reference never holds the whole stream).
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(corpora["tokenizer"])
    index = json.loads((out / "index.json").read_text())
    shards = iter(np.load(out / "shards" / entry["file"], mmap_mode="r") for entry in index["shards"])
    pending, compared, documents = np.empty(0, np.int32), 0, 0
    texts = documents_of(corpora["big"])
    backend = tokenizer.backend_tokenizer  # what `tokenizer(chunk)` calls, here without offsets
    while chunk := [text for _, text in zip(range(4096), texts)]:
        ids = [e.ids for e in backend.encode_batch_fast(chunk, add_special_tokens=False)]
        expected = np.fromiter((t for row in ids for t in (*row, meta["separator_id"])), dtype=np.int32)
        documents += len(chunk)
        while pending.size < expected.size:
            pending = np.concatenate([pending, next(shards)])
        assert np.array_equal(pending[:expected.size], expected), f"differs after {compared} tokens"
        pending, compared = pending[expected.size:], compared + expected.size
    assert pending.size == 0 and next(shards, None) is None
    assert (compared, documents) == (meta["tokens"], meta["documents"])
    # Peak memory: the driver, and every worker that tokenised, under fixed bounds (the corpus
    # is ~50x the bound's share of one block; benchmarks/corpus_prep.py shows 1x vs 2x).
    peaks = {}
    for pid, _, _, _, peak in read_log(log):
        peaks[pid] = max(peaks.get(pid, 0), peak)
    assert 1 <= len(peaks) <= 2 and result["driver_peak_kib"] > 0
    assert result["driver_peak_kib"] < DRIVER_PEAK_MIB * 1024, result["driver_peak_kib"]
    assert max(peaks.values()) < WORKER_PEAK_MIB * 1024, peaks


def test_a_killed_preparation_resumes_without_retokenising_finished_shards(ray_head, corpora, tmp_path):
    from trainables.corpus_prep import prepare_corpus

    address, _ = ray_head
    config = CorpusConfig(source=str(corpora["small"]), tokenizer=corpora["tokenizer"])
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    prepare_in_subprocess(address, config, killed, shard_tokens=1 << 16, kill_after_shards=2)
    finished = sorted((killed / "shards").glob("*.json"))
    assert len(finished) >= 2 and not (killed / "corpus_meta.json").exists()
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (killed / "shards").glob("shard-*.npy")
              if p.with_suffix(".json").exists()}
    resume_from = json.loads(finished[-1].read_text())["next"]
    log = tmp_path / "resume.log"
    prepare_in_subprocess(address, config, killed, shard_tokens=1 << 16, read_log=log)
    after = {name: ((killed / "shards" / name).stat().st_ino, (killed / "shards" / name).stat().st_mtime_ns)
             for name in before}
    assert after == before  # finished shards were not written again
    # ... nor tokenised again: the rerun tokenised rows from the last finished shard's end on
    # (the one document that shard ends inside, and after it).
    first_read = min((file, row) for _, file, row, _, _ in read_log(log))
    assert first_read == (resume_from["file"], resume_from["row"])
    # An uninterrupted build (in one process, without Ray) has the same shards, byte for byte.
    prepare_corpus(config, str(whole), workers=0, shard_tokens=1 << 16)
    names = sorted(p.name for p in (whole / "shards").iterdir())
    assert names == sorted(p.name for p in (killed / "shards").iterdir())
    for name in names:
        assert (whole / "shards" / name).read_bytes() == (killed / "shards" / name).read_bytes(), name
    assert json.loads((whole / "corpus_meta.json").read_text()) == json.loads((killed / "corpus_meta.json").read_text())


def test_max_tokens_stops_reading_the_source(ray_head, corpora, tmp_path):
    address, _ = ray_head
    # The 20-file source: the read-ahead bound below (16 blocks) is a fifth of it. On the
    # 8-file one each file is a single block, so the bound was the whole source, and beside 2
    # busy processes the tokenising actors did read all of it before the consumer stopped them.
    total_rows = sum(1 for _ in documents_of(corpora["big"]))
    config = CorpusConfig(source=str(corpora["big"]), tokenizer=corpora["tokenizer"], max_tokens=100_000)
    log = tmp_path / "reads.log"
    (result, _) = prepare_in_subprocess(address, config, tmp_path / "corpus", shard_tokens=1 << 16, read_log=log)
    assert result["meta"]["tokens"] == 100_000
    stream = stream_of(tmp_path / "corpus")
    assert stream.size == 100_000
    needed_rows = result["meta"]["documents"]
    read_rows = sum(rows for _, _, _, rows, _ in read_log(log))
    # Read-ahead: per worker the block it tokenises and its generator's buffered blocks, plus
    # what waits for the consumer under Ray Data's object-store budget, which holds more while
    # the consumer is slower. Measured: 8,542 rows read for 487 needed, of 84,703 (8.1 blocks of
    # BLOCK_DOCUMENTS ahead), idle; 9,566 (8.9 blocks) beside 2 busy processes. Bound: twice
    # the idle read-ahead.
    from trainables.corpus_prep import BLOCK_DOCUMENTS

    assert read_rows <= needed_rows + 16 * BLOCK_DOCUMENTS, (read_rows, needed_rows, total_rows)
    assert read_rows < total_rows / 4, (read_rows, needed_rows, total_rows)
