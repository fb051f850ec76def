"""How a task family's trials spend tokens and memory: what `sweeper plan`'s cost and memory
estimates ask of a family (torch-free).

A family declares a `FamilyEstimate` in its `FamilyInfo`; `sweeper.plan.cost` and
`sweeper.plan.memory` ask it and never name a family. The estimate is a few functions of a
task's statistics (`sweeper.contract.catalog.TaskStatistics`: sizes and mean lengths) and of how rows
are laid out (`RowShape`), plus the rows one example puts in a training forward pass. It lives in
the spec stage, beside the registry that carries it, so a family (shipped or a plugin) declares it
without importing the plan stage; `plan/` only interprets it.

A family that declares nothing gets `GENERIC`: one row per example of its mean length, capped at
max_length, scored once, one forward row per example.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Callable

from sweeper.contract.catalog import TaskStatistics
from sweeper.contract.configs import TaskInfo


@dataclass(frozen=True, slots=True)
class RowShape:
    """How rows become model inputs: truncated at max_length, QA contexts cut with doc_stride;
    `padded`: every row filled to max_length (the worker's encoders today)."""

    max_length: int
    doc_stride: int
    padded: bool = False
    scoring: str = "standard"
    """`finetuning.scoring`: under `paper` a QA example is one row, its context cut at max_length."""

    def cap(self, tokens: float) -> float:
        return self.max_length if self.padded else min(tokens, self.max_length)


TrainingRows = Callable[[TaskStatistics, RowShape], tuple[int, float]]
"""(rows per training example, tokens per row) of the task's mean example."""
ScoredTokens = Callable[[TaskStatistics, RowShape], float]
"""Forward tokens of scoring one evaluated example."""


def one_row(stats: TaskStatistics, shape: RowShape) -> tuple[int, float]:
    """Sequence and token classification (and the default): one row of the mean length."""
    return 1, shape.cap(stats.mean_tokens)


QA_PAPER_FRAME = 6
"""About the tokens of the authors' QA frame around question and context ("Question: ",
"\nContext: ", EOS) in a BPE vocabulary; an estimate, as the mean lengths it is added to."""


def qa_windows(stats: TaskStatistics, shape: RowShape) -> tuple[int, float]:
    """(windows per example, tokens per window) of the mean example, as trainables.tasks.qa cuts
    it: [CLS] question [SEP] context-window [SEP], the question cut at max_length / 2. Under
    `scoring: paper`, one row: the authors' frame, question and context, cut at max_length."""
    if shape.scoring == "paper":
        return 1, shape.cap(stats.question_tokens + stats.context_tokens + QA_PAPER_FRAME)
    question = min(stats.question_tokens, shape.max_length // 2)
    width = shape.max_length - question - 3
    if stats.context_tokens <= width:
        return 1, shape.cap(question + stats.context_tokens + 3)
    step = width - min(shape.doc_stride, width - 1)
    return math.ceil((stats.context_tokens - width) / step) + 1, shape.max_length


def query_and_positive(stats: TaskStatistics, shape: RowShape) -> tuple[int, float]:
    """Retrieval training: a query and its positive document, each capped."""
    return 1, shape.cap(stats.query_tokens) + shape.cap(stats.document_tokens)


def query_and_pool(stats: TaskStatistics, shape: RowShape) -> float:
    """Retrieval scoring: the query, then the labelled documents it brings to its split's pool."""
    return shape.cap(stats.query_tokens) + stats.documents_per_query * shape.cap(stats.document_tokens)


@dataclass(frozen=True, kw_only=True, slots=True)
class FamilyEstimate:
    """How one family's trials spend tokens (sweeper.plan.cost) and memory (sweeper.plan.memory)."""

    training_rows: TrainingRows = one_row
    """(rows per example, tokens per row) of a training example: the loop's batches count rows
    (a QA batch holds windows), so steps follow rows and trained tokens follow rows x tokens."""
    scored_tokens: ScoredTokens | None = None
    """Forward tokens of scoring one example; None: its training rows, once."""
    forward_rows: int = 1
    """Rows one example of a micro batch puts through the backbone in a training forward pass,
    each padded to max_length (retrieval: 2, its query and its document)."""
    statistics: Callable[[TaskInfo], TaskStatistics | None] | None = None
    """Sizes and lengths of a task the catalog does not know (a plugin's), counted from its source;
    None, or a None answer: the task is costed as padded rows (`sweeper.plan.cost.fallback_tokens`)."""

    def tokens_scored(self, stats: TaskStatistics, shape: RowShape) -> float:
        """Forward tokens of scoring one example of a task with `stats`."""
        if self.scored_tokens is not None:
            return self.scored_tokens(stats, shape)
        rows, tokens = self.training_rows(stats, shape)
        return rows * tokens


GENERIC = FamilyEstimate()
"""What a family that declares nothing is estimated as."""
EXTRACTIVE_QA = FamilyEstimate(training_rows=qa_windows)
"""An example is its windows (a context longer than a window is cut with doc_stride overlap, each
window repeating the question); scoring runs the same windows."""
RETRIEVAL = FamilyEstimate(training_rows=query_and_positive, scored_tokens=query_and_pool, forward_rows=2)
"""Trains on (query, positive) pairs, both embedded in one forward pass for InfoNCE; scoring
embeds each split's queries and its labelled document pool."""
