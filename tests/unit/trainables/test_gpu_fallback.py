"""The GPU path that degrades (trainables.model): flash-attn's varlen kernel only where it runs,
SDPA with one warning everywhere else, and no per-forward host sync or per-batch recompile.

No GPU here: flash-attn is stood in for by a package of that name in a temporary folder put on
sys.path (imported by the real import machinery), and the capability check (`flash_capable`) is
told that the CPU qualifies. Everything else is real: torch, the model, `train_step`, bf16
autocast on the CPU (flash-attn's dtype), torch.compile.
"""
from __future__ import annotations

import sys
import types
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.testing import CompileCounter

from trainables import model as model_module
from trainables.corpus import document_layout
from trainables.model import FlashChoice, LlamaEncoderConfig, build_model, varlen_segments
from trainables.objectives import LossContext, RowDraws, TokenBatch, clm_loss, mlm_loss
from trainables.tasks.packing import PackedBackbone
from trainables.train_step import train_step



VOCAB, MASK_ID, SEP_ID = 256, 4, 3
MLM = {"mask_ratio": 0.4, "random_replace": 0.1, "keep_original": 0.1}
TINY = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2)
STEPS = 3

UNDEFINED_SYMBOL = '''
from pathlib import Path
with open(Path(__file__).with_name("imports.log"), "a") as log:
    log.write("import\\n")
raise ImportError("flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so: undefined symbol: _ZN3c105ErrorC2E")
'''
"""A flash-attn wheel built for another torch: its CUDA extension fails to load at import."""

RAISES_AT_CALL = '''
CALLS = []

def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False, **kwargs):
    CALLS.append(tuple(q.shape))
    raise RuntimeError("FlashAttention only supports Ampere GPUs or newer.")
'''
"""A flash-attn that imports but whose kernel refuses the GPU when called."""


def packed_batch(rows: int, seq: int, seed: int, separators: tuple[int, ...]) -> TokenBatch:
    """Packed rows as `PackedCorpus.batch` builds them: document table counted on the host."""
    ids = torch.randint(5, VOCAB, (rows, seq), generator=torch.Generator().manual_seed(seed))
    for row, column in enumerate(separators):
        ids[row % rows, column] = SEP_ID
    docs, positions = document_layout(ids, SEP_ID)
    return TokenBatch(ids, docs, positions, ids == SEP_ID, cu_seqlens=varlen_segments(docs))


def train(loss, steps: int = STEPS) -> tuple[list[float], dict[str, torch.Tensor]]:
    """A few real steps of the real model (two micro-batches each) under bf16 autocast."""
    model = build_model(LlamaEncoderConfig(**TINY), seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for step in range(steps):
        batch = packed_batch(4, 24, seed=step, separators=(5, 11, 17, 20, 3, 9))
        context = LossContext(draws=RowDraws(7, step), mask_token_id=MASK_ID, vocab_size=VOCAB)
        result = train_step(model, optimizer, batch, loss, MLM, context, micro_batch_size=2,
                            autocast_dtype=torch.bfloat16)
        losses.append(result.loss)
    return losses, {name: p.detach().clone() for name, p in model.named_parameters()}


@pytest.fixture
def fake_flash_attn(tmp_path, monkeypatch):
    """Writes a `flash_attn` package with the given source into a folder on sys.path; the CPU
    counts as a flash-capable GPU and the process has not decided yet."""
    sys.modules.pop("flash_attn", None)
    monkeypatch.setattr(model_module, "FLASH_CHOICE", FlashChoice())

    def install(source: str):
        package = tmp_path / "site" / "flash_attn"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path / "site"))
        monkeypatch.setattr(model_module, "flash_capable", lambda device: True)
        return package

    yield install
    sys.modules.pop("flash_attn", None)


def flash_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if "flash-attn" in str(w.message)]


@pytest.mark.parametrize(("broken", "loss"), [("undefined-symbol-at-import", mlm_loss), ("raises-at-call", clm_loss)],
                         ids=["undefined-symbol-at-import-mlm", "raises-at-call-clm"])
def test_a_flash_attn_that_cannot_run_falls_back_to_sdpa_once_with_one_warning(fake_flash_attn, monkeypatch,
                                                                                broken, loss):
    expected_losses, expected_weights = train(loss)  # SDPA only: the CPU is no flash-capable GPU
    package = fake_flash_attn(UNDEFINED_SYMBOL if broken == "undefined-symbol-at-import" else RAISES_AT_CALL)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        losses, weights = train(loss)
    (message,) = flash_warnings(caught)  # exactly one, for 3 steps x 2 micro-batches
    assert "packed batches run SDPA" in message
    if broken == "undefined-symbol-at-import":
        assert "undefined symbol" in message
        assert (package / "imports.log").read_text().count("import") == 1  # not tried again
    else:
        assert "Ampere" in message
        assert len(sys.modules["flash_attn"].CALLS) == 1  # the probe's call only, never a step's
    assert model_module.FLASH_CHOICE.decided and model_module.FLASH_CHOICE.kernel is None
    assert losses == expected_losses
    assert all(torch.equal(weights[name], expected_weights[name]) for name in weights)


