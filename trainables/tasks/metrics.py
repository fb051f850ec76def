"""Task metrics, each a score in [0, 100].

Accuracy and entity-level F1 (seqeval, CoNLL semantics) for classification; SQuAD F1 and exact
match with the official answer normalisation (lower case, no punctuation, no articles, single
spaces), the maximum over gold answers, and SQuAD v2's no-answer rule (an unanswerable question
scores 1 only for an empty prediction); NDCG@10 over a labelled document pool for retrieval.
"""
from __future__ import annotations

import collections
import math
import re
import string

import numpy as np


def accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    return float((predictions == labels).mean() * 100.0)


def entity_f1(predicted_tags: list[list[str]], gold_tags: list[list[str]]) -> float:
    """Entity-level micro F1 (CoNLL semantics) computed by seqeval."""
    from seqeval.metrics import f1_score

    return float(f1_score(gold_tags, predicted_tags, zero_division=0) * 100.0)


_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """The official SQuAD normalisation."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _f1(prediction: str, gold: str) -> float:
    pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:  # no-answer on either side: right only if both are empty
        return float(pred_tokens == gold_tokens)
    common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(pred_tokens), overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def _gold_or_no_answer(golds: list[str]) -> list[str]:
    golds = [g for g in golds if normalize_answer(g)]
    return golds or [""]  # SQuAD v2: an unanswerable question's only gold answer is the empty one


def squad_scores(predictions: list[str], golds: list[list[str]]) -> dict[str, float]:
    """{'f1', 'exact_match'} in [0, 100]: per question the max over its gold answers, then the mean."""
    f1, exact = [], []
    for prediction, answers in zip(predictions, golds):
        answers = _gold_or_no_answer(answers)
        f1.append(max(_f1(prediction, gold) for gold in answers))
        exact.append(max(float(normalize_answer(prediction) == normalize_answer(gold)) for gold in answers))
    return {"f1": 100.0 * float(np.mean(f1)), "exact_match": 100.0 * float(np.mean(exact))}


def ndcg_of_query(ranked: list, grades: dict, k: int = 10) -> float:
    """NDCG@k of one query in [0, 1]: `ranked` lists document ids best first, `grades` maps its
    relevant ids to their grade (gain 2^grade - 1, discount log2(rank + 1)). The ideal ranking
    comes from the grades alone, so only the top k of `ranked` matter. No relevant document: 0."""
    dcg = sum((2 ** grades.get(doc, 0) - 1) / math.log2(rank + 2) for rank, doc in enumerate(ranked[:k]))
    ideal = sorted(grades.values(), reverse=True)[:k]
    idcg = sum((2 ** grade - 1) / math.log2(rank + 2) for rank, grade in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def ndcg_at_k(rankings: list[list[str]], relevance: list[dict[str, float]], k: int = 10) -> float:
    """Mean NDCG@k x 100 over queries (`ndcg_of_query` for each `rankings[q]`, `relevance[q]`)."""
    scores = [ndcg_of_query(ranked, grades, k) for ranked, grades in zip(rankings, relevance)]
    return 100.0 * float(np.mean(scores)) if scores else 0.0


# --- the authors' retrieval scoring ---
# EncodEval's RetrievalEval (hgissbkh/EncodEval, under `encodeval/eval_tasks/`; the version that
# reads the `queries` / `corpus` / `qrels_<split>` sets its `encodeval/datasets.py` builds for
# MS MARCO, NQ and MLDR, read through the code search) keeps each query's ten most similar
# documents (`get_predictions_labels_at_k`) and scores them with
# `sklearn.metrics.ndcg_score([labels of the ten], [their similarities])` (`compute_ndcgs`):
# binary relevance, and the ideal ranking is that of those ten, so a relevant document not
# retrieved costs nothing. (Other versions of the class in the index score the whole pool with
# k=10; they read another data layout, `anchor` / `positive`, which those sets do not have.)

def authors_ndcg_of_query(ranked: list, relevant: list, k: int = 10) -> float:
    """The authors' NDCG@k of one query in [0, 1]: `sklearn.metrics.ndcg_score` over the k
    retrieved documents alone (`ranked`, best first), binary relevance. The ten are scored by
    their rank (the authors' call passes their similarities: the same order, tied similarities
    aside). A single retrieved document is padded with an irrelevant one below it (sklearn needs
    two; the score is unchanged). None of the ten relevant: 0."""
    from sklearn.metrics import ndcg_score

    relevant = set(relevant)
    truth = [float(doc in relevant) for doc in list(ranked[:k])]
    truth += [0.0] * (2 - len(truth)) if len(truth) < 2 else []
    return float(ndcg_score([truth], [list(range(len(truth), 0, -1))]))


# --- the authors' QA scoring ---
# EncodEval's QuestionAnsweringEval (encodeval/eval_tasks, hgissbkh/EncodEval): QA as token
# tagging, scored by the F1 of the tagged token positions against the gold ones, per example.

def position_f1(predicted, gold) -> float:
    """F1 in [0, 1] of one example's predicted token positions against its gold positions, as
    EncodEval's `QuestionAnsweringEval.compute_f1s`: an empty set counts as {0} on either side
    (position 0 is never an answer token, so "no answer" for an unanswerable question scores 1
    and "no answer" against a real answer scores 0). Positions may be any hashable token names."""
    predicted, gold = set(predicted) or {0}, set(gold) or {0}
    overlap = len(predicted & gold)
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(predicted), overlap / len(gold)
    return 2 * precision * recall / (precision + recall)


def token_f1(predicted: list, gold: list) -> float:
    """Mean `position_f1` over examples x 100 (the authors' QA score); NaN for no examples."""
    scores = [position_f1(p, g) for p, g in zip(predicted, gold, strict=True)]
    return 100.0 * float(np.mean(scores)) if scores else float("nan")


# --- the authors' TC scoring ---
# EncodEval (hgissbkh/EncodEval, branch MLM_vs_CLM), encodeval/eval_tasks/token_classification_eval.py:
# `compute_f1s` scores each sentence's word tags with scikit-learn's `f1_score(true, pred,
# average="macro")` and averages over sentences.

def macro_f1(gold: list[str], predicted: list[str]) -> float:
    """scikit-learn's `f1_score(gold, predicted, average="macro")` of one sentence, in its own
    arithmetic: per tag of gold or predicted (sorted), 2 tp / (true + predicted), then their mean;
    each such tag occurs on one side, so `zero_division` never applies. Equal to scikit-learn's
    bit for bit (tests/unit/trainables/test_classification.py) at a small part of its cost: its
    input checks take about 8 ms a call, a minute per OntoNotes split of 8,000 sentences."""
    labels = {label: i for i, label in enumerate(sorted(set(gold) | set(predicted)))}
    true = np.fromiter((labels[tag] for tag in gold), dtype=np.int64, count=len(gold))
    pred = np.fromiter((labels[tag] for tag in predicted), dtype=np.int64, count=len(predicted))
    counts = [np.bincount(tags, minlength=len(labels)) for tags in (true[true == pred], true, pred)]
    return float(np.mean(2.0 * counts[0] / (counts[1] + counts[2])))  # tp / (true + predicted)


def sentence_macro_f1(predicted_tags: list[list[str]], gold_tags: list[list[str]]) -> float:
    """The authors' token-classification score x 100: the macro-F1 of each sentence's predicted
    against its gold word tags (`macro_f1`: over the tags in that sentence, "O" included), then
    the mean over sentences. A sentence without words is left out (EncodEval fails on one); NaN
    for none."""
    scores = [macro_f1(gold, predicted) for predicted, gold in zip(predicted_tags, gold_tags, strict=True) if gold]
    return 100.0 * float(np.mean(scores)) if scores else float("nan")
