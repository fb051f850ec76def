"""Tiny Hugging Face causal LMs of four families, written offline, for continued MLM pretraining
as their own models (trainables.causal_mlm).

`build_tiny_causal_lm(kind, folder)` writes a randomly initialised `AutoModelForCausalLM` built
from transformers' own config class and a Qwen-shaped byte-level BPE tokenizer (no mask token,
EOS = pad: what a causal LM's tokenizer looks like; tests/tiny_checkpoints.py trains it):
- qwen3: GQA, per-head q/k norms, untied LM head;
- gemma3 (`Gemma3TextConfig`, model_type gemma3_text): a sliding-window layer then a global one,
  tied embeddings scaled by sqrt(hidden);
- modernbert-decoder (`ModernBertDecoderConfig`, the architecture of Ettin's decoders): a global
  layer then a local (sliding-window) one, LayerNorm, tied embeddings;
- olmo2: post-norm blocks with q/k norms, untied LM head.
"""
from __future__ import annotations

from pathlib import Path

CAUSAL_KINDS = ("qwen3", "gemma3", "modernbert-decoder", "olmo2")
WINDOW = 16
"""Sliding-window width in tokens (Gemma 3's, ModernBERT's local layers): shorter than the
tests' documents, so the windowed layers matter."""


def causal_config(kind: str, tokenizer, hidden_size: int = 64, layers: int = 2):
    from transformers import Gemma3TextConfig, ModernBertDecoderConfig, Olmo2Config, Qwen3Config

    heads = hidden_size // 16
    shared = {"vocab_size": len(tokenizer), "hidden_size": hidden_size, "num_hidden_layers": layers,
              "num_attention_heads": heads, "intermediate_size": 2 * hidden_size, "max_position_embeddings": 512,
              "pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id}
    if kind == "qwen3":
        return Qwen3Config(**shared, num_key_value_heads=heads // 2, head_dim=16, tie_word_embeddings=False)
    if kind == "gemma3":
        return Gemma3TextConfig(**shared, num_key_value_heads=heads // 2, head_dim=16, sliding_window=WINDOW,
                                layer_types=["sliding_attention", "full_attention"][:layers])
    if kind == "modernbert-decoder":
        return ModernBertDecoderConfig(**shared, local_attention=WINDOW, global_attn_every_n_layers=2,
                                       **dict.fromkeys(("bos_token_id", "cls_token_id", "sep_token_id"),
                                                       tokenizer.eos_token_id))
    if kind == "olmo2":
        return Olmo2Config(**shared, num_key_value_heads=heads // 2, tie_word_embeddings=False)
    raise ValueError(f"unknown kind {kind!r}: one of {CAUSAL_KINDS}")


def build_tiny_causal_lm(kind: str, folder: Path, seed: int = 0) -> Path:
    """Write a tiny `kind` causal LM (config.json, model.safetensors, tokenizer) into `folder`."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from tiny_checkpoints import train_tokenizer

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    folder = Path(folder)
    tokenizer = train_tokenizer("qwen3")
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(causal_config(kind, tokenizer), dtype=torch.float32)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder
