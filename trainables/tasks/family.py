"""The contract of a task family: how a task is encoded, which head it trains, how it is scored.

A family is a class used as a namespace (static or class methods, no instance state): the
registry names it by `module:Class` (`sweeper.contract.registry.FamilyInfo.implementation`) and the worker
resolves it. Data flow: `encode` runs once per (task, tokenizer, max length) in the prepare
step, its arrays are saved as `<split>.npz` and its meta as `meta.json`; every trial then loads
those, `build`s the model on the backbone, trains it with `loss` for the steps `train_size`
allows, and `score`s it on validation and test. Nothing here tokenises during a trial.

Optional: `backward(model, split, rows, micro, device, protocol, autocast) -> float`, for a loss
that couples the examples of a batch: it backpropagates the loss of the whole optimizer step's
batch `rows` in forward passes of at most `micro` units and returns its value (retrieval's
gradient-cached in-batch negatives). Without it the loop accumulates `loss` micro-batch by
micro-batch (`trainables.finetune_loop.backward_batch`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import nn

from sweeper.contract.configs import FinetuneProtocol, TaskInfo

Split = dict[str, np.ndarray]
"""One prepared split: named arrays, as saved in `<split>.npz` (strings as numpy unicode arrays)."""


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Both conventions' scores of one split's predictions, and the predictions themselves."""
    scores: dict[str, float]
    """{"paper": ..., "standard": ...}, each on 0-100, both computed from the same predictions."""
    predictions: list[dict]
    """One per evaluated example: {"example": row index in the split, "prediction": ..., "gold": ...},
    both JSON-serialisable."""


class TaskFamily(Protocol):
    @staticmethod
    def encode(splits: dict[str, list[dict]], task: TaskInfo, tokenizer, max_length: int,
               settings: dict) -> tuple[dict[str, Split], dict]:
        """Tokenise the rows of each split ("train", "validation", "test"; an evaluation-only
        task's train split is empty) into arrays, and return (arrays per split, meta).

        `settings` are the family's encoding settings (`FamilyInfo.encoding_settings`, e.g.
        extractive QA's `doc_stride`). Arrays of one split that index examples share their first
        dimension; anything else (a document pool, per-example strings) is the family's own.
        The meta must be JSON-serialisable; the prepare step adds task, family, max_length and
        sizes (rows per split) to it, and `build`, `score` and `describe` receive it back."""
        ...

    @staticmethod
    def build(backbone: nn.Module, meta: dict) -> nn.Module:
        """The trainable model: the backbone (called as a `LlamaEncoderModel`, whatever the
        checkpoint: `trainables.backbones`) with the family's head.
        Called once per trial, on the CPU; the loop moves it to the device."""
        ...

    @staticmethod
    def train_size(split: Split) -> int:
        """Number of training units in a split (rows, QA windows, retrieval pairs): the loop
        draws `batch_size` indices in [0, train_size) per step and sizes epochs by it."""
        ...

    @staticmethod
    def loss(model: nn.Module, split: Split, rows: np.ndarray, device: torch.device,
             protocol: FinetuneProtocol) -> torch.Tensor:
        """Mean loss over the training units `rows` of `split` (a micro-batch), as a 0-dim
        tensor on `device`; the loop backpropagates it. Family settings that shape the loss come
        from `protocol.family_settings` (retrieval's `retrieval_temperature`)."""
        ...

    @staticmethod
    def score(model: nn.Module, split: Split, meta: dict, batch_size: int, device: torch.device,
              protocol: FinetuneProtocol) -> float:
        """The task's metric of `model` on a whole split, higher is better, on a 0-100 scale (the
        shipped metrics lie in [0, 100]; a correlation x 100 may be negative; NaN for an empty split).
        Runs under `torch.no_grad()` with the model in eval mode, `batch_size` examples a pass."""
        ...

    @staticmethod
    def describe(meta: dict) -> str:
        """One line for the driver's prepare log: "3 labels", "{'train': 120, ...} windows"."""
        ...
