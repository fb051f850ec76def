"""A Hugging Face Llama-family causal LM -> the study's encoder, for continued MLM pretraining.

The encoder's parameter names are Llama's, so the weights map one to one; what changes is the
attention (bidirectional for MLM and fine-tuning, a forward argument here) and the vocabulary,
which grows by the [MASK] token a causal tokenizer lacks (new rows start at the mean embedding).
Anything the encoder cannot reproduce exactly (biases, another head size, scaled RoPE) is
refused rather than silently approximated. Every other causal LM (and these, under `hf_init:
native`) is continued as its own model instead: trainables.causal_mlm, chosen at plan time
(sweeper.plan.hf_init).
"""
from __future__ import annotations

import torch

from trainables.model import LlamaEncoderConfig, LlamaEncoderForMaskedLM

SUPPORTED_MODEL_TYPES = ("llama", "mistral")


def rope_theta_of(hf_config) -> float:
    # transformers 5 keeps RoPE settings in `rope_parameters` (older versions: `rope_scaling`).
    parameters = getattr(hf_config, "rope_parameters", None) or getattr(hf_config, "rope_scaling", None) or {}
    kind = parameters.get("rope_type", parameters.get("type", "default"))
    if kind != "default":
        raise ValueError(f"RoPE scaling {kind!r} is not supported by the encoder")
    return float(parameters.get("rope_theta", getattr(hf_config, "rope_theta", 10_000.0)))


def encoder_config_from(hf_config, vocab_size: int) -> LlamaEncoderConfig:
    if hf_config.model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"{hf_config.model_type!r} is not a Llama-family causal LM "
                         f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})")
    heads = hf_config.num_attention_heads
    if getattr(hf_config, "head_dim", None) not in (None, hf_config.hidden_size // heads):
        raise ValueError("head_dim != hidden_size / num_attention_heads is not supported by the encoder")
    if getattr(hf_config, "attention_bias", False) or getattr(hf_config, "mlp_bias", False):
        raise ValueError("attention or MLP biases are not supported by the encoder")
    return LlamaEncoderConfig(
        vocab_size=max(vocab_size, hf_config.vocab_size), hidden_size=hf_config.hidden_size,
        intermediate_size=hf_config.intermediate_size, num_hidden_layers=hf_config.num_hidden_layers,
        num_attention_heads=heads, num_key_value_heads=getattr(hf_config, "num_key_value_heads", None) or heads,
        max_position_embeddings=hf_config.max_position_embeddings, rms_norm_eps=hf_config.rms_norm_eps,
        rope_theta=rope_theta_of(hf_config), initializer_range=getattr(hf_config, "initializer_range", 0.02),
    )


def grow_rows(weight: torch.Tensor, rows: int) -> torch.Tensor:
    if weight.shape[0] >= rows:
        return weight
    extra = weight.mean(dim=0, keepdim=True).expand(rows - weight.shape[0], -1)
    return torch.cat([weight, extra], dim=0)


def encoder_from_causal_lm(source: str, vocab_size: int) -> LlamaEncoderForMaskedLM:
    """The causal LM at `source` (path or hub name) as an encoder with `vocab_size` rows."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = encoder_config_from(AutoConfig.from_pretrained(source, trust_remote_code=False), vocab_size)
    causal = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, trust_remote_code=False)
    state = dict(causal.state_dict())
    state.setdefault("lm_head.weight", state["model.embed_tokens.weight"])  # tied embeddings
    for key in ("model.embed_tokens.weight", "lm_head.weight"):
        state[key] = grow_rows(state[key], config.vocab_size).clone()
    encoder = LlamaEncoderForMaskedLM(config)
    expected = set(encoder.state_dict())
    missing = expected - set(state)
    if missing:
        raise ValueError(f"{source}: weights missing for {sorted(missing)[:5]}")
    encoder.load_state_dict({key: state[key] for key in expected}, strict=True)
    return encoder
