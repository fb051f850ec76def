"""Tiny Hugging Face checkpoints of the families a study may fine-tune, written offline.

`build_tiny_checkpoint(kind, folder)` writes a randomly initialised model of that family, built
from transformers' own config class (`AutoModel.from_config`, saved as safetensors), and a
tokenizer in the same folder shaped like the family's real one:

- bert: WordPiece, lowercase, `[CLS] text [SEP]`, pad `[PAD]`, mask `[MASK]` (no dropout, unlike
  the real one: tests compare packed and padded passes to float rounding);
- modernbert: byte-level BPE with BERT's special tokens, `[CLS] text [SEP]`;
- eurobert: byte-level BPE, `<|begin_of_text|> text <|end_of_text|>`, pad = EOS, `<|mask|>`;
- llama: byte-level BPE, `<|begin_of_text|> text` (BOS only, as Llama 3), EOS, no pad token;
- qwen3: byte-level BPE, no BOS and nothing added, EOS = pad = `<|endoftext|>`.

Tokenizers are trained with the `tokenizers` library on the first documents of the shipped
WordNet corpus (`trainables/data_files/wordnet`), so the WordNet fine-tuning tasks tokenise into
words and sub-words rather than bytes. Everything is deterministic for a seed (the tokenizer
does not depend on it) and nothing touches the network. Importable by tests and benchmarks.
"""
from __future__ import annotations

import json
from functools import cache, lru_cache
from pathlib import Path

KINDS = ("bert", "modernbert", "eurobert", "llama", "qwen3")

VOCAB_SIZE = 1536
"""Tokens per tokenizer: WordNet's frequent words whole, the rest in pieces."""
TRAINING_DOCUMENTS = 400
"""WordNet documents the tokenizers learn from (~1.3M characters: about a second to train)."""
LOCAL_ATTENTION = 16
"""ModernBERT's local window in tokens (the real model's is 128): small enough that the tests'
sentences are longer than it, so its sliding-window layers matter."""

BERT_SPECIALS = {"unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                 "mask_token": "[MASK]"}
LLAMA3_BOS, LLAMA3_EOS = "<|begin_of_text|>", "<|end_of_text|>"
QWEN_END = "<|endoftext|>"
SPECIAL_TOKENS = {
    "bert": BERT_SPECIALS,
    "modernbert": BERT_SPECIALS,
    "eurobert": {"bos_token": LLAMA3_BOS, "eos_token": LLAMA3_EOS, "pad_token": LLAMA3_EOS, "mask_token": "<|mask|>"},
    "llama": {"bos_token": LLAMA3_BOS, "eos_token": LLAMA3_EOS},
    "qwen3": {"eos_token": QWEN_END, "pad_token": QWEN_END},
}
TEMPLATES = {  # what the tokenizer adds around one text (None: nothing)
    "bert": ("[CLS]", "[SEP]"), "modernbert": ("[CLS]", "[SEP]"), "eurobert": (LLAMA3_BOS, LLAMA3_EOS),
    "llama": (LLAMA3_BOS, None), "qwen3": None,
}


@lru_cache(maxsize=1)
def training_texts() -> tuple[str, ...]:
    from sweeper.contract.text_sources import iter_corpus_texts

    return tuple(iter_corpus_texts("wordnet", "text", TRAINING_DOCUMENTS))


def train_tokenizer(kind: str):
    """The family-shaped fast tokenizer, its ids renumbered: special tokens first, then the
    rest sorted (the trainer numbers tokens in hash-map order, which differs between processes).
    A new object at each call (callers add tokens or change padding), trained once a process."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(trained_tokenizer(kind)), padding_side="right",
                                   truncation_side="right", **SPECIAL_TOKENS[kind])


@cache
def trained_tokenizer(kind: str) -> str:
    """`kind`'s trained `tokenizers` tokenizer as its JSON: the same for every call (training
    takes ~0.5 CPU-s and the quick tier asks for the same kinds again and again, e.g. the four
    tiny causal LMs all use qwen3's)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    specials = list(dict.fromkeys(SPECIAL_TOKENS[kind].values()))
    if kind == "bert":
        tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials, show_progress=False)
    else:
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(training_texts(), trainer=trainer)
    trained = tokenizer.get_vocab()
    vocab = {token: i for i, token in enumerate(specials + sorted(t for t in trained if t not in specials))}
    if kind == "bert":
        tokenizer.model = models.WordPiece(vocab=vocab, unk_token="[UNK]")
    else:  # merges name tokens by their text: the learned merges stay valid under the new ids
        merges = [tuple(pair) for pair in json.loads(tokenizer.to_str())["model"]["merges"]]
        tokenizer.model = models.BPE(vocab=vocab, merges=merges)
    template = TEMPLATES[kind]
    if template is not None:
        first, last = template
        single = " ".join(t for t in (first, "$A", last) if t)
        tokenizer.post_processor = processors.TemplateProcessing(
            single=single, pair=f"{single} {' '.join(t for t in ('$B', last) if t)}",
            special_tokens=[(t, vocab[t]) for t in template if t])
    elif kind != "bert":
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return tokenizer.to_str()


def model_config(kind: str, tokenizer, hidden_size: int, layers: int):
    """transformers' own config class of the family, at a tiny size, its special ids the tokenizer's."""
    from transformers import BertConfig, EuroBertConfig, LlamaConfig, ModernBertConfig, Qwen3Config

    heads = max(1, hidden_size // 16)
    shared = {"vocab_size": len(tokenizer), "hidden_size": hidden_size, "num_hidden_layers": layers,
              "num_attention_heads": heads, "intermediate_size": 2 * hidden_size, "max_position_embeddings": 512,
              "pad_token_id": tokenizer.pad_token_id}
    decoder = {"num_key_value_heads": max(1, heads // 2), "bos_token_id": tokenizer.bos_token_id,
               "eos_token_id": tokenizer.eos_token_id}
    if kind == "bert":
        # No dropout (BERT's is 0.1; the other families have none): packed and padded passes
        # would draw different masks, and tests compare them to float rounding.
        return BertConfig(**shared, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if kind == "modernbert":
        # Layer 0 global, then local (sliding-window) layers, as ModernBERT alternates them.
        return ModernBertConfig(**shared, local_attention=LOCAL_ATTENTION, global_attn_every_n_layers=3,
                                cls_token_id=tokenizer.cls_token_id, sep_token_id=tokenizer.sep_token_id,
                                bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id)
    if kind == "eurobert":
        return EuroBertConfig(**shared, **decoder, mask_token_id=tokenizer.mask_token_id)
    if kind == "llama":
        return LlamaConfig(**shared, **decoder)
    if kind == "qwen3":
        return Qwen3Config(**shared, **decoder, head_dim=hidden_size // heads)
    raise ValueError(f"unknown kind {kind!r}: one of {KINDS}")


def build_tiny_checkpoint(kind: str, folder: Path, seed: int = 0, hidden_size: int = 64, layers: int = 2) -> Path:
    """Write a tiny `kind` checkpoint (config.json, model.safetensors, tokenizer files) into
    `folder`, randomly initialised from `seed`; returns `folder`."""
    import torch
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Writing model shards" on every call
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}: one of {KINDS}")
    folder = Path(folder)
    tokenizer = train_tokenizer(kind)
    config = model_config(kind, tokenizer, hidden_size, layers)
    torch.manual_seed(seed)
    model = AutoModel.from_config(config, dtype=torch.float32)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder
