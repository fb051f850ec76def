"""The backbone saves and loads through transformers' Auto classes (no trust_remote_code): importing
trainables.model registers them."""
import torch
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM

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
    # Same float32 bits, same kernels: equal, or sums of <= 64 O(1) terms in another order (64 * 2**-24 ~ 4e-6).
    assert torch.allclose(masked_lm(ids).logits, model(ids).logits, atol=1e-5)
    backbone = AutoModel.from_pretrained(tmp_path)
    assert isinstance(backbone, LlamaEncoderModel)
    assert torch.allclose(backbone(ids).last_hidden_state, model.model(ids).last_hidden_state, atol=1e-5)  # as above


def test_architecture_follows_llama():
    config = LlamaEncoderConfig(vocab_size=100, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                                num_attention_heads=8, num_key_value_heads=2)
    names = dict(build_model(config, 0).named_parameters())
    assert names["model.layers.0.self_attn.k_proj.weight"].shape == (16, 64)  # GQA: 2 KV heads of 8 dims
    assert names["model.layers.0.mlp.gate_proj.weight"].shape == (96, 64)  # SwiGLU
    assert not any(name.endswith("bias") for name in names)
    assert names["lm_head.weight"].data_ptr() != names["model.embed_tokens.weight"].data_ptr()  # untied


def test_varlen_segments_split_packed_rows_at_documents_and_rows():
    from trainables.model import varlen_segments

    document_ids = torch.tensor([[0, 0, 0, 1, 1], [1, 1, 2, 2, 2]])  # doc 1 continues into row 2: new segment
    cu_seqlens = varlen_segments(document_ids)
    assert cu_seqlens.tolist() == [0, 3, 5, 7, 10] and cu_seqlens.dtype == torch.int32


def test_flash_varlen_path_matches_the_block_mask_path(monkeypatch):
    """flash-attn is GPU-only; its varlen kernel is stood in for by SDPA run on each segment, so
    what is checked here is our side of it: the flattening, the segment table, GQA and the
    causal flag give the block-mask path's outputs."""
    import sys
    import types

    import torch.nn.functional as F

    from trainables import model as model_module

    def reference_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal):
        out = torch.empty_like(q)
        for start, end in zip(cu_q[:-1].tolist(), cu_q[1:].tolist()):
            qs, ks, vs = (t[start:end].transpose(0, 1) for t in (q, k, v))
            out[start:end] = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, enable_gqa=True).transpose(
                0, 1
            )
        return out

    config = LlamaEncoderConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2)
    model = build_model(config, seed=0).model.to(torch.bfloat16)
    ids = torch.randint(5, 100, (2, 12))
    docs = torch.tensor([[0] * 5 + [1] * 7, [2] * 9 + [3] * 3])
    positions = torch.cat([torch.arange(5), torch.arange(7)]).expand(2, 12).clone()
    positions[1] = torch.cat([torch.arange(9), torch.arange(3)])
    for causal in (False, True):
        expected = model(ids, document_ids=docs, position_ids=positions, causal=causal).last_hidden_state
        with monkeypatch.context() as patch:
            patch.setitem(sys.modules, "flash_attn", types.SimpleNamespace(flash_attn_varlen_func=reference_varlen))
            patch.setattr(model_module, "flash_capable", lambda device: True)
            patch.setattr(model_module, "FLASH_CHOICE", model_module.FlashChoice())
            got = model(ids, document_ids=docs, position_ids=positions, causal=causal).last_hidden_state
            assert model_module.FLASH_CHOICE.kernel is reference_varlen  # the varlen path did run
        # bf16 outputs up to ~3 (spacing 2**-6 in [2, 4)), attention summed in another order: ~2 steps (measured 1).
        assert torch.allclose(got.float(), expected.float(), atol=3e-2), (got - expected).abs().max()
