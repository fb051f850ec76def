"""A toy task family added the way a newcomer would: this one module and one registration call
(the family, its estimate and its task).

Regression: mean pooling + one linear output, mean-squared error on standardised targets, scored
by Pearson r x 100. Its task predicts a sentence's word count from a few shipped rows
(tests/data/toy-regression). Loaded through SWEEPER_PLUGINS=toy_regression with this folder on
PYTHONPATH; nothing in the package names it.

Its estimate (what `sweeper plan` costs it by): the catalog knows nothing of its task, so the
family counts its rows and mean sentence length from the source; a row is one sentence capped at
max_length, scored once, one row per example in a forward pass. Without it the task would be
costed as max_steps batches of rows padded to max_length (sweeper.plan.cost.fallback_tokens).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from sweeper.contract.catalog import TaskStatistics
from sweeper.contract.configs import TaskInfo
from sweeper.contract.estimates import FamilyEstimate, one_row
from sweeper.contract.registry import FamilyInfo, register_family
from trainables.tasks.heads import LinearHead


class Regression:
    """The TaskFamily contract (trainables.tasks.family) for one real-valued target."""

    @staticmethod
    def encode(splits, task: TaskInfo, tokenizer, max_length: int, settings: dict):
        targets = np.asarray([float(row[task.label_field]) for row in splits["train"]] or [0.0])
        mean, std = float(targets.mean()), float(targets.std() or 1.0)
        arrays = {}
        for split, rows in splits.items():
            enc = tokenizer([row[task.text_fields[0]] for row in rows], truncation=True, max_length=max_length,
                            padding="max_length")
            arrays[split] = {
                "input_ids": np.asarray(enc["input_ids"], dtype=np.int32).reshape(len(rows), max_length),
                "attention_mask": np.asarray(enc["attention_mask"], dtype=np.int8).reshape(len(rows), max_length),
                "targets": (np.asarray([float(r[task.label_field]) for r in rows], dtype=np.float32) - mean) / std,
            }
        return arrays, {"labels": [], "target_mean": mean, "target_std": std}

    @staticmethod
    def build(backbone, meta: dict):
        return LinearHead(backbone, 1, pooled=True)

    @staticmethod
    def train_size(split: dict) -> int:
        return len(split["input_ids"])

    @staticmethod
    def predict(model, split: dict, rows, device) -> torch.Tensor:
        ids = torch.from_numpy(split["input_ids"][rows].astype(np.int64)).to(device)
        mask = torch.from_numpy(split["attention_mask"][rows].astype(np.int64)).to(device)
        return model(ids, mask).float().squeeze(-1)

    @classmethod
    def loss(cls, model, split: dict, rows, device, protocol) -> torch.Tensor:
        target = torch.from_numpy(split["targets"][rows]).to(device)
        return F.mse_loss(cls.predict(model, split, rows, device), target)

    @classmethod
    def score(cls, model, split: dict, meta: dict, batch_size: int, device, protocol) -> float:
        n = len(split["input_ids"])
        predicted = torch.cat([cls.predict(model, split, slice(i, i + batch_size), device).cpu()
                               for i in range(0, n, batch_size)]).numpy()
        if n < 2 or predicted.std() == 0:
            return 0.0  # constant predictions carry no correlation
        return float(100 * np.corrcoef(predicted, split["targets"])[0, 1])

    @staticmethod
    def describe(meta: dict) -> str:
        return f"target mean {meta['target_mean']:.1f}, std {meta['target_std']:.1f}"


TOKENS_PER_WORD = 1.3
"""ESTIMATE: tokens per whitespace word of the study's WordPiece vocabulary (as the catalog's WordNet
tasks); plus 2 special tokens per row."""


def sentence_statistics(task: TaskInfo) -> TaskStatistics:
    """Rows of the task's train and test splits (`<split>.jsonl` in its source folder) and their
    mean length in tokens: a few hundred rows, read when the plan is made."""
    rows = {split: [json.loads(line) for line in (Path(task.source) / f"{split}.jsonl").read_text().splitlines()]
            for split in (task.train_split, task.test_split)}
    words = [len(row[task.text_fields[0]].split()) for split in rows.values() for row in split]
    return TaskStatistics(train_rows=len(rows[task.train_split]), test_rows=len(rows[task.test_split]),
                          mean_tokens=2 + TOKENS_PER_WORD * sum(words) / len(words))


ESTIMATE = FamilyEstimate(training_rows=one_row, forward_rows=1, statistics=sentence_statistics)
"""A row is one sentence capped at max_length; its task's sizes counted from its files."""

register_family(
    FamilyInfo(name="regression", category="REG", implementation="toy_regression:Regression",
               score_range=(-100.0, 100.0), estimate=ESTIMATE),  # Pearson r x 100
    tasks=[TaskInfo(name="toy-word-count", family="regression", category="REG", metric="pearson",
                    source=str(Path(__file__).resolve().parent.parent / "data" / "toy-regression"))],
)
