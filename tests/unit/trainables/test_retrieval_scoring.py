"""Retrieval scoring in bounded blocks: the same rankings (and so the same NDCG@10) as ranking the
whole similarity matrix, within the memory bound `ranking.scoring_bound_bytes` states.

Embeddings here are small multiples of a power of two, so every dot product is exact in fp32
whatever order BLAS sums it in: a block's similarities are bit-equal to the whole matrix's, the
comparison tests the ranking alone, and ties are real ties.
"""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from trainables.tasks.metrics import ndcg_at_k
from trainables.tasks.ranking import BYTES_PER_PAIR, MIN_QUERY_CHUNK, chunk_sizes, top_k
from trainables.tasks.retrieval import Retrieval


N_DOCS, N_QUERIES, DIM = 5_000, 300, 32


# Small blocks are many small torch ops; on a shared machine, OpenMP threads waiting for one
# another make them 20x slower. The results do not depend on the thread count.


def dense_ranking(queries: torch.Tensor, docs: torch.Tensor, k: int) -> np.ndarray:
    """The reference: the whole matrix, each row stably sorted (descending score, then index)."""
    return torch.sort(queries @ docs.T, dim=1, descending=True, stable=True).indices[:, :k].numpy()


def planted_pool(seed: int = 0):
    """Queries, a pool and judgements built to tie: values in {-2..2} / 4 over 32 dims; each query
    has 1-4 relevant documents equal to it (tied with one another at the top score), copies of
    relevant and irrelevant documents elsewhere in the pool, and one document tied with
    everything (all zeros: score 0 for every query)."""
    rng = np.random.default_rng(seed)
    docs = rng.integers(-2, 3, size=(N_DOCS, DIM)).astype(np.float32) / 4
    queries = rng.integers(-2, 3, size=(N_QUERIES, DIM)).astype(np.float32) / 4
    relevance = []
    for q in range(N_QUERIES):
        relevant = rng.choice(N_DOCS, size=rng.integers(1, 5), replace=False)
        docs[relevant] = queries[q]
        relevance.append({int(d): 1 for d in relevant})
    copies = rng.choice(N_DOCS, size=500, replace=False)
    docs[rng.choice(N_DOCS, size=500, replace=False)] = docs[copies]
    docs[N_DOCS // 2] = 0.0
    # a copy may have overwritten a relevant document: judgements follow the content
    for q, grades in enumerate(relevance):
        relevance[q] = {d: 1 for d in grades if np.array_equal(docs[d], queries[q])} or grades
    return torch.from_numpy(queries), torch.from_numpy(docs), relevance


def ndcg(ranking: np.ndarray, relevance: list[dict]) -> float:
    return ndcg_at_k([[int(d) for d in row] for row in ranking], relevance, k=10)


@pytest.mark.parametrize("query_chunk,doc_chunk", [
    (None, None), (N_QUERIES, N_DOCS), (1, N_DOCS), (64, 97), (37, 613), (128, 999), (300, 4_999), (299, 2_501),
])
def test_chunked_scoring_equals_the_dense_ranking_with_ties(query_chunk, doc_chunk):
    queries, docs, relevance = planted_pool()
    reference = dense_ranking(queries, docs, 10)
    # the data does tie at the 10th place and inside the top 10
    scores = (queries @ docs.T).numpy()
    tenth = np.take_along_axis(scores, reference[:, 9:10], 1)
    assert ((scores == tenth).sum(1) > 1).mean() > 0.5
    ranked = top_k(queries, docs, 10, query_chunk=query_chunk, doc_chunk=doc_chunk)
    np.testing.assert_array_equal(ranked, reference)
    assert ndcg(ranked, relevance) == ndcg(reference, relevance)
    assert 0 < ndcg(reference, relevance) < 100


def test_chunked_scoring_equals_the_dense_ranking_with_a_tiny_budget():
    queries, docs, _ = planted_pool(seed=1)
    _, doc_chunk = chunk_sizes(N_QUERIES, N_DOCS, block_bytes=64 * 1024)
    assert doc_chunk < N_DOCS and N_DOCS % doc_chunk  # several blocks, the last one short
    np.testing.assert_array_equal(top_k(queries, docs, 10, block_bytes=64 * 1024), dense_ranking(queries, docs, 10))


def test_previous_topk_path_agrees_where_there_are_no_ties():
    """Before blocking, scoring was torch.topk over the whole matrix, whose order among equal
    scores is unspecified; on queries without ties in their top 11 the rankings are the same."""
    rng = np.random.default_rng(2)  # N(0, 0.5) on a 2^-6 grid in [-2, 2), 64 dims: exact, few ties
    queries, docs = (torch.from_numpy(np.clip(np.round(rng.normal(0, 0.5, size=(n, 64)) * 64), -128, 127)
                                      .astype(np.float32) / 64) for n in (N_QUERIES, N_DOCS))
    scores = queries @ docs.T
    previous = torch.topk(scores, 10, dim=1).indices.numpy()
    top11 = torch.sort(scores, dim=1, descending=True, stable=True).values[:, :11]
    untied = (torch.diff(top11, dim=1) != 0).all(dim=1).numpy()
    assert untied.sum() > N_QUERIES // 2
    np.testing.assert_array_equal(top_k(queries, docs, 10, doc_chunk=777)[untied], previous[untied])


def test_ties_rank_by_pool_index_across_blocks():
    queries, docs = torch.ones(3, 4), torch.ones(25, 4)
    docs[[4, 17]] = 2.0  # two strictly better documents, then 23 tied ones
    expected = [4, 17, 0, 1, 2, 3, 5, 6, 7, 8]
    for doc_chunk in (1, 3, 10, 25):
        assert top_k(queries, docs, 10, doc_chunk=doc_chunk).tolist() == [expected] * 3


def test_small_pools_nan_and_empty_inputs():
    queries, docs = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0], [float("nan"), 0.0], [1.0, 0.0]])
    assert top_k(queries, docs, 10, doc_chunk=2).tolist() == [[2, 0, 1]]  # k capped at the pool; NaN last
    assert top_k(torch.zeros(0, 2), docs, 10).shape == (0, 3)
    assert top_k(queries, torch.zeros(0, 2), 10).shape == (1, 0)


