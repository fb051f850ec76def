"""Continued pretraining from a Hugging Face Llama causal LM built from config and saved locally."""
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig

from trainables.convert import encoder_config_from, encoder_from_causal_lm


def tiny_llama(tmp_path, tie=False, **overrides):
    config = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=tie, **overrides)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(tmp_path)
    return model


@pytest.mark.parametrize("tie", [False, True])
def test_causal_view_of_the_encoder_reproduces_the_llama(tmp_path, tie):
    llama = tiny_llama(tmp_path, tie=tie)
    encoder = encoder_from_causal_lm(str(tmp_path), vocab_size=301).eval()  # +1 row: [MASK]
    ids = torch.randint(0, 300, (2, 17))
    with torch.no_grad():
        expected = llama(ids).logits
        causal = encoder(ids, causal=True).logits[..., :300]
        bidirectional = encoder(ids).logits[..., :300]
    # float32, Llama's ops, maybe summed in another order: ~12 sums of <= 96 O(1) terms, 12 * 96 * 2**-24 ~ 7e-5.
    assert torch.allclose(causal, expected, atol=1e-4), "same weights, same RoPE, GQA and SwiGLU as Llama"
    # The future moves each position's logits by 0.17 to 0.57 (largest entry): far above 1e-3.
    assert not torch.allclose(bidirectional[:, :-1], expected[:, :-1], atol=1e-3), "MLM view sees the future"
    assert encoder.config.vocab_size == 301
    mean_row = llama.model.embed_tokens.weight.mean(0)
    # grow_rows' float32 mean of 300 rows (|x| ~ 0.02); in another order <= 300 * 2**-24 * 0.02 ~ 4e-7.
    assert torch.allclose(encoder.model.embed_tokens.weight[300], mean_row, atol=1e-6)


def test_unsupported_variants_are_refused():
    with pytest.raises(ValueError, match="biases"):
        encoder_config_from(LlamaConfig(hidden_size=64, num_attention_heads=8, attention_bias=True), 100)
    config = MistralConfig(hidden_size=64, num_attention_heads=8, num_key_value_heads=2, intermediate_size=96)
    assert encoder_config_from(config, 100).num_key_value_heads == 2
