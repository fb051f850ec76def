"""Corpus preparation as a streaming Ray Data job: source files -> tokenised blocks -> token shards.

Layout of a prepared corpus folder (a study location, local or object store):

    tokenizer/                 the tokenizer in Hugging Face format (trained here, or a hub one)
    shards/shard-000000.npy    int32 tokens, exactly `shard_tokens` of them (the last: fewer)
    shards/shard-000000.json   written after its .npy: the shard is finished (tokens, where the
                               stream goes on in the source); each shard is atomic on its own
    index.json                 every shard's entry, in stream order
    corpus_meta.json           CORPUS_MARKER, written last: the corpus is complete

Design, and why:
- The token stream is the documents in source order (files sorted, rows in file order), each
  ended by the separator, as before. Shards are cut at fixed token counts by one ordered
  consumer (this process), so shard `k` is the same bytes whatever the number of workers, and a
  shard records the source position the stream goes on from: (file, row, token offset inside
  that row's document). Windows cross shard boundaries freely (trainables.corpus).
- Ray Data does the reading and the tokenising: one input item per source file (a file is the
  unit of parallelism; FineWeb-Edu comes as thousands of files), mapped by `TokenizeFiles`, a
  callable class on an autoscaling actor pool as wide as the cluster's CPUs, so the tokenizer is
  built once per actor. The class reads its file itself, streaming, because Ray Data's readers
  do not tell a row's index in its file, which exact resumption needs. `preserve_order` gives
  the consumer the blocks in stream order.
- Resume: a rerun lists the finished shards, starts the files at the last one's position (rows
  before it are skipped by counting lines or parquet row groups, never tokenised) and drops the
  tokens of the straddling document that the last shard already holds. Tokenisation of a
  document does not depend on its neighbours, so the shards equal those of an unbroken run.
- Memory is flat: an actor holds one block (`BLOCK_DOCUMENTS` documents or `BLOCK_CHARACTERS`
  of text) and a streaming reader; the consumer holds at most one shard plus one block; Ray
  Data's backpressure bounds what waits in the object store (and `max_tasks_in_flight_per_actor
  = 1` keeps each actor on one file). The index grows by one small entry per shard.
- Limits: `max_tokens` and `max_documents` stop the consumer, which ends the job. Read-ahead is
  bounded by what the pipeline holds when it stops: per actor, the block it tokenises plus the
  blocks of its streaming-generator buffer, plus the blocks queued for the consumer under Ray
  Data's object-store budget (tests/e2e/test_corpus_prep.py measures it).
- A trained tokenizer learns from the first `tokenizer_sample_documents` documents, streamed
  into the trainer (no list of texts). Workers encode with the tokenizer's `tokenizers` backend
  (the call `tokenizer(texts, add_special_tokens=False)` makes), which needs no transformers.
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from sweeper.contract.text_sources import read_documents, resolve_files
from sweeper.contract.configs import CorpusConfig
from sweeper.store import folders, storage
from sweeper.store.cache_keys import tokenizer_digest
from sweeper.store.layout import CORPUS_MARKER
from trainables.tokenizer import load_or_train_tokenizer

SHARD_TOKENS = 1 << 24
"""Tokens per shard: 16,777,216 (64 MiB of int32): ~6,000 shards for 100B tokens."""
BLOCK_DOCUMENTS = 1024
"""Documents per tokenised block (an actor's unit of output)."""
BLOCK_CHARACTERS = 8 << 20
"""A block is also closed at 8 Mi characters of text (a file of huge documents)."""
INDEX = "index.json"
SHARDS = "shards"
TOKENIZER = "tokenizer"
TOKENIZER_DONE = "tokenizer_config.json"
"""Uploaded last into tokenizer/ (folders.publish_tree): the tokenizer is complete."""


@dataclass(frozen=True, slots=True)
class StreamPosition:
    """Where the stream goes on: the document at (`file`, `row`) from its token `offset`;
    `documents` documents and `tokens` tokens come before it."""

    file: int = 0
    row: int = 0
    offset: int = 0
    documents: int = 0
    tokens: int = 0


def shard_name(index: int, suffix: str) -> str:
    return f"shard-{index:06d}.{suffix}"


def prepare_corpus(config: CorpusConfig, out_dir: str, *, workers: int | None = None,
                   shard_tokens: int = SHARD_TOKENS, read_log: str | None = None) -> dict:
    """Build the corpus at `out_dir` (resuming a killed build; a finished one is reused) and
    return its meta. `workers`: tokenising actors at most (None: the cluster's CPUs when Ray is
    connected, else 0 = in this process, without Ray). `read_log`: a file each reader appends
    one line to per block (pid, file, first row, rows, peak RSS in KiB): tests and benchmarks."""
    marker = storage.join(out_dir, CORPUS_MARKER)
    if storage.exists(marker):
        return storage.read_json(marker)
    if workers is None:
        workers = cluster_cpus()
    files = resolve_files(config.source)
    tokenizer = publish_tokenizer(config, files, out_dir)
    separator = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    shards = finished_shards(out_dir, shard_tokens)
    start = StreamPosition(**shards[-1]["next"]) if shards else StreamPosition()
    if not limit_reached(config, start):
        writer = ShardWriter(out_dir, shard_tokens, config, start, shards)
        blocks = tokenised_blocks(files, start, config.text_column, tokenizer.backend_tokenizer.to_str(),
                                  int(separator), workers, read_log)
        writer.consume(blocks)
        shards = writer.shards
    if not shards:
        raise ValueError(f"corpus {config.source!r} holds no text")
    last = StreamPosition(**shards[-1]["next"])
    storage.write_json(storage.join(out_dir, INDEX), {"shard_tokens": shard_tokens, "files": files, "shards": shards})
    meta = {
        "documents": last.documents + (1 if last.offset else 0), "tokens": last.tokens,
        "vocab_size": len(tokenizer), "separator_id": int(separator),
        "mask_token_id": int(tokenizer.mask_token_id), "pad_token_id": int(tokenizer.pad_token_id),
        "special_ids": sorted(set(tokenizer.all_special_ids)), "source": config.source,
        "tokenizer": config.tokenizer, "shards": len(shards), "shard_tokens": shard_tokens,
        "max_tokens": config.max_tokens, "text_column": config.text_column,
        # In the marker, the tokenizer's content keys the nodes' copies of the corpus (folders.local_copy).
        "tokenizer_digest": tokenizer_digest(storage.join(out_dir, TOKENIZER)),
    }
    storage.write_json(marker, meta)
    return meta


def cluster_cpus() -> int:
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1))) if ray.is_initialized() else 0


