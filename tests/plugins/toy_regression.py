"""A toy task family added the way a newcomer would: this one module and one registration line.

Regression: mean pooling + one linear output, mean-squared error on standardised targets, scored
by Pearson r x 100. Its task predicts a sentence's word count from a few shipped rows
(tests/data/toy-regression). Loaded through SWEEPER_PLUGINS=toy_regression with this folder on
PYTHONPATH; nothing in the package names it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from sweeper.spec.catalog import register_task
from sweeper.spec.configs import TaskInfo
from sweeper.spec.registry import FamilyInfo, register_family
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


register_family(FamilyInfo(name="regression", category="REG", implementation="toy_regression:Regression",
                           score_range=(-100.0, 100.0)))  # Pearson r x 100

register_task(TaskInfo(name="toy-word-count", family="regression", category="REG", metric="pearson",
                       source=str(Path(__file__).resolve().parent.parent / "data" / "toy-regression")))
