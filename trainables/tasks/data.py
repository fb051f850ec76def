"""Task rows -> tokenised arrays, prepared once per (tokenizer, task, max length) and cached.

Every trial of a task reads the same `.npz` files from the study's cache, so a grid of
hundreds of trials tokenises each data set exactly once (the prepare step runs as one Ray task
per task before the grid starts).
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

from trainables.build_once import build_directory_once
from trainables.text_sources import iter_rows

VALIDATION_SHARE, VALIDATION_SEED = 0.05, 42
IGNORE = -100


def load_task_splits(task: dict, max_train: int | None, max_eval: int | None) -> dict[str, list[dict]]:
    """{'train', 'validation', 'test'} rows: test = the source's official validation split,
    validation = 5 % of train (seed 42), as in the paper. Limits cut after the split."""
    if task["split_column"]:
        rows = list(iter_rows(task["source"]))
        train = [r for r in rows if r[task["split_column"]] == task["train_split"]]
        test = [r for r in rows if r[task["split_column"]] == task["test_split"]]
    else:
        train = list(iter_rows(task["source"], task["train_split"]))
        test = list(iter_rows(task["source"], task["test_split"]))
    order = list(range(len(train)))
    random.Random(VALIDATION_SEED).shuffle(order)
    n_validation = max(1, round(VALIDATION_SHARE * len(train)))
    validation = [train[i] for i in order[:n_validation]]
    train = [train[i] for i in order[n_validation:]]
    return {
        "train": sample(train, max_train),
        "validation": sample(validation, max_eval),
        "test": sample(test, max_eval),
    }


def sample(rows: list[dict], limit: int | None) -> list[dict]:
    """At most `limit` rows, drawn with seed 42 (sources are often sorted by label: never cut the head)."""
    if not limit or limit >= len(rows):
        return rows
    chosen = sorted(random.Random(VALIDATION_SEED).sample(range(len(rows)), limit))
    return [rows[i] for i in chosen]


def label_of(value, label_names: list[str]) -> str:
    return label_names[value] if isinstance(value, int) and label_names else str(value)


def encode_sequence_classification(rows, task, tokenizer, max_length, labels):
    texts = [
        "\n".join(prefix + str(row[field]) for field, prefix in zip(task["text_fields"], task["field_prefixes"]))
        for row in rows
    ]
    enc = tokenizer(texts, truncation=True, max_length=max_length, padding="max_length")
    index = {name: i for i, name in enumerate(labels)}
    names = list(task["label_names"])
    return {
        "input_ids": np.asarray(enc["input_ids"], dtype=np.int32),
        "attention_mask": np.asarray(enc["attention_mask"], dtype=np.int8),
        "labels": np.asarray([index[label_of(r[task["label_field"]], names)] for r in rows], dtype=np.int64),
    }


def encode_token_classification(rows, task, tokenizer, max_length, labels):
    """Labels on the first sub-token of each word, IGNORE on the rest; `word_labels` keeps the
    gold tags of every word (also those cut by truncation) for entity-level scoring."""
    words = [list(row[task["text_fields"][0]]) for row in rows]
    enc = tokenizer(words, is_split_into_words=True, truncation=True, max_length=max_length,
                    padding="max_length")
    index = {name: i for i, name in enumerate(labels)}
    names = list(task["label_names"])
    token_labels = np.full((len(rows), max_length), IGNORE, dtype=np.int64)
    word_index = np.full((len(rows), max_length), -1, dtype=np.int32)
    for i, row in enumerate(rows):
        tags = [label_of(t, names) for t in row[task["label_field"]]]
        previous = None
        for position, word in enumerate(enc.word_ids(i)):
            if word is not None and word != previous:
                token_labels[i, position] = index[tags[word]]
                word_index[i, position] = word
            previous = word
    gold = [[label_of(t, names) for t in row[task["label_field"]]] for row in rows]
    return {
        "input_ids": np.asarray(enc["input_ids"], dtype=np.int32),
        "attention_mask": np.asarray(enc["attention_mask"], dtype=np.int8),
        "labels": token_labels,
        "word_index": word_index,
        "gold_tags": np.asarray([json.dumps(g) for g in gold]),
    }


ENCODERS = {
    "sequence_classification": encode_sequence_classification,
    "token_classification": encode_token_classification,
}


def label_vocabulary(task: dict, rows: list[dict]) -> list[str]:
    if task["label_names"]:
        return list(task["label_names"])
    values = set()
    for row in rows:
        value = row[task["label_field"]]
        values.update(value if isinstance(value, list) else [value])
    labels = sorted(map(str, values))
    if task["family"] == "token_classification" and "O" in labels:
        labels.remove("O")
        labels.insert(0, "O")
    return labels


def prepare_task_data(task: dict, tokenizer_dir: str, max_length: int, out_dir: str,
                      max_train: int | None = None, max_eval: int | None = None) -> dict:
    """Tokenise the task's three splits into `out_dir` unless already there; return its meta."""
    out = Path(out_dir)

    def build(tmp: Path) -> None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        splits = load_task_splits(task, max_train, max_eval)
        # Every split's labels: a capped training sample can miss a tag the test split has.
        labels = label_vocabulary(task, [row for rows in splits.values() for row in rows])
        for split, rows in splits.items():
            np.savez(tmp / f"{split}.npz", **ENCODERS[task["family"]](rows, task, tokenizer, max_length, labels))
        meta = {"task": task["name"], "labels": labels, "max_length": max_length,
                "sizes": {split: len(rows) for split, rows in splits.items()}}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))

    build_directory_once(out, "meta.json", build)
    return json.loads((out / "meta.json").read_text())


def load_prepared(out_dir: str) -> tuple[dict, dict[str, dict[str, np.ndarray]]]:
    out = Path(out_dir)
    meta = json.loads((out / "meta.json").read_text())
    splits = {}
    for split in ("train", "validation", "test"):
        with np.load(out / f"{split}.npz") as data:
            splits[split] = {key: data[key] for key in data.files}
    return meta, splits