def limit_reached(config: CorpusConfig, position: StreamPosition) -> bool:
    return ((config.max_tokens is not None and position.tokens >= config.max_tokens)
            or (config.max_documents is not None and position.documents >= config.max_documents))


# --- tokenizer -----------------------------------------------------------------------------------

def sample_texts(files: list[str], text_column: str, limit: int):
    """The first `limit` documents of the stream, streamed (the trainer counts words; no list)."""
    texts = itertools.chain.from_iterable(read_documents(f, text_column) for f in files)
    return itertools.islice(texts, limit)


def publish_tokenizer(config: CorpusConfig, files: list[str], out_dir: str):
    """The corpus's tokenizer, trained or loaded once and published to `out_dir/tokenizer`; a
    rerun loads the published one, so a resumed build encodes with the same tokenizer."""
    from transformers import AutoTokenizer

    location = storage.join(out_dir, TOKENIZER)
    if not storage.exists(storage.join(location, TOKENIZER_DONE)):
        limit = min(config.tokenizer_sample_documents, config.max_documents or config.tokenizer_sample_documents)
        tokenizer = load_or_train_tokenizer(config.tokenizer, sample_texts(files, config.text_column, limit),
                                            config.vocab_size, config.mask_token)
        if not tokenizer.is_fast:
            raise ValueError(f"tokenizer {config.tokenizer!r} has no fast (Rust) implementation")
        if storage.is_remote(location):
            tmp = Path(tempfile.mkdtemp(prefix="sweeper-tokenizer-"))
        else:
            storage.make_dirs(out_dir)
            tmp = Path(out_dir) / f".{TOKENIZER}.tmp-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
        tokenizer.save_pretrained(tmp)
        folders.publish_tree(tmp, location, TOKENIZER_DONE)
    if storage.is_remote(location):
        local = Path(tempfile.mkdtemp(prefix="sweeper-tokenizer-"))
        folders.copy_tree_from(location, local)
        return AutoTokenizer.from_pretrained(local, trust_remote_code=False)
    return AutoTokenizer.from_pretrained(location, trust_remote_code=False)


# --- reading and tokenising (Ray Data actors) ----------------------------------------------------

class TokenizeFiles:
    """Ray Data callable class: for each input item (file index, rows to skip), the file's
    documents in blocks, each a one-row table (file, first row, per-document token counts, the
    tokens of the documents, each ended by the separator)."""

    def __init__(self, files: list[str], text_column: str, tokenizer_json: str, separator: int,
                 read_log: str | None = None):
        os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one core per actor: the pool is the parallelism
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_str(tokenizer_json)
        self.tokenizer.no_truncation()  # as `tokenizer(texts)` does: a saved truncation setting is not applied
        self.tokenizer.no_padding()
        self.files, self.text_column, self.separator, self.read_log = files, text_column, separator, read_log

    def __call__(self, batch: dict):
        for file, skip in zip(batch["file"], batch["skip"]):
            yield from self.blocks(int(file), int(skip))

    def blocks(self, file: int, skip: int):
        texts, characters, first = [], 0, skip
        for text in read_documents(self.files[file], self.text_column, skip):
            texts.append(text)
            characters += len(text)
            if len(texts) >= BLOCK_DOCUMENTS or characters >= BLOCK_CHARACTERS:
                yield self.encode(file, first, texts)
                first, texts, characters = first + len(texts), [], 0
        if texts:
            yield self.encode(file, first, texts)

    def encode(self, file: int, first: int, texts: list[str]):
        import pyarrow as pa

        # The ids `tokenizer(texts, add_special_tokens=False)` gives; `encode_batch_fast` skips
        # the character offsets nobody reads here (about twice as fast).
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        ids = [encoding.ids for encoding in encode(texts, add_special_tokens=False)]
        lengths = np.fromiter((len(row) + 1 for row in ids), dtype=np.int64, count=len(ids))
        tokens = np.empty(int(lengths.sum()), dtype=np.int32)
        ends = np.cumsum(lengths)
        for row, end in zip(ids, ends):
            tokens[end - len(row) - 1:end - 1] = row
            tokens[end - 1] = self.separator
        if self.read_log:
            with open(self.read_log, "a") as log:
                log.write(f"{os.getpid()} {file} {first} {len(texts)} {peak_rss_kib()}\n")
        return pa.table({
            "file": pa.array([file], pa.int64()), "first_row": pa.array([first], pa.int64()),
            "lengths": pa.LargeListArray.from_arrays(pa.array([0, lengths.size], pa.int64()), pa.array(lengths)),
            "tokens": pa.LargeListArray.from_arrays(pa.array([0, tokens.size], pa.int64()), pa.array(tokens)),
        })


