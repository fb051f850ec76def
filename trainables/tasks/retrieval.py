"""Retrieval: a bi-encoder (one backbone, mean pooling) trained with in-batch-negative InfoNCE on
query / positive pairs, scored by NDCG@10 over the split's labelled document pool.

The in-batch negatives are the other pairs of the optimizer step's batch: every query is scored
against every document of the `batch_size` pairs (31 negatives at the paper's 32), whatever
`micro_batch_size` is. When the batch is split into micro-batches, the loss is gradient-cached
(`trainables.tasks.gradcache`, Gao et al. 2021, as sentence-transformers'
`CachedMultipleNegativesRankingLoss` the authors used): the whole batch is embedded without
gradients, the loss's gradient on the embeddings is taken, and each micro-batch is re-run with
gradients (same dropout draws) to carry it into the weights: the memory of one micro-batch, the
negatives of the whole batch. One trained model is scored on every evaluation set of the study
that names this task as its `train_task`.

Scoring embeds queries and pool once each (fp32, on the host) and ranks the pool in bounded
blocks (`trainables.tasks.ranking`): the whole similarity matrix of an NQ-size split would be
36 GB. Ties rank by pool index, so a score does not depend on the block sizes (docs/retrieval.md).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from sweeper.contract.configs import FinetuneProtocol, TaskInfo
from trainables.tasks.adapters import retrieval_split
from trainables.tasks.gradcache import cached_backward
from trainables.tasks.heads import mean_pool
from trainables.tasks.family import SCORINGS, Evaluation
from trainables.tasks.metrics import authors_ndcg_of_query, ndcg_of_query
from trainables.tasks.ranking import SCORE_BLOCK_BYTES, top_k

NDCG_K = 10


class BiEncoder(nn.Module):
    def __init__(self, backbone: nn.Module):
        super().__init__()
        self.backbone = backbone

    def forward(self, input_ids, attention_mask):
        hidden = self.backbone(input_ids, attention_mask=attention_mask, causal=False).last_hidden_state
        return F.normalize(mean_pool(hidden, attention_mask).float(), dim=-1)


def end_of_text(tokenizer) -> str:
    """The token the authors end every input with (`scoring: paper`): the tokenizer's EOS, or,
    for a tokenizer without one (the study's trained WordPiece), its SEP, the BERT end-of-sequence
    mark; a tokenizer with neither is refused by name."""
    token = tokenizer.eos_token or tokenizer.sep_token
    if token is None:
        raise ValueError(f"the tokenizer {tokenizer.name_or_path!r} has no EOS (nor SEP) token: scoring: paper "
                         "ends each text with it, as the authors' EncodEval does")
    return token


def tokenise(tokenizer, texts: list[str], max_length: int, scoring: str = "standard") -> tuple[np.ndarray, np.ndarray]:
    """Token ids and attention masks, padded to max_length. standard: the tokenizer's own special
    tokens (Llama-3's: BOS, no EOS); paper: text + EOS without special tokens (no BOS), truncated
    after, so a text longer than max_length loses its EOS, as in EncodEval's RetrievalEval
    (its `tokenize`: `add_special_tokens=False`; hgissbkh/EncodEval, under `encodeval/eval_tasks/`)."""
    if not texts:  # an evaluation-only set has no training split
        return np.zeros((0, max_length), dtype=np.int32), np.zeros((0, max_length), dtype=np.int8)
    if scoring == "paper":
        end = end_of_text(tokenizer)
        enc = tokenizer([text + end for text in texts], truncation=True, max_length=max_length,
                        padding="max_length", add_special_tokens=False)
    else:
        enc = tokenizer(texts, truncation=True, max_length=max_length, padding="max_length")
    return (np.asarray(enc["input_ids"], dtype=np.int32).reshape(len(texts), max_length),
            np.asarray(enc["attention_mask"], dtype=np.int8).reshape(len(texts), max_length))


def encode_split(rows: list[dict], schema: str, tokenizer, max_length: int, training: bool,
                 scoring: str = "standard") -> dict[str, np.ndarray]:
    queries, documents = retrieval_split(rows, schema)
    doc_ids = list(documents)
    position = {doc: i for i, doc in enumerate(doc_ids)}
    query_ids, query_mask = tokenise(tokenizer, [q["query"] for q in queries], max_length, scoring)
    doc_tokens, doc_mask = tokenise(tokenizer, [documents[d] for d in doc_ids], max_length, scoring)
    positives = [[position[d] for d in q["positives"]] for q in queries]
    arrays = {
        "query_input_ids": query_ids, "query_attention_mask": query_mask,
        "doc_input_ids": doc_tokens, "doc_attention_mask": doc_mask,
        # relevant documents of query q: positive_docs[positive_offsets[q]:positive_offsets[q + 1]]
        "positive_offsets": np.cumsum([0] + [len(p) for p in positives]).astype(np.int64),
        "positive_docs": np.asarray([d for p in positives for d in p], dtype=np.int64),
    }
    if training:  # one (query, first positive) pair per query
        arrays["pair_query"] = np.arange(len(queries), dtype=np.int64)
        arrays["pair_doc"] = np.asarray([p[0] for p in positives], dtype=np.int64)
    return arrays


def embed_pairs(model, split: dict, rows: np.ndarray, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The embeddings of the training pairs `rows`: their queries and their positive documents."""
    queries, docs = split["pair_query"][rows], split["pair_doc"][rows]
    q = model(*(torch.from_numpy(split[f"query_{k}"][queries].astype(np.int64)).to(device)
                for k in ("input_ids", "attention_mask")))
    d = model(*(torch.from_numpy(split[f"doc_{k}"][docs].astype(np.int64)).to(device)
                for k in ("input_ids", "attention_mask")))
    return q, d


def contrastive_loss(q: torch.Tensor, d: torch.Tensor, docs: np.ndarray, protocol: FinetuneProtocol) -> torch.Tensor:
    """Mean InfoNCE over the queries `q`, query i's positive being document `d[i]` and its
    negatives every other document of `d` (`docs`: their pool indices)."""
    device = q.device
    logits = q @ d.T / protocol.family_settings["retrieval_temperature"]
    # A document that is also another pair's positive is no negative for this query.
    same = torch.from_numpy(docs[:, None] == docs[None, :]).to(device) & ~torch.eye(len(docs), dtype=torch.bool,
                                                                                      device=device)
    logits = logits.masked_fill(same, torch.finfo(logits.dtype).min)
    return F.cross_entropy(logits, torch.arange(len(docs), device=device))


def embed(model, ids: np.ndarray, mask: np.ndarray, batch_size: int, device) -> torch.Tensor:
    """(n, dim) fp32 embeddings on the host, `batch_size` texts a forward pass. Each batch is
    written into one preallocated tensor: concatenating a list of batches would hold the pool
    twice at its peak."""
    out = None
    for start in range(0, len(ids), batch_size):
        batch = model(torch.from_numpy(ids[start:start + batch_size].astype(np.int64)).to(device),
                      torch.from_numpy(mask[start:start + batch_size].astype(np.int64)).to(device))
        if out is None:
            out = torch.empty(len(ids), batch.shape[1], dtype=torch.float32)
        out[start:start + len(batch)] = batch  # BiEncoder already returns fp32; this copies to the host
    return out if out is not None else torch.zeros(0, 1)


def query_ndcg(ranked: list, relevant: list, scoring: str) -> float:
    """NDCG@10 of one query in [0, 1] from its top-10 (best first) and its relevant documents:
    standard by `ndcg_of_query` (ideal: every judged positive), paper by sklearn's `ndcg_score`
    over the ten as the authors call it (ideal: the ten's own; `authors_ndcg_of_query`)."""
    if scoring == "paper":
        return authors_ndcg_of_query(ranked, relevant, k=NDCG_K)
    return ndcg_of_query(ranked, dict.fromkeys(relevant, 1), k=NDCG_K)


def ndcg_scores(predictions: list[dict], scoring: str) -> float:
    """Mean NDCG@10 x 100 of a split's predictions (`query_ndcg` of each); NaN for no query."""
    if not predictions:
        return float("nan")
    per_query = np.fromiter((query_ndcg(p["prediction"], p["gold"], scoring) for p in predictions),
                            dtype=np.float64, count=len(predictions))
    return 100.0 * float(np.mean(per_query))


def ranking(model, split: dict, batch_size: int, device) -> np.ndarray:
    """The pool positions of each query's top 10, best first (ties by position)."""
    queries = embed(model, split["query_input_ids"], split["query_attention_mask"], batch_size, device)
    docs = embed(model, split["doc_input_ids"], split["doc_attention_mask"], batch_size, device)
    # On the host in fp32 as before (the loop's CUDA autocast would make a GPU product bf16).
    return top_k(queries, docs, k=NDCG_K, block_bytes=SCORE_BLOCK_BYTES)


class Retrieval:
    """`trainables.tasks.family.TaskFamily` for query -> document ranking (NDCG@10).
    Loss setting: `retrieval_temperature`, the InfoNCE softmax temperature. Under `scoring:
    paper` the inputs are the authors' (`tokenise`); either way both NDCG@10 of one ranking are
    computed: standard, normalised by every judged positive; paper, the authors' sklearn
    `ndcg_score` over the ten retrieved alone (`authors_ndcg_of_query`)."""

    METRICS = {"standard": "ndcg@10", "paper": "ndcg@10_retrieved"}

    @staticmethod
    def encode(splits: dict[str, list[dict]], task: TaskInfo, tokenizer, max_length: int, settings: dict):
        scoring = settings.get("scoring", "standard")
        arrays = {split: encode_split(rows, task.schema, tokenizer, max_length, training=split == "train",
                                      scoring=scoring)
                  for split, rows in splits.items()}
        return arrays, {"labels": [], "pool": {split: len(a["doc_input_ids"]) for split, a in arrays.items()},
                        "scoring": scoring}

    @staticmethod
    def describe(meta: dict) -> str:
        return f"document pools {meta['pool']}"

    @staticmethod
    def build(backbone, meta: dict):
        return BiEncoder(backbone)

    @staticmethod
    def train_size(split: dict) -> int:
        return len(split.get("pair_query", ()))

    @staticmethod
    def loss(model, split: dict, rows: np.ndarray, device, protocol: FinetuneProtocol) -> torch.Tensor:
        """The InfoNCE loss of the pairs `rows` against each other's documents (one pass)."""
        q, d = embed_pairs(model, split, rows, device)
        return contrastive_loss(q, d, split["pair_doc"][rows], protocol)

    @staticmethod
    def backward(model, split: dict, rows: np.ndarray, micro: int, device, protocol: FinetuneProtocol,
                 autocast) -> float:
        """Backpropagate the loss of the whole batch `rows` (each query against every document of
        it), `micro` pairs a forward pass: one pass when they fit, else gradient-cached."""
        if len(rows) <= micro:
            with autocast:
                loss = Retrieval.loss(model, split, rows, device, protocol)
            loss.backward()
            return loss.item()
        chunks = [rows[start:start + micro] for start in range(0, len(rows), micro)]
        docs = split["pair_doc"][rows]
        return cached_backward(lambda chunk: embed_pairs(model, split, chunk, device), chunks,
                               lambda parts: contrastive_loss(*parts, docs, protocol), device, autocast).item()

    @staticmethod
    def evaluate(model, split: dict, meta: dict, batch_size: int, device, protocol: FinetuneProtocol) -> Evaluation:
        """Both conventions' NDCG@10 of one ranking of the pool, and per query its top-10 pool
        positions in rank order and its relevant ones (as text: the predictions table's ids)."""
        if len(split["query_input_ids"]) == 0:
            return Evaluation(scores=dict.fromkeys(SCORINGS, float("nan")), predictions=[])
        ranked = ranking(model, split, batch_size, device)
        offsets, positives = split["positive_offsets"], split["positive_docs"]
        predictions = [{"example": q, "prediction": [str(d) for d in ranked[q].tolist()],
                        "gold": [str(d) for d in positives[offsets[q]:offsets[q + 1]].tolist()]}
                       for q in range(len(ranked))]
        return Evaluation(scores={scoring: ndcg_scores(predictions, scoring) for scoring in SCORINGS},
                          predictions=predictions)

    @staticmethod
    def rescore(predictions: list[dict], scoring: str) -> float:
        """A split's score recomputed from its stored predictions: `evaluate`'s, exactly."""
        return ndcg_scores(predictions, scoring)

    @staticmethod
    def score(model, split: dict, meta: dict, batch_size: int, device, protocol: FinetuneProtocol | None) -> float:
        """`evaluate`'s score under the protocol's convention (standard without one), without
        holding the predictions: one query at a time, as lists and dicts for a whole split cost
        ~0.5 kB a query."""
        n_queries = len(split["query_input_ids"])
        if n_queries == 0:
            return float("nan")
        scoring = protocol.scoring if protocol is not None else "standard"
        ranked = ranking(model, split, batch_size, device)
        offsets, positives = split["positive_offsets"], split["positive_docs"]
        per_query = np.fromiter((query_ndcg(ranked[q].tolist(), positives[offsets[q]:offsets[q + 1]].tolist(), scoring)
                                 for q in range(n_queries)), dtype=np.float64, count=n_queries)
        return 100.0 * float(np.mean(per_query))