def test_without_flash_attn_a_capable_gpu_warns_once_and_the_cpu_not_at_all(monkeypatch):
    sys.modules.pop("flash_attn", None)
    monkeypatch.setattr(model_module, "FLASH_CHOICE", FlashChoice())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(mlm_loss, steps=1)
        assert flash_warnings(caught) == []  # a CPU never runs flash-attn: nothing to say
        monkeypatch.setattr(model_module, "flash_capable", lambda device: True)
        train(mlm_loss, steps=2)
    assert ["not installed" in message for message in flash_warnings(caught)] == [True]


def reference_attention(q, k, v, cu_seqlens, causal):
    """flash_attn_varlen_func's result, by SDPA on each document (q, k, v: tokens x heads x dim)."""
    out = torch.empty_like(q)
    for start, end in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist()):
        qs, ks, vs = (t[start:end].transpose(0, 1) for t in (q, k, v))
        out[start:end] = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, enable_gqa=True).transpose(0, 1)
    return out


@torch.library.custom_op("sweeper_tests::varlen_attention", mutates_args=())
def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, causal: bool) -> torch.Tensor:
    """A compiled-graph stand-in for flash-attn's kernel, opaque to dynamo as flash-attn's
    registered op is (flash-attn >= 2.7)."""
    return reference_attention(q, k, v, cu_seqlens_q, causal)


@varlen_attention.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal):
    return torch.empty_like(q)


def compiled_flash_kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False):
    return varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal)


def chosen(kernel) -> FlashChoice:
    choice = FlashChoice()
    choice.decided, choice.kernel = True, kernel
    return choice


COMPOSITIONS = [(5, 14, 2, 20), (3, 7, 9, 11, 13, 17, 19, 21), (22,)]
"""Separator columns of three batches of 2 x 24 tokens: other document counts, other longest documents."""


def test_compiled_blocks_take_packed_batches_of_any_composition_without_a_graph_break_or_recompile(monkeypatch):
    model = build_model(LlamaEncoderConfig(**TINY), seed=0).model.to(torch.bfloat16).eval()
    batches = [packed_batch(2, 24, seed=i, separators=columns) for i, columns in enumerate(COMPOSITIONS)]
    assert len({(len(b.cu_seqlens), int(b.cu_seqlens.diff().max())) for b in batches}) == len(batches)
    calls = [dict(input_ids=b.input_ids, document_ids=b.document_ids, position_ids=b.position_ids, causal=causal,
                  cu_seqlens=b.cu_seqlens) for b in batches for causal in (False, True)]
    with torch.no_grad():
        expected = [model(**call).last_hidden_state for call in calls]  # SDPA with a block mask (CPU)
        monkeypatch.setattr(model_module, "flash_capable", lambda device: True)
        monkeypatch.setattr(model_module, "FLASH_CHOICE", chosen(compiled_flash_kernel))
        monkeypatch.setattr(model_module, "varlen_segments", None)  # the batch's host table is the one used
        block_inputs = []
        hook = model.layers[0].register_forward_pre_hook(lambda module, args: block_inputs.append(args))
        for call in calls[::2]:
            model(**call)
        hook.remove()
        for args in block_inputs:  # layer 0's inputs for each composition
            assert args[5].cu_seqlens.shape[0] > 2  # the varlen path, with its documents
            torch._dynamo.reset()
            explanation = torch._dynamo.explain(model.layers[0])(*args)
            assert explanation.graph_break_count == 0, explanation.break_reasons
            assert explanation.graph_count == 1

        torch._dynamo.reset()
        counter = CompileCounter()
        for block in model.layers:
            block.compile(backend=counter)
        compiles = []
        for call, want in zip(calls, expected):
            got = model(**call).last_hidden_state
            # bf16 outputs up to ~3 (spacing 2**-6 in [2, 4)), attention summed in another order.
            assert torch.allclose(got.float(), want.float(), atol=3e-2), (got - want).abs().max()
            compiles.append(counter.frame_count)
    # Graphs for bidirectional and causal calls of the first batch; none for a new composition.
    assert compiles[1] >= 1 and set(compiles[1:]) == {compiles[1]}, compiles


def test_host_document_tables_match_the_devices_in_batches_micro_batches_and_packed_fine_tuning():
    batch = packed_batch(6, 16, seed=0, separators=(2, 9, 15, 0, 7, 7))
    for start in range(6):
        for stop in range(start + 1, 7):
            rows = batch.rows(start, stop)
            assert torch.equal(rows.cu_seqlens, varlen_segments(rows.document_ids))
    assert batch.to("cpu").cu_seqlens is batch.cu_seqlens  # stays on the host

    seen = {}

    class Recording(torch.nn.Module):
        config = types.SimpleNamespace(hidden_size=4)

        def forward(self, input_ids, document_ids=None, cu_seqlens=None, **kwargs):
            seen.update(documents=document_ids, cu_seqlens=cu_seqlens)
            return types.SimpleNamespace(last_hidden_state=torch.zeros(*input_ids.shape, 4))

    lengths = [3, 40, 1, 17, 64, 0, 9, 30]
    mask = (torch.arange(64)[None] < torch.tensor(lengths)[:, None]).long()
    PackedBackbone(Recording())(torch.ones(len(lengths), 64, dtype=torch.long), mask)
    assert seen["cu_seqlens"].device.type == "cpu"
    assert torch.equal(seen["cu_seqlens"], varlen_segments(seen["documents"]))
