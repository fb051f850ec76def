"""Top-k documents per query over a large pool, one bounded block of similarities at a time.

A retrieval split is scored by ranking its whole labelled pool for every query. The dense
similarity matrix is n_queries x n_docs floats (NQ's test split: 95k x 95k fp32 = 36 GB), so it
is never built: queries are taken `query_chunk` at a time, each chunk is scored against the pool
`doc_chunk` documents at a time, and only a running top-k per query survives a block.

Order: documents rank by descending similarity, ties by ascending pool index. `torch.topk`
leaves the order of equal values unspecified (and the CPU kernel does scramble it), so every
block's top-k is put into that order explicitly. Because this is a total order and each block's
top-k is exact under it, the merged top-k equals the top-k of a whole-matrix stable sort.

Memory, beyond the embeddings themselves (`scoring_bound_bytes` is the formula):
- the block: query_chunk x doc_chunk fp32 similarities, kept under `block_bytes`;
- the result: n_queries x k int64 document indices;
- per block, O(query_chunk x k) for the merge and O(doc_chunk) for a row whose k-th place is tied.
"""
from __future__ import annotations

import numpy as np
import torch

SCORE_BLOCK_BYTES = 256 * 2**20
"""Default budget of one score block of fp32 similarities: 256 MiB, small next to a worker's
memory and large enough (67M pairs) that the matmul, not the per-block bookkeeping, dominates."""

BYTES_PER_PAIR = 4  # one fp32 similarity: nothing else of the block's shape is allocated

MIN_QUERY_CHUNK = 256
"""Fewer query rows than this make the matmul memory-bound on the document chunk; a huge pool
gets a narrower document chunk rather than a shorter query chunk."""


def workspace_bytes(doc_chunk: int, threads: int) -> int:
    """Allowance for what the formula cannot count: BLAS packing buffers and topk's per-row
    queue (16 bytes a document) in every thread, allocator slack. Measured above the block at
    100k documents: 12 MB with 1 thread, 15 MB with 2, 55 MB with 8 (dim 256 to 1728; the
    packing stops growing by dim 768), against 24, 32 and 76 MB allowed here."""
    return 16 * 2**20 + threads * (6 * 2**20 + 16 * doc_chunk)


def chunk_sizes(n_queries: int, n_docs: int, block_bytes: int = SCORE_BLOCK_BYTES) -> tuple[int, int]:
    """(query_chunk, doc_chunk) whose block fits `block_bytes`: the whole pool per block when at
    least MIN_QUERY_CHUNK queries fit beside it (no merging at all), else MIN_QUERY_CHUNK queries
    against as many documents as fit."""
    pairs = max(1, block_bytes // BYTES_PER_PAIR)
    query_chunk = max(1, min(n_queries, max(min(MIN_QUERY_CHUNK, pairs), pairs // max(n_docs, 1))))
    doc_chunk = max(1, min(n_docs, pairs // query_chunk))
    return query_chunk, doc_chunk


def scoring_bound_bytes(n_queries: int, n_docs: int, k: int, query_chunk: int, doc_chunk: int,
                        threads: int | None = None) -> int:
    """Upper bound on the memory `top_k` allocates on top of its inputs, in bytes, with
    `threads` torch threads (default: the current setting)."""
    k = min(k, n_docs)
    block = query_chunk * doc_chunk * BYTES_PER_PAIR
    result = n_queries * k * 8
    # merge: the running and the block top-k side by side (2k values fp32 + indices int64), the
    # block's own top-(k+1) and the sort outputs: a few copies of query_chunk x 2k x 12 bytes
    merge = 4 * query_chunk * 2 * (k + 1) * (4 + 8)
    # one tied row: its bool mask, candidate columns and values, sort values and indices
    tied_row = doc_chunk * (1 + 8 + 4 + 4 + 8)
    return block + result + merge + tied_row + workspace_bytes(doc_chunk, threads or torch.get_num_threads())


def _in_rank_order(values: torch.Tensor, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of (value, index) candidates sorted by descending value, then ascending index."""
    by_index = torch.sort(indices, dim=1).indices
    values, indices = values.gather(1, by_index), indices.gather(1, by_index)
    by_value = torch.sort(values, dim=1, descending=True, stable=True).indices  # keeps index order in ties
    return values.gather(1, by_value), indices.gather(1, by_value)


def _block_top_k(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k best columns of each row of `scores` under (descending value, ascending column),
    as (values, columns), both query_chunk x k and in rank order."""
    if k >= scores.shape[1]:  # the whole block is the top k: only the order is left to fix
        columns = torch.arange(scores.shape[1], device=scores.device).expand_as(scores)
        return _in_rank_order(scores, columns)
    # topk keeps an arbitrary subset of the entries tied with the k-th value. Such a tie crosses
    # the cut exactly when the (k+1)-th value equals the k-th, so asking for k+1 finds the rows
    # to redo without a mask over the block (a bool mask's .sum() would cast it to int64: 8 bytes
    # a pair).
    values, columns = torch.topk(scores, k + 1, dim=1)
    tied_rows = (values[:, k] == values[:, k - 1]).nonzero().flatten().tolist()
    values, columns = values[:, :k].clone(), columns[:, :k].clone()
    for row in tied_rows:  # rare with real embeddings (duplicate documents): redo the row exactly
        candidates = (scores[row] >= values[row, k - 1]).nonzero().flatten()  # ascending column order
        order = torch.sort(scores[row, candidates], descending=True, stable=True).indices[:k]
        values[row], columns[row] = scores[row, candidates[order]], candidates[order]
    return _in_rank_order(values, columns)


def top_k(queries: torch.Tensor, docs: torch.Tensor, k: int, block_bytes: int = SCORE_BLOCK_BYTES,
          query_chunk: int | None = None, doc_chunk: int | None = None) -> np.ndarray:
    """Pool indices of the min(k, n_docs) documents most similar (dot product) to each query,
    best first, ties by ascending index: an (n_queries, min(k, n_docs)) int64 array equal to the
    head of a stable descending sort of each row of `queries @ docs.T`.

    Chunks default to `chunk_sizes(..., block_bytes)`. A NaN similarity (a broken embedding)
    ranks as -inf, last. The blocks run on the inputs' device in their dtype."""
    n_queries, n_docs = len(queries), len(docs)
    k = min(k, n_docs)
    ranked = np.zeros((n_queries, k), dtype=np.int64)
    if n_queries == 0 or k == 0:
        return ranked
    default_queries, default_docs = chunk_sizes(n_queries, n_docs, block_bytes)
    query_chunk, doc_chunk = query_chunk or default_queries, doc_chunk or default_docs
    for q0 in range(0, n_queries, query_chunk):
        best_values = best_columns = None
        for d0 in range(0, n_docs, doc_chunk):
            scores = queries[q0:q0 + query_chunk] @ docs[d0:d0 + doc_chunk].T
            torch.nan_to_num_(scores, nan=-torch.inf)
            values, columns = _block_top_k(scores, min(k, scores.shape[1]))
            del scores  # free the block before the merge allocates
            columns += d0
            if best_values is None:
                best_values, best_columns = values, columns
                continue
            # Earlier blocks hold lower indices and each side is in rank order, so a stable
            # sort of [running, block] by value alone yields (value desc, index asc).
            values, columns = torch.cat([best_values, values], 1), torch.cat([best_columns, columns], 1)
            order = torch.sort(values, dim=1, descending=True, stable=True).indices[:, :k]
            best_values, best_columns = values.gather(1, order), columns.gather(1, order)
        ranked[q0:q0 + query_chunk] = best_columns.cpu().numpy()
    return ranked
