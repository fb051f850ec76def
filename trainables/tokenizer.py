"""The corpus's tokenizer: a WordPiece vocabulary trained on the corpus, or a Hugging Face one.

Used by the corpus preparation (trainables.corpus_prep), which publishes it into the corpus
folder; every run then loads that published copy. Imports `tokenizers` and `transformers` only
when called (no torch).
"""
from __future__ import annotations

import re
from collections.abc import Iterable

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def train_wordpiece_tokenizer(texts: Iterable[str], vocab_size: int):
    """A lowercase WordPiece tokenizer trained on `texts`, streamed (under a second per 100k tokens)."""
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


def load_or_train_tokenizer(name: str, texts: Iterable[str], vocab_size: int, mask_token: str = "added"):
    """`train-wordpiece` trained on `texts`, or a Hugging Face tokenizer (texts unread). A
    tokenizer without a mask token (causal LMs': Llama-3) gets one: under `reserved` its first
    reserved special token where it has one, else (and under `added`) a new [MASK] row."""
    if name == "train-wordpiece":
        return train_wordpiece_tokenizer(texts, vocab_size)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=False)
    if tokenizer.mask_token is None:
        reserved = first_reserved_token(tokenizer) if mask_token == "reserved" else None
        if mask_token == "reserved" and reserved is None:
            print(f"[corpus] tokenizer {name!r} has no reserved special token: [MASK] is added as a new row",
                  flush=True)
        tokenizer.add_special_tokens({"mask_token": reserved or "[MASK]"})
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.mask_token
    return tokenizer


RESERVED = re.compile(r"<\|reserved_special_token_(\d+)\|>")
"""Llama-3's unused special tokens (`<|reserved_special_token_0|>` is id 128,002)."""


def first_reserved_token(tokenizer) -> str | None:
    """The reserved special token of lowest number, or None. The authors' MLM takes id 128,002 of
    Llama-3 as its mask (Nicolas-BZRD/EuroBERT, optimus/trainer/configuration/model.py
    `mask_token_id`), which is Llama-3's `<|reserved_special_token_0|>`."""
    found = [(int(match.group(1)), token.content) for token in tokenizer.added_tokens_decoder.values()
             if token.special and (match := RESERVED.fullmatch(token.content))]
    return min(found)[1] if found else None
