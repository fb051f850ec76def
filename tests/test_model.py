"""The backbone saves and loads through transformers' Auto classes (no trust_remote_code)."""
import torch
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM

import trainables  # noqa: F401  (registers the architecture)
from trainables.model import LlamaEncoderConfig, LlamaEncoderForMaskedLM, LlamaEncoderModel, build_model


def test_save_and_load_with_auto_classes(tmp_path):
    model = build_model(LlamaEncoderConfig(vocab_size=300, hidden_size=32, intermediate_size=64,
                                           num_hidden_layers=2, num_attention_heads=4,
                                           num_key_value_heads=1), seed=0)
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    ids = torch.randint(0, 300, (2, 10))
    assert AutoConfig.from_pretrained(tmp_path).model_type == "llama_encoder"
    masked_lm = AutoModelForMaskedLM.from_pretrained(tmp_path)
    assert isinstance(masked_lm, LlamaEncoderForMaskedLM)
    assert torch.allclose(masked_lm(ids).logits, model(ids).logits, atol=1e-6)
    backbone = AutoModel.from_pretrained(tmp_path)
    assert isinstance(backbone, LlamaEncoderModel)
    assert torch.allclose(backbone(ids).last_hidden_state, model.model(ids).last_hidden_state, atol=1e-6)


def test_architecture_follows_llama():
    config = LlamaEncoderConfig(vocab_size=100, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                                num_attention_heads=8, num_key_value_heads=2)
    names = dict(build_model(config, 0).named_parameters())
    assert names["model.layers.0.self_attn.k_proj.weight"].shape == (16, 64)  # GQA: 2 KV heads of 8 dims
    assert names["model.layers.0.mlp.gate_proj.weight"].shape == (96, 64)  # SwiGLU
    assert not any(name.endswith("bias") for name in names)
    assert names["lm_head.weight"].data_ptr() != names["model.embed_tokens.weight"].data_ptr()  # untied