def peak_rss_kib() -> int:
    """This process's peak resident memory (VmHWM), in KiB (0 where /proc is absent)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tokenised_blocks(files: list[str], start: StreamPosition, text_column: str, tokenizer_json: str,
                     separator: int, workers: int, read_log: str | None):
    """(file, first row, lengths, tokens) of every block from `start` on, in stream order: through
    a Ray Data job on up to `workers` actors, or in this process when `workers` is 0 or one file
    is left (a file is the unit of parallelism: one file would pay the job's start, ~20-30 s on
    2 cores, for nothing; the built-in corpus is one file)."""
    items = [{"file": i, "skip": start.row if i == start.file else 0} for i in range(start.file, len(files))]
    arguments = dict(files=files, text_column=text_column, tokenizer_json=tokenizer_json, separator=separator,
                     read_log=read_log)
    if workers == 0 or len(items) == 1:
        tokenize = TokenizeFiles(**arguments)
        tables = (table for item in items for table in tokenize.blocks(item["file"], item["skip"]))
    else:
        tables = ray_data_tables(items, arguments, workers)
    for table in tables:
        for row in range(table.num_rows):
            yield (table.column("file")[row].as_py(), table.column("first_row")[row].as_py(),
                   table.column("lengths")[row].values.to_numpy(), table.column("tokens")[row].values.to_numpy())


def ray_data_tables(items: list[dict], arguments: dict, workers: int):
    import ray.data

    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True  # blocks reach the shard writer in stream order
    context.enable_progress_bars = False  # the writer prints `[corpus]` lines instead
    dataset = ray.data.from_items(items, override_num_blocks=max(1, len(items))).map_batches(
        TokenizeFiles, batch_size=1, num_cpus=1, fn_constructor_kwargs=arguments,
        compute=ray.data.ActorPoolStrategy(min_size=1, max_size=workers, max_tasks_in_flight_per_actor=1))
    yield from dataset.iter_batches(batch_size=None, batch_format="pyarrow", prefetch_batches=1)


# --- the ordered consumer: shards --------------------------------------------------------------

def finished_shards(out_dir: str, shard_tokens: int) -> list[dict]:
    """The entries of the shards a former build finished (contiguous from shard 0); a folder
    cut with another shard size starts over."""
    folder = storage.join(out_dir, SHARDS)
    names = set(storage.list_names(folder, folders=False))
    for name in names:  # a killed build's half-written files (storage writes `.name.tmp-<pid>`)
        if name.startswith(".") and ".tmp-" in name:
            storage.remove(storage.join(folder, name))
    entries = []
    while shard_name(len(entries), "json") in names:
        entry = storage.read_json(storage.join(folder, shard_name(len(entries), "json")))
        if not isinstance(entry, dict):  # damaged (read_json said so): rewritten from here
            break
        if entry.get("shard_tokens") != shard_tokens:
            storage.remove_tree(folder)
            return []
        entries.append(entry)
    return entries


class ShardWriter:
    """Cuts the ordered stream of blocks into shards of `shard_tokens` tokens and writes each one
    (tokens, then its entry) as soon as it is full."""

    def __init__(self, out_dir: str, shard_tokens: int, config: CorpusConfig, start: StreamPosition,
                 shards: list[dict]):
        self.folder, self.shard_tokens, self.config = storage.join(out_dir, SHARDS), shard_tokens, config
        self.start, self.shards = start, list(shards)
        self.pending: list[np.ndarray] = []
        self.pending_tokens = 0
        self.position = start  # the stream position of the next token to be taken
        self.started, self.tokens_at_start = time.monotonic(), start.tokens

    def consume(self, blocks) -> None:
        first_block = True
        for file, first_row, lengths, tokens in blocks:
            drop = self.start.offset if first_block and (file, first_row) == (self.start.file, self.start.row) else 0
            first_block = False
            if self.take(file, first_row, lengths, tokens, drop):
                break
        if self.pending_tokens:
            self.write_shard()

    def take(self, file: int, first_row: int, lengths: np.ndarray, tokens: np.ndarray, drop: int) -> bool:
        """Add one block (its first document from token `drop` on); True once a limit is reached."""
        config, position = self.config, self.position
        if config.max_documents is not None:
            lengths = lengths[:max(0, config.max_documents - position.documents)]
        ends = np.cumsum(lengths) - drop  # end of each document in this block's kept tokens
        keep = int(ends[-1]) if ends.size else 0
        if config.max_tokens is not None:
            keep = min(keep, config.max_tokens - position.tokens)
        done = keep < int(ends[-1]) if ends.size else True
        done = done or (config.max_tokens is not None and position.tokens + keep >= config.max_tokens)
        done = done or (config.max_documents is not None and position.documents + lengths.size >= config.max_documents)
        taken = 0
        while taken < keep:
            step = min(keep - taken, self.shard_tokens - self.pending_tokens)
            self.pending.append(tokens[drop + taken:drop + taken + step])
            self.pending_tokens += step
            taken += step
            self.position = self.position_after(file, first_row, ends, drop, taken, position)
            if self.pending_tokens == self.shard_tokens:
                self.write_shard()
        return done

    @staticmethod
    def position_after(file: int, first_row: int, ends: np.ndarray, drop: int, taken: int,
                       before: StreamPosition) -> StreamPosition:
        """The position after `taken` tokens of this block: the document they stop in, and where."""
        document = int(np.searchsorted(ends, taken, side="right"))  # first document ending after it
        begin = 0 if document == 0 else int(ends[document - 1])
        offset = taken - begin + (drop if document == 0 else 0)
        return StreamPosition(file=file, row=first_row + document, offset=offset,
                              documents=before.documents + document, tokens=before.tokens + taken)

    def write_shard(self) -> None:
        tokens = np.concatenate(self.pending) if len(self.pending) > 1 else self.pending[0]
        index = len(self.shards)
        entry = {"shard": index, "file": shard_name(index, "npy"), "tokens": int(tokens.size),
                 "shard_tokens": self.shard_tokens, "next": asdict(self.position)}
        storage.write_bytes(storage.join(self.folder, shard_name(index, "npy")), npy_bytes(tokens))
        storage.write_json(storage.join(self.folder, shard_name(index, "json")), entry)  # last: finished
        self.shards.append(entry)
        self.pending, self.pending_tokens = [], 0
        made = self.position.tokens - self.tokens_at_start
        rate = made / max(time.monotonic() - self.started, 1e-9)
        print(f"[corpus] shard {index} written ({self.config.tokenizer}): {self.position.tokens:,} tokens, "
              f"{self.position.documents:,} documents, {rate:,.0f} tokens/s", flush=True)


def npy_bytes(tokens: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(tokens, dtype=np.int32))
    return buffer.getvalue()


def read_index(corpus_dir: str) -> dict:
    return json.loads(storage.read_text(storage.join(corpus_dir, INDEX)))
