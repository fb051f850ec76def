"""Pretraining corpus: text source -> tokenizer -> one token stream -> packed, ordered batches.

Prepared once per study (`prepare_corpus`) into a directory every run reads: the tokenizer in
Hugging Face format and `tokens.npy`, all documents concatenated, each ended by the separator.
Every run walks the same fixed permutation of fixed-length windows, so all objectives see the
same sample order (the paper's control) and the data position is a function of the step alone,
which makes resuming exact.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from sweeper import storage
from sweeper.configs import CorpusConfig
from sweeper.layout import CORPUS_MARKER
from trainables.objectives import TokenBatch
from trainables.text_sources import iter_corpus_texts

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def train_wordpiece_tokenizer(texts: list[str], vocab_size: int):
    """A lowercase WordPiece tokenizer trained on `texts` (under a second per 100k tokens)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    # The trainer picks the same tokens every time but numbers them in hash-map order, which
    # differs between processes: renumber them (special tokens, then the rest sorted) so two
    # studies on the same corpus get the same token ids, hence the same initial embeddings.
    trained = tokenizer.get_vocab()
    ordered = SPECIAL_TOKENS + sorted(token for token in trained if token not in SPECIAL_TOKENS)
    tokenizer.model = models.WordPiece(vocab={token: i for i, token in enumerate(ordered)}, unk_token="[UNK]")
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]",
    )


def load_or_train_tokenizer(name: str, texts: list[str], vocab_size: int):
    if name == "train-wordpiece":
        return train_wordpiece_tokenizer(texts, vocab_size)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(name)
    if tokenizer.mask_token is None:  # causal-LM tokenizers (Llama-3) have none: add one
        tokenizer.add_special_tokens({"mask_token": "[MASK]"})
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.mask_token
    return tokenizer


def prepare_corpus(config: CorpusConfig, out_dir: str) -> dict:
    """Build `out_dir` (a study location) once (idempotent: a finished directory is reused)
    and return its meta (`CORPUS_MARKER`, written last)."""
    storage.build_once(out_dir, CORPUS_MARKER, lambda tmp: build_corpus(config, tmp))
    return storage.read_json(storage.join(out_dir, CORPUS_MARKER))


def build_corpus(config: CorpusConfig, tmp: Path) -> None:
    texts = list(iter_corpus_texts(config.source, config.text_column, config.max_documents))
    tokenizer = load_or_train_tokenizer(config.tokenizer, texts, config.vocab_size)
    separator = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    stream = np.fromiter((tok for ids in encoded for tok in (*ids, separator)), dtype=np.int32)
    np.save(tmp / "tokens.npy", stream)
    tokenizer.save_pretrained(tmp / "tokenizer")
    meta = {
        "documents": len(texts), "tokens": int(stream.size), "vocab_size": len(tokenizer),
        "separator_id": int(separator), "mask_token_id": int(tokenizer.mask_token_id),
        "pad_token_id": int(tokenizer.pad_token_id), "special_ids": sorted(set(tokenizer.all_special_ids)),
        "source": config.source, "tokenizer": config.tokenizer,
    }
    (tmp / CORPUS_MARKER).write_text(json.dumps(meta, indent=1))


class PackedCorpus:
    """Fixed-length windows over the token stream, visited in one seeded order per epoch."""

    def __init__(self, corpus_dir: str, seq_len: int, order_seed: int):
        local = storage.local_copy(corpus_dir, CORPUS_MARKER)  # memory-mapped: it must be on a disk
        self.meta = json.loads((local / CORPUS_MARKER).read_text())
        self.tokens = np.load(local / "tokens.npy", mmap_mode="r")
        self.seq_len = seq_len
        self.order_seed = order_seed
        self.num_windows = self.tokens.size // seq_len
        if self.num_windows == 0:
            raise ValueError(f"corpus has {self.tokens.size} tokens, fewer than seq_len={seq_len}")
        self.special_ids = torch.tensor(self.meta["special_ids"])
        self._orders: dict[int, np.ndarray] = {}

    def _order(self, epoch: int) -> np.ndarray:
        if epoch not in self._orders:
            self._orders = {epoch: np.random.default_rng([self.order_seed, epoch]).permutation(self.num_windows)}
        return self._orders[epoch]

    def window_indices(self, step: int, global_batch: int, rank: int, world_size: int) -> list[int]:
        """Window ids of this rank's slice of global batch `step` (a pure function of the step)."""
        per_rank = global_batch // world_size
        first = step * global_batch + rank * per_rank
        return [
            int(self._order(i // self.num_windows)[i % self.num_windows])
            for i in range(first, first + per_rank)
        ]

    def batch(self, step: int, global_batch: int, rank: int = 0, world_size: int = 1) -> TokenBatch:
        """This rank's slice of global batch `step`, on the CPU."""
        rows = [
            np.asarray(self.tokens[w * self.seq_len:(w + 1) * self.seq_len])
            for w in self.window_indices(step, global_batch, rank, world_size)
        ]
        input_ids = torch.from_numpy(np.stack(rows).astype(np.int64))
        return TokenBatch(input_ids, *document_layout(input_ids, self.meta["separator_id"]),
                          special_mask=torch.isin(input_ids, self.special_ids))


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
