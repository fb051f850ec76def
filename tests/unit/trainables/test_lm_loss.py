"""The chunked LM-head loss against the reference (full logits + F.cross_entropy).

Tolerances are derived from the dtypes, not tuned: with u the unit roundoff of the float32
accumulation (2**-24) and c that of the compute dtype (2**-24 in float32, 2**-8 in bfloat16,
whose matmul outputs are rounded to it), a length-k dot product or sum is off its exact value by
at most gamma_k = k u / (1 - k u) times the sum of the absolute values of its terms (Higham,
Accuracy and Stability of Numerical Algorithms, 2nd ed., eq. 3.5). So, per row i:
- a logit z_ij is off by at most dz_ij = (c + gamma_H) (|h_i| . |w_j|);
- logsumexp and the target logit by at most max_j dz_ij plus gamma_V |lse_i| for the sum of exps;
- the loss (a sum of n row losses) by sum_i (2 max_j dz_ij + gamma_V |lse_i|) + gamma_n sum_i |l_i|;
- the softmax - one-hot G by |dG_ij| <= 2 p_ij max_j dz_ij, then rounded to the compute dtype
  (c |G|) for the matmuls, whose float32 sums over V (the hidden gradient) and over the n rows
  (the weight gradient, summed in float32 over k chunks each rounded to the compute dtype) add
  (c k + gamma) |G| |W| and (c k + gamma) |G|^T |H|.
Each way of computing is within the bound of the exact value, so the two are within twice it.
A deliberately wrong loss (one label changed) must fall outside, so the bound is not vacuous.
"""
from __future__ import annotations

import pytest
import torch
from tensor_memory import peak_allocated_bytes

from trainables import lm_loss
from trainables.lm_loss import IGNORE, chunked_linear_cross_entropy, head_loss_for, reference_linear_cross_entropy

U32 = 2.0 ** -24
UNIT = {torch.float64: 2.0 ** -53, torch.float32: U32, torch.bfloat16: 2.0 ** -8}


def gamma(k: int, u: float = U32) -> float:
    return k * u / (1 - k * u)