@settings(max_examples=60, deadline=None)
@given(n_queries=st.integers(1, 20), n_docs=st.integers(1, 60), k=st.integers(1, 12),
       query_chunk=st.integers(1, 25), doc_chunk=st.integers(1, 70), seed=st.integers(0, 2**16))
def test_any_chunking_gives_the_dense_ranking(n_queries, n_docs, k, query_chunk, doc_chunk, seed):
    rng = np.random.default_rng(seed)  # values in {-1, 0, 1} over 3 dims: ties everywhere
    queries = torch.from_numpy(rng.integers(-1, 2, size=(n_queries, 3)).astype(np.float32))
    docs = torch.from_numpy(rng.integers(-1, 2, size=(n_docs, 3)).astype(np.float32))
    np.testing.assert_array_equal(top_k(queries, docs, k, query_chunk=query_chunk, doc_chunk=doc_chunk),
                                  dense_ranking(queries, docs, k))


@pytest.mark.parametrize("n_queries,n_docs,budget", [
    (95_219, 95_000, 256 * 2**20), (3_000, 100_000, 64 * 2**20), (10, 10, 2**20), (5_000, 10_000_000, 2**20),
    (1, 1, 1),
])
def test_chunk_sizes_fit_the_budget(n_queries, n_docs, budget):
    query_chunk, doc_chunk = chunk_sizes(n_queries, n_docs, budget)
    assert 1 <= query_chunk <= n_queries and 1 <= doc_chunk <= n_docs
    assert query_chunk * doc_chunk * BYTES_PER_PAIR <= max(budget, BYTES_PER_PAIR)
    if MIN_QUERY_CHUNK * n_docs * BYTES_PER_PAIR <= budget:
        assert doc_chunk == n_docs  # the whole pool in one block: no merging


class LookupEncoder(nn.Module):
    """Stands in for a BiEncoder: the embedding of a text is a row of a table, named by its first token."""

    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.table = table

    def forward(self, input_ids, attention_mask):
        return self.table[input_ids[:, 0]]


def lookup_split(relevance: list[dict]) -> dict:
    """A prepared retrieval split whose input ids are rows of a `LookupEncoder`'s table."""
    positives = [sorted(grades) for grades in relevance]
    return {
        "query_input_ids": np.arange(N_QUERIES, dtype=np.int32)[:, None],
        "query_attention_mask": np.ones((N_QUERIES, 1), dtype=np.int8),
        "doc_input_ids": (N_QUERIES + np.arange(N_DOCS, dtype=np.int32))[:, None],
        "doc_attention_mask": np.ones((N_DOCS, 1), dtype=np.int8),
        "positive_offsets": np.cumsum([0] + [len(p) for p in positives]).astype(np.int64),
        "positive_docs": np.asarray([d for p in positives for d in p], dtype=np.int64),
    }


