"""Pretraining corpus: packed, ordered batches read from the token shards (the tokenizer: trainables.tokenizer).

The corpus is prepared once per study (`trainables.corpus_prep.prepare_corpus`, a Ray Data job)
into a folder every run reads: the tokenizer in Hugging Face format and the token stream, all
documents concatenated, each ended by the separator, cut into fixed-size shards. Every run walks
the same order of fixed-length windows, so all objectives see the same sample order (the paper's
control) and the data position is a function of the step alone, which makes resuming exact.

The order is a pure function of `order_seed`, held in memory one block of `ORDER_BLOCK_WINDOWS`
windows at a time (a 100B-token corpus has 100M windows): an epoch visits the blocks in stream
order, each permuted on its own (block 0 with `rng([order_seed, epoch])`, block b > 0 with
`rng([order_seed, epoch, b])`). A corpus of at most one block keeps the order of the single-file
corpus before it, and a corpus grown by whole blocks keeps the order of its first blocks, so
a longer run added later trains on the same first samples as the shorter ones.

A replicate r >= 1 of a run (sweeper.plan.replicates) reads the same prepared corpus in an
order of its own: the same blocks in the same stream order, each permuted with
`rng([order_seed, epoch, b, r])` instead (block 0 included). numpy's SeedSequence ignores
trailing zeros, so a seed list whose last entry is r >= 1 is never that of replicate 0's blocks
nor of another (block, replicate): each replicate's order differs, replicate 0's is the one
above bit for bit, and every order stays a pure function of (order_seed, replicate, position),
so a resumed replicate reads on exactly.

Samples (`sample_lengths`). `fixed`: a window is one sample; positions and attention restart
with every document. `variable`: the authors' packer (Nicolas-BZRD/EuroBERT,
optimus/dataprocess/pack_dataset.py, `_pack` with `random_size`) draws a length a uniform in
[12, block - 12], cuts a sample of a tokens, then one of block - a, so each `block` (2,048)
tokens hold two samples of 12 to block - 12 tokens (mean block / 2), documents joined by their
EOS inside a sample; their model restarts positions and attention per sample (flash-attn
varlen over the samples' cu_seq_lens, optimus/trainer/data.py). Here a seq_len-token window is
such a block: its cut is drawn per window from `SeedSequence([order_seed, order block],
spawn_key=(1,))`, the same for every run and replicate (the authors pack once), so a row is two
whole samples, never padded, and a step reads global_batch x seq_len tokens. Left out: they end
a sample up to 11 tokens short where a document ends in its last 12 tokens (the next document
starts the next sample); here a sample always has its drawn length. Their loader shuffles
samples one by one; here a window's two samples stay in the same step.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pyarrow.fs as pafs
import torch

from sweeper.contract.configs import MIN_SAMPLE
from sweeper.store import folders, storage
from sweeper.store.layout import CORPUS_MARKER
from trainables.corpus_prep import read_index
from trainables.model import varlen_segments
from trainables.objectives import TokenBatch

ORDER_BLOCK_WINDOWS = 1 << 16
"""Windows permuted together: 65,536 (8.4M tokens at seq_len 128, 67M at 1,024)."""


class PackedCorpus:
    """Fixed-length windows over the token stream, visited in one seeded order per epoch.
    Shards are read memory-mapped (node-local copies of an object-store corpus, made for the
    shards a window touches, when it first does); a window may span two shards."""

    def __init__(self, corpus_dir: str, seq_len: int, order_seed: int, replicate: int = 0,
                 sample_lengths: str = "fixed"):
        self.corpus_dir = corpus_dir
        self.meta = storage.read_json(storage.join(corpus_dir, CORPUS_MARKER))
        if self.meta is None:
            raise FileNotFoundError(f"corpus {storage.display(corpus_dir)} is not prepared (no {CORPUS_MARKER})")
        if "shards" in self.meta:
            entries = read_index(corpus_dir)["shards"]
            self.shard_files = ["shards/" + e["file"] for e in entries]
            sizes = [e["tokens"] for e in entries]
        else:  # a corpus prepared before shards: one tokens.npy
            self.shard_files, sizes = ["tokens.npy"], [self.meta["tokens"]]
        self.shard_starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self._shards: dict[int, np.ndarray] = {}
        self.seq_len = seq_len
        self.order_seed = order_seed
        self.replicate = replicate
        self.num_windows = int(self.shard_starts[-1]) // seq_len
        if self.num_windows == 0:
            raise ValueError(f"corpus has {int(self.shard_starts[-1])} tokens, fewer than seq_len={seq_len}")
        self.special_ids = torch.tensor(self.meta["special_ids"])
        self._orders: dict[tuple[int, int], np.ndarray] = {}
        if sample_lengths not in ("fixed", "variable"):
            raise ValueError(f"sample_lengths {sample_lengths!r} is not fixed or variable")
        if sample_lengths == "variable" and seq_len < 2 * MIN_SAMPLE:
            raise ValueError(f"seq_len {seq_len} holds no two samples of {MIN_SAMPLE} tokens")
        self.variable = sample_lengths == "variable"
        self._splits: dict[int, np.ndarray] = {}

    def _block_order(self, epoch: int, block: int) -> np.ndarray:
        """Permutation of one block's windows (two kept: a batch may straddle blocks)."""
        if (epoch, block) not in self._orders:
            size = min(ORDER_BLOCK_WINDOWS, self.num_windows - block * ORDER_BLOCK_WINDOWS)
            seed = ([self.order_seed, epoch, block, self.replicate] if self.replicate else
                    [self.order_seed, epoch] if block == 0 else [self.order_seed, epoch, block])
            if len(self._orders) >= 2:
                self._orders.pop(next(iter(self._orders)))
            self._orders[(epoch, block)] = np.random.default_rng(seed).permutation(size)
        return self._orders[(epoch, block)]

    def split_at(self, window: int) -> int:
        """Where window `window` is cut into its two samples (`variable`): a in [12, seq_len - 12],
        as the authors' `np.random.randint(min_doc_size, block_size - (min_doc_size - 1))`."""
        block, offset = divmod(window, ORDER_BLOCK_WINDOWS)
        if block not in self._splits:
            size = min(ORDER_BLOCK_WINDOWS, self.num_windows - block * ORDER_BLOCK_WINDOWS)
            # spawn_key keeps this stream apart from the orders' seeds ([order_seed, epoch, ...]).
            rng = np.random.default_rng(np.random.SeedSequence([self.order_seed, block], spawn_key=(1,)))
            if len(self._splits) >= 2:
                self._splits.pop(next(iter(self._splits)))
            self._splits[block] = rng.integers(MIN_SAMPLE, self.seq_len - MIN_SAMPLE + 1, size)
        return int(self._splits[block][offset])

    def window_at(self, position: int) -> int:
        """The window at `position` of the endless sample sequence (epoch after epoch)."""
        epoch, within = divmod(position, self.num_windows)
        block, offset = divmod(within, ORDER_BLOCK_WINDOWS)
        return block * ORDER_BLOCK_WINDOWS + int(self._block_order(epoch, block)[offset])

    def window_indices(self, step: int, global_batch: int, rank: int, world_size: int) -> list[int]:
        """Window ids of this rank's slice of global batch `step` (a pure function of the step)."""
        per_rank = global_batch // world_size
        first = step * global_batch + rank * per_rank
        return [self.window_at(i) for i in range(first, first + per_rank)]

    def _shard(self, index: int) -> np.ndarray:
        if index not in self._shards:
            name = self.shard_files[index]
            try:
                self._shards[index] = np.load(local_shard(self.corpus_dir, self.meta, name), mmap_mode="r")
            except (OSError, ValueError) as error:
                raise RuntimeError(f"corpus {storage.display(self.corpus_dir)}: cannot read shard {name}: "
                                   f"{storage.redact(str(error))}") from error
        return self._shards[index]

    def tokens(self, start: int, stop: int) -> np.ndarray:
        """Tokens [start, stop) of the stream, across shards."""
        shard = int(np.searchsorted(self.shard_starts, start, side="right")) - 1
        pieces = []
        while start < stop:
            base, end = int(self.shard_starts[shard]), int(self.shard_starts[shard + 1])
            take = min(stop, end)
            pieces.append(np.asarray(self._shard(shard)[start - base:take - base]))
            start, shard = take, shard + 1
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def batch(self, step: int, global_batch: int, rank: int = 0, world_size: int = 1) -> TokenBatch:
        """This rank's slice of global batch `step`, on the CPU."""
        windows = self.window_indices(step, global_batch, rank, world_size)
        rows = [self.tokens(w * self.seq_len, (w + 1) * self.seq_len) for w in windows]
        input_ids = torch.from_numpy(np.stack(rows).astype(np.int64))
        if self.variable:
            splits = torch.tensor([self.split_at(w) for w in windows])
            document_ids, position_ids = sample_layout(splits, self.seq_len)
        else:
            document_ids, position_ids = document_layout(input_ids, self.meta["separator_id"])
        return TokenBatch(input_ids, document_ids, position_ids, special_mask=torch.isin(input_ids, self.special_ids),
                          cu_seqlens=varlen_segments(document_ids))