def case(rows: int, hidden: int, vocab: int, ignored_every: int, seed: int = 0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(rows, hidden, generator=gen, dtype=dtype)
    w = torch.randn(vocab, hidden, generator=gen, dtype=dtype) / hidden ** 0.5 * 3  # logits of a few units
    labels = torch.randint(0, vocab, (rows,), generator=gen)
    labels[::ignored_every] = IGNORE
    return h, w, labels


def loss_and_grads(fn, h, w, labels, autocast_dtype=None):
    h, w = h.clone().requires_grad_(), w.clone().requires_grad_()
    with torch.autocast("cpu", dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
        loss = fn(h, w, labels)
    loss.backward()
    return loss.detach(), h.grad, w.grad


def bounds(h, w, labels, compute: torch.dtype, chunks: int):
    """(loss, hidden-gradient, weight-gradient) bounds on the distance of either way from exact."""
    h64, w64 = h.double(), w.double()
    n, hidden = h.shape
    vocab = w.shape[0]
    c = UNIT[compute]
    u = UNIT[torch.float64] if h.dtype == torch.float64 else U32
    z = h64 @ w64.T
    dz = ((c + gamma(hidden, u)) * (h64.abs() @ w64.abs().T)).amax(dim=1)
    lse = torch.logsumexp(z, dim=1)
    valid = labels != IGNORE
    row_loss = torch.where(valid, lse - z.gather(1, labels.clamp(min=0)[:, None])[:, 0], 0)
    loss_bound = (torch.where(valid, 2 * dz + gamma(vocab, u) * lse.abs(), 0).sum()
                  + gamma(n, u) * row_loss.abs().sum())
    p = torch.softmax(z, dim=1)
    g = p.clone()
    g[valid, labels[valid]] -= 1
    g[~valid] = 0
    dg = torch.where(valid[:, None], 2 * p * dz[:, None], 0) + c * g.abs()
    grad_h_bound = dg @ w64.abs() + (c + gamma(vocab, u)) * (g.abs() @ w64.abs())
    grad_w_bound = dg.T @ h64.abs() + (c * chunks + gamma(n, u)) * (g.abs().T @ h64.abs())
    return loss_bound, grad_h_bound, grad_w_bound


def assert_within(a, b, bound, what):
    excess = ((a.double() - b.double()).abs() - 2 * bound).max()
    assert excess <= 0, f"{what}: off by more than the derived bound (excess {excess.item():.3g})"


@pytest.mark.parametrize("dtype,autocast",
                         [(torch.float32, None), (torch.float64, None), (torch.float32, torch.bfloat16)])
@pytest.mark.parametrize("rows,chunk_rows,ignored_every", [(53, 8, 3), (53, 53, 7), (40, 7, 1000), (9, 4, 1)])
def test_chunked_equals_reference_within_the_dtype_bound(dtype, autocast, rows, chunk_rows, ignored_every):
    h, w, labels = case(rows, 24, 301, ignored_every, dtype=dtype)
    ref = loss_and_grads(reference_linear_cross_entropy, h, w, labels, autocast)
    got = loss_and_grads(lambda a, b, t: chunked_linear_cross_entropy(a, b, t, chunk_rows=chunk_rows), h, w, labels,
                         autocast)
    loss_b, grad_h_b, grad_w_b = bounds(h, w, labels, autocast or dtype, chunks=-(-rows // chunk_rows))
    assert got[0].dtype == ref[0].dtype
    assert_within(got[0], ref[0], loss_b, "loss")
    assert_within(got[1], ref[1], grad_h_b, "hidden gradient")
    assert_within(got[2], ref[2], grad_w_b, "LM-head weight gradient")
    # Every row ignored: a zero loss and zero gradients, as the reference's.
    if ignored_every == 1:
        assert got[0] == 0 and not got[1].any() and not got[2].any()


def test_the_bound_catches_a_wrong_loss():
    """One label moved: the loss and the gradients leave the bound (it is not vacuous)."""
    h, w, labels = case(53, 24, 301, 3)
    wrong = labels.clone()
    wrong[1] = (wrong[1] + 1) % 301
    ref = loss_and_grads(reference_linear_cross_entropy, h, w, labels)
    got = loss_and_grads(lambda a, b, t: chunked_linear_cross_entropy(a, b, t, chunk_rows=8), h, w, wrong)
    loss_b, grad_h_b, grad_w_b = bounds(h, w, labels, torch.float32, chunks=7)
    for a, b, bound in zip(got, ref, (loss_b, grad_h_b, grad_w_b)):
        with pytest.raises(AssertionError):
            assert_within(a, b, bound, "")


def test_mlm_and_clm_losses_equal_through_the_model(monkeypatch):
    """The objectives' losses through a float64 model: fused (chunked, several chunks) and
    reference give the same loss and the same gradient of every parameter."""
    from trainables.model import LlamaEncoderConfig, build_model
    from trainables.objectives import LossContext, RowDraws, TokenBatch, clm_loss, mlm_loss

    monkeypatch.setattr(lm_loss, "CHUNK_ELEMENTS", 5 * 97)  # 5 rows a chunk: several, the last short
    config = LlamaEncoderConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 97, (3, 16), generator=gen)
    documents = torch.tensor([[0] * 9 + [1] * 7, [0] * 16, [0] * 4 + [1] * 12])
    positions = torch.cat([torch.arange((documents[r] == d).sum()) for r in range(3) for d in documents[r].unique()])
    batch = TokenBatch(ids, documents, positions.view(3, 16), torch.zeros_like(ids, dtype=torch.bool))
    for objective, settings in ((mlm_loss, {"mask_ratio": 0.4, "random_replace": 0.0, "keep_original": 0.0}),
                                (clm_loss, {})):
        results = []
        for choice in ("fused", "reference"):
            model = build_model(config, seed=3).double()
            context = LossContext(draws=RowDraws(0, 0), mask_token_id=4, vocab_size=97, lm_loss=choice)
            summed, count = objective(model, batch, settings, context)
            summed.backward()
            results.append((summed.detach(), count, [p.grad for p in model.parameters()]))
        (fused, n_fused, grads_fused), (ref, n_ref, grads_ref) = results
        assert n_fused == n_ref > 5
        torch.testing.assert_close(fused, ref, rtol=1e-12, atol=0)
        for a, b in zip(grads_fused, grads_ref):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-14)


def test_chunked_holds_less_memory_than_the_reference():
    """Peak CPU tensor bytes of forward + backward at a large vocabulary (tests/support/tensor_memory:
    the profiler's allocator events): the reference holds several rows x vocabulary float32
    tensors at once, the chunked loss one chunk's."""
    rows, hidden, vocab = 512, 32, 16384  # 32 MB per float32 logits tensor
    h, w, labels = case(rows, hidden, vocab, 4)
    logits_bytes = rows * vocab * 4
    peaks = {}
    for name, fn in (("reference", reference_linear_cross_entropy),
                     ("chunked", lambda a, b, t: chunked_linear_cross_entropy(a, b, t, chunk_rows=64))):
        hg, wg = h.clone().requires_grad_(), w.clone().requires_grad_()
        peaks[name] = peak_allocated_bytes(lambda: fn(hg, wg, labels).backward())  # called at once: the loop's tensors
    assert peaks["reference"] >= 2 * logits_bytes  # logits, log-softmax, gradient: at least two at once
    assert peaks["chunked"] <= logits_bytes / 2  # 64 of 512 rows a chunk, a few chunk buffers + gradients
    assert peaks["chunked"] * 3 < peaks["reference"]


def test_head_loss_choice():
    assert head_loss_for("reference", torch.device("cpu")) is reference_linear_cross_entropy
    assert head_loss_for("auto", torch.device("cpu")) is reference_linear_cross_entropy  # faster on a CPU
    assert head_loss_for("fused", torch.device("cpu")) is chunked_linear_cross_entropy
    with pytest.raises(ValueError, match="lm_loss 'fast'"):
        head_loss_for("fast", torch.device("cpu"))


def sharded_gradients(rank: int, folder, lm_loss_choice: str) -> None:
    """One CLM and one MLM loss on a model sharded over two gloo ranks (FSDP2, as the loop shards
    it): the head loss runs inside the root's forward, where the head's weight is gathered."""
    import torch.distributed as dist

    from trainables.model import LlamaEncoderConfig, build_model
    from trainables.objectives import LossContext, RowDraws, clm_loss, mlm_loss
    from trainables.sharding import mixed_precision, shard

    from test_accumulation import MASK_ID, VOCAB, packed_batch

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous-{lm_loss_choice}", rank=rank,
                            world_size=2)
    lm_loss.CHUNK_ELEMENTS = 3 * VOCAB  # 3 rows a chunk: several chunks per rank
    model = shard(build_model(LlamaEncoderConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                                 num_hidden_layers=2), seed=5), mixed_precision(torch.device("cpu")))
    batch = packed_batch(4, 16, seed=0).rows(2 * rank, 2 * rank + 2)
    context = LossContext(draws=RowDraws(0, 0, first_row=2 * rank), mask_token_id=MASK_ID, vocab_size=VOCAB,
                          lm_loss=lm_loss_choice)
    for objective, settings in ((clm_loss, {}), (mlm_loss, {"mask_ratio": 0.4, "random_replace": 0.0,
                                                            "keep_original": 0.0})):
        summed, _ = objective(model, batch, settings, context.rows(0))
        summed.backward()
    grads = {name: p.grad.full_tensor() for name, p in model.named_parameters()}
    if rank == 0:
        torch.save(grads, folder / f"{lm_loss_choice}.pt")
    dist.destroy_process_group()


@pytest.mark.slow  # two gloo process groups of two ranks (~20 CPU-s)
def test_fused_loss_under_fsdp2_gives_the_reference_gradients(tmp_path):
    """The wiring under FSDP2 (the numerics are bounded above): float32 rounding apart, the same
    gradient of every parameter, the LM head's included."""
    for choice in ("fused", "reference"):
        torch.multiprocessing.spawn(sharded_gradients, args=(tmp_path, choice), nprocs=2, join=True)
    fused, reference = (torch.load(tmp_path / f"{c}.pt", weights_only=True) for c in ("fused", "reference"))
    assert fused.keys() == reference.keys() and "lm_head.weight" in fused
    for name, grad in reference.items():
        assert grad.abs().sum() > 0, name
        torch.testing.assert_close(fused[name], grad, rtol=1e-4, atol=1e-6, msg=name)