def test_family_score_equals_dense_ndcg():
    queries, docs, relevance = planted_pool(seed=3)
    model, split = LookupEncoder(torch.cat([queries, docs])), lookup_split(relevance)
    score = Retrieval.score(model, split, {}, batch_size=333, device=torch.device("cpu"), protocol=None)
    assert score == ndcg(dense_ranking(queries, docs, 10), relevance)


MEASURE = textwrap.dedent("""
    import json, sys
    import numpy as np, torch
    from torch import nn
    from trainables.tasks.ranking import chunk_sizes, scoring_bound_bytes, top_k
    from trainables.tasks.retrieval import Retrieval

    n_queries, n_docs, dim, budget, threads = (int(a) for a in sys.argv[1:])
    torch.set_num_threads(threads)

    def status(field):  # kB -> bytes
        return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith(field))

    def reset_peak():  # Linux >= 4.0: VmHWM := VmRSS
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return status("VmRSS:")

    torch.manual_seed(0)
    table = torch.randn(n_queries + n_docs, dim)  # in place: no transient copy before the baseline
    table.div_(table.norm(dim=1, keepdim=True))
    queries, docs = table[:n_queries], table[n_queries:]
    query_chunk, doc_chunk = chunk_sizes(n_queries, n_docs, budget)
    out = {"query_chunk": query_chunk, "doc_chunk": doc_chunk,
           "bound": scoring_bound_bytes(n_queries, n_docs, 10, query_chunk, doc_chunk),
           # score() ranks with the default budget
           "score_bound": scoring_bound_bytes(n_queries, n_docs, 10, *chunk_sizes(n_queries, n_docs))}

    baseline = reset_peak()
    ranked = top_k(queries, docs, 10, block_bytes=budget)
    out["top_k_peak"] = status("VmHWM:") - baseline

    class Lookup(nn.Module):
        def forward(self, input_ids, attention_mask):
            return table[input_ids[:, 0]]

    split = {"query_input_ids": np.arange(n_queries, dtype=np.int32)[:, None],
             "query_attention_mask": np.ones((n_queries, 1), dtype=np.int8),
             "doc_input_ids": (n_queries + np.arange(n_docs, dtype=np.int32))[:, None],
             "doc_attention_mask": np.ones((n_docs, 1), dtype=np.int8),
             "positive_offsets": np.arange(n_queries + 1, dtype=np.int64),
             "positive_docs": ranked[:, 3].copy()}  # one relevant document, ranked 4th: NDCG = 1/log2(5)
    del ranked
    baseline = reset_peak()
    out["score"] = Retrieval.score(Lookup(), split, {}, 1024, torch.device("cpu"), None)
    out["score_peak"] = status("VmHWM:") - baseline
    print(json.dumps(out))
""")