def local_shard(corpus_dir: str, meta: dict, name: str) -> Path:
    """A shard file on this node's disk: in place for a local corpus, else copied once per node
    into the cache (keyed by the corpus's meta, so a rebuilt corpus is copied again)."""
    if not storage.is_remote(corpus_dir):
        return Path(corpus_dir, name)
    stamp = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:16]
    target = folders.in_cache("copies", corpus_dir) / f"{stamp}-shards" / name
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        fs, path = storage.filesystem(storage.join(corpus_dir, name))
        pafs.copy_files(path, str(tmp), source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())
        tmp.replace(target)  # atomic: a process racing for the same shard keeps a whole file
    return target


def document_layout(input_ids: torch.Tensor, separator_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Document ids (a separator closes its own document) and positions restarting per document."""
    is_sep = (input_ids == separator_id).long()
    document_ids = torch.cumsum(is_sep, dim=1) - is_sep
    seq = input_ids.shape[1]
    index = torch.arange(seq).expand_as(input_ids)
    # Start of each token's document: the last index where the document id changed.
    starts = torch.zeros_like(input_ids)
    starts[:, 1:] = torch.where(document_ids[:, 1:] != document_ids[:, :-1], index[:, 1:], 0)
    starts = torch.cummax(starts, dim=1).values
    return document_ids, index - starts


def sample_layout(splits: torch.Tensor, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Segment ids of rows each holding two samples, the second from `splits[row]` on (the
    batch's `document_ids`: attention and CLM targets stay inside a sample), and positions
    restarting with each sample."""
    index = torch.arange(seq_len).expand(len(splits), seq_len)
    sample_ids = (index >= splits[:, None]).long()
    return sample_ids, index - splits[:, None] * sample_ids
