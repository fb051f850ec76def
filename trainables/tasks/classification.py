"""Sequence and token classification: encoders, heads, losses and scores.

Sequence classification: mean pooling + linear head, cross-entropy, accuracy; sentence pairs are
joined as "Premise: ...\nHypothesis: ..." by the task's field prefixes. Token classification: a
per-token linear head trained and scored on the first sub-token of each word, entity-level F1.
"""
from __future__ import annotations

import json

import numpy as np
import torch
import torch.nn.functional as F

from sweeper.contract.configs import FinetuneProtocol, TaskInfo
from trainables.tasks.heads import LinearHead
from trainables.tasks.metrics import accuracy, entity_f1

IGNORE = -100


def label_of(value, label_names: tuple[str, ...]) -> str:
    """Hub sources store integer class ids; the label vocabulary maps them to names."""
    return label_names[value] if isinstance(value, int) and label_names else str(value)


def label_vocabulary(task: TaskInfo, splits: dict[str, list[dict]],
                     first: str | None = None) -> tuple[list[str], dict[str, int]]:
    """(labels in id order, label name -> id): the task's `label_names`, else every value of its
    label field (a list per row for token tags) in every split, sorted, `first` (if seen) first.
    Every split's labels: a capped training sample can miss a label the test split has."""
    if task.label_names:
        labels = list(task.label_names)
    else:
        values = set()
        for row in (row for rows in splits.values() for row in rows):
            value = row[task.label_field]
            values.update(value if isinstance(value, list) else [value])
        labels = sorted(map(str, values))
        if first in labels:
            labels.remove(first)
            labels.insert(0, first)
    return labels, {name: i for i, name in enumerate(labels)}


def batch_width(split: dict, rows) -> int:
    """Columns up to the batch's last real token: beyond it every row is padding, which the
    packed backbone skips anyway, but heads, losses and the scatter back would still pay for."""
    columns = np.flatnonzero(split["attention_mask"][rows].any(0))
    return int(columns[-1]) + 1 if len(columns) else 1


def tensors(split: dict, rows, device, *keys) -> list[torch.Tensor]:
    """The batch's arrays, per-token ones cut to `batch_width`."""
    width = batch_width(split, rows)
    return [torch.from_numpy(split[key][rows][:, :width] if split[key].ndim == 2 else split[key][rows])
            .to(device=device, dtype=torch.int64) for key in keys]


class SequenceClassification:
    """`trainables.tasks.family.TaskFamily` for one label per input (a sentence or a pair)."""

    @staticmethod
    def encode(splits: dict[str, list[dict]], task: TaskInfo, tokenizer, max_length: int, settings: dict):
        labels, index = label_vocabulary(task, splits)
        arrays = {}
        for split, rows in splits.items():
            texts = ["\n".join(prefix + str(row[field])
                               for field, prefix in zip(task.text_fields, task.field_prefixes)) for row in rows]
            enc = tokenizer(texts, truncation=True, max_length=max_length, padding="max_length")
            arrays[split] = {
                "input_ids": np.asarray(enc["input_ids"], dtype=np.int32).reshape(len(rows), max_length),
                "attention_mask": np.asarray(enc["attention_mask"], dtype=np.int8).reshape(len(rows), max_length),
                "labels": np.asarray([index[label_of(r[task.label_field], task.label_names)] for r in rows],
                                     dtype=np.int64),
            }
        return arrays, {"labels": labels}

    @staticmethod
    def describe(meta: dict) -> str:
        return f"{len(meta['labels'])} labels"

    pooled = True

    @classmethod
    def build(cls, backbone, meta: dict):
        return LinearHead(backbone, len(meta["labels"]), pooled=cls.pooled)

    @staticmethod
    def train_size(split: dict) -> int:
        return len(split["input_ids"])

    @staticmethod
    def loss(model, split: dict, rows: np.ndarray, device, protocol: FinetuneProtocol) -> torch.Tensor:
        ids, mask, target = tensors(split, rows, device, "input_ids", "attention_mask", "labels")
        logits = model(ids, mask)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=IGNORE)

    @staticmethod
    def predict(model, split: dict, batch_size: int, device) -> np.ndarray:
        predictions = []
        for start in range(0, len(split["input_ids"]), batch_size):
            ids, mask = tensors(split, slice(start, start + batch_size), device, "input_ids", "attention_mask")
            predicted = model(ids, mask).argmax(-1).cpu().numpy()
            if predicted.ndim == 2:  # per token: back to the split's width (cut columns are padding)
                predicted = np.pad(predicted, ((0, 0), (0, split["input_ids"].shape[1] - predicted.shape[1])))
            predictions.append(predicted)
        return np.concatenate(predictions) if predictions else np.zeros((0,), dtype=np.int64)

    @classmethod
    def score(cls, model, split: dict, meta: dict, batch_size: int, device, protocol: FinetuneProtocol) -> float:
        return accuracy(cls.predict(model, split, batch_size, device), split["labels"])


class TokenClassification(SequenceClassification):
    """`trainables.tasks.family.TaskFamily` for one BIO tag per word (NER), scored by entity F1."""

    pooled = False

    @staticmethod
    def encode(splits: dict[str, list[dict]], task: TaskInfo, tokenizer, max_length: int, settings: dict):
        """Labels on the first sub-token of each word, IGNORE on the rest; `gold_tags` keeps the
        gold tags of every word (also those cut by truncation) for entity-level scoring."""
        labels, index = label_vocabulary(task, splits, first="O")
        arrays = {}
        for split, rows in splits.items():
            words = [list(row[task.text_fields[0]]) for row in rows]
            enc = tokenizer(words, is_split_into_words=True, truncation=True, max_length=max_length,
                            padding="max_length")
            token_labels = np.full((len(rows), max_length), IGNORE, dtype=np.int64)
            word_index = np.full((len(rows), max_length), -1, dtype=np.int32)
            gold = [[label_of(t, task.label_names) for t in row[task.label_field]] for row in rows]
            for i in range(len(rows)):
                previous = None
                for position, word in enumerate(enc.word_ids(i)):
                    if word is not None and word != previous:
                        token_labels[i, position] = index[gold[i][word]]
                        word_index[i, position] = word
                    previous = word
            arrays[split] = {
                "input_ids": np.asarray(enc["input_ids"], dtype=np.int32).reshape(len(rows), max_length),
                "attention_mask": np.asarray(enc["attention_mask"], dtype=np.int8).reshape(len(rows), max_length),
                "labels": token_labels, "word_index": word_index,
                "gold_tags": np.asarray([json.dumps(g) for g in gold]),
            }
        return arrays, {"labels": labels}

    @classmethod
    def score(cls, model, split: dict, meta: dict, batch_size: int, device, protocol: FinetuneProtocol) -> float:
        return entity_f1(*word_level_tags(cls.predict(model, split, batch_size, device), split, meta["labels"]))


def word_level_tags(predicted: np.ndarray, split: dict, labels: list[str]):
    """Predicted and gold BIO tags per word; words cut by truncation count as predicted 'O'."""
    predicted_tags, gold_tags = [], []
    for row, gold_json in enumerate(split["gold_tags"]):
        gold = json.loads(str(gold_json))
        tags = ["O"] * len(gold)
        for position in np.nonzero(split["word_index"][row] >= 0)[0]:
            tags[split["word_index"][row, position]] = labels[predicted[row, position]]
        predicted_tags.append(tags)
        gold_tags.append(gold)
    return predicted_tags, gold_tags