@pytest.mark.slow  # a fresh interpreter scores 2,000 queries against 100,000 documents: 10 s alone
def test_a_100k_pool_scores_within_the_memory_bound():
    """Peak resident memory of a fresh process, reset to the current RSS after the embeddings
    exist (/proc/self/clear_refs), read back as VmHWM. tracemalloc would miss torch's CPU
    allocations, and RSS counts everything: torch, numpy, BLAS buffers, Python objects."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError as error:
        pytest.skip(f"cannot reset the peak RSS here: {error}")
    n_queries, n_docs, dim, budget = 2_000, 100_000, 256, 64 * 2**20
    run = subprocess.run([sys.executable, "-c", MEASURE, *map(str, (n_queries, n_docs, dim, budget, 1))],
                         capture_output=True, text=True, timeout=120, check=True)
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["doc_chunk"] < n_docs  # the pool really is split into blocks
    dense = n_queries * n_docs * 4
    assert out["top_k_peak"] <= out["bound"] < dense / 4
    # score() adds the embeddings it computes (queries + pool, fp32) and one float per query
    embeddings = (n_queries + n_docs) * dim * 4
    assert out["score_peak"] <= embeddings + out["score_bound"] + n_queries * 8
    assert out["score"] == pytest.approx(100 / np.log2(5), abs=1e-9)  # float64 mean of 2,000 equal terms: ~1e-12 off
    print(json.dumps(out))  # the figures docs/retrieval.md quotes (pytest -s)


# --- finetuning.scoring: the authors' NDCG@10 and inputs ------------------------------------------

def test_the_authors_ndcg_is_sklearns_over_the_ten_retrieved_and_differs_from_the_standard():
    """EncodEval's RetrievalEval keeps each query's ten most similar documents and calls
    `ndcg_score([their labels], [their similarities])`: the ideal ranking is the ten's own. Three
    positives, two retrieved (ranks 1 and 4), one not: the two normalisations differ."""
    from sklearn.metrics import ndcg_score

    from trainables.tasks.metrics import authors_ndcg_of_query, ndcg_of_query

    relevant, pool = {0, 5, 15}, 20
    similarities = -np.arange(pool, dtype=np.float64)
    similarities[5] = -2.5  # ranking: 0, 1, 2, 5, 3, 4, 6, ... ; 15 is 15th
    ranked = [int(d) for d in np.argsort(-similarities, kind="stable")[:10]]
    assert ranked[:4] == [0, 1, 2, 5] and 15 not in ranked
    # The authors' computation, step by step: top 10 by argsort, their similarities and labels.
    top = np.argsort(similarities)[-10:]
    authors = ndcg_score([[int(d in relevant) for d in top]], [similarities[top].tolist()])
    by_hand = (1 + 1 / np.log2(5)) / (1 + 1 / np.log2(3))  # DCG / ideal DCG of the two retrieved positives
    assert authors == pytest.approx(by_hand, abs=1e-12)
    assert authors_ndcg_of_query(ranked, list(relevant)) == pytest.approx(by_hand, abs=1e-12)
    # The standard normalisation: every judged positive (three), as sklearn over the whole pool with k=10.
    standard = (1 + 1 / np.log2(5)) / (1 + 1 / np.log2(3) + 1 / np.log2(4))
    assert ndcg_of_query(ranked, dict.fromkeys(relevant, 1)) == pytest.approx(standard, abs=1e-12)
    assert ndcg_score([[float(d in relevant) for d in range(pool)]], [similarities], k=10) == pytest.approx(standard)
    assert by_hand - standard > 0.2
    # No relevant document among the ten scores 0, as in sklearn; one retrieved and relevant, 1.
    assert authors_ndcg_of_query([3, 4], [9]) == 0.0 == ndcg_of_query([3, 4], {9: 1})
    assert authors_ndcg_of_query(["7"], ["7"]) == 1.0


def test_evaluate_scores_both_conventions_and_rescore_recomputes_them_from_json():
    from trainables.tasks.family import SCORINGS

    queries, docs, relevance = planted_pool(seed=5)
    model, split = LookupEncoder(torch.cat([queries, docs])), lookup_split(relevance)
    cpu = torch.device("cpu")
    evaluation = Retrieval.evaluate(model, split, {}, 333, cpu, None)
    assert len(evaluation.predictions) == N_QUERIES
    first = evaluation.predictions[0]
    assert len(first["prediction"]) == 10 and first["gold"] == [str(d) for d in sorted(relevance[0])]
    stored = json.loads(json.dumps(evaluation.predictions))  # what the predictions table gives back
    for scoring in SCORINGS:
        assert Retrieval.rescore(stored, scoring) == evaluation.scores[scoring]
    # The standard score is the one `score` has always given (the dense reference's).
    assert evaluation.scores["standard"] == Retrieval.score(model, split, {}, 333, cpu, None) \
        == ndcg(dense_ranking(queries, docs, 10), relevance)
    # Normalised by fewer positives (those retrieved), the paper's score is never below the standard one.
    assert evaluation.scores["paper"] >= evaluation.scores["standard"]


def test_paper_inputs_are_text_and_eos_without_bos_and_standard_inputs_are_unchanged():
    from tiny_checkpoints import LLAMA3_BOS, LLAMA3_EOS, train_tokenizer

    from trainables.tasks.retrieval import tokenise

    tokenizer = train_tokenizer("llama")  # Llama-3's shape: BOS added, no EOS
    tokenizer.pad_token = LLAMA3_EOS
    bos, eos = tokenizer.convert_tokens_to_ids([LLAMA3_BOS, LLAMA3_EOS])
    texts = ["Query: a small dog", "Document: " + "word " * 80]
    ids, mask = tokenise(tokenizer, texts, 16)
    assert (ids[:, 0] == bos).all()  # the tokenizer's own special tokens, as before
    plain = tokenizer(texts[0], add_special_tokens=False)["input_ids"]
    paper, paper_mask = tokenise(tokenizer, texts, 16, "paper")
    assert paper[0, :len(plain) + 1].tolist() == plain + [eos] and paper_mask[0].sum() == len(plain) + 1
    assert bos not in paper[0].tolist()
    # A text longer than max_length is cut after the EOS was appended (EncodEval's order): no EOS left.
    assert paper_mask[1].all() and eos not in paper[1].tolist() and bos not in paper[1].tolist()
    wordpiece = train_tokenizer("bert")  # no EOS: its SEP ends the text
    cut, _ = tokenise(wordpiece, texts[:1], 16, "paper")
    assert wordpiece.sep_token_id in cut[0].tolist() and wordpiece.cls_token_id not in cut[0].tolist()
