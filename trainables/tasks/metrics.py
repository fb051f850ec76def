"""Task metrics from well-kept implementations, each returning a score in [0, 100]."""
from __future__ import annotations

import numpy as np


def accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    return float((predictions == labels).mean() * 100.0)


def entity_f1(predicted_tags: list[list[str]], gold_tags: list[list[str]]) -> float:
    """Entity-level micro F1 (CoNLL semantics) computed by seqeval."""
    from seqeval.metrics import f1_score

    return float(f1_score(gold_tags, predicted_tags, zero_division=0) * 100.0)
