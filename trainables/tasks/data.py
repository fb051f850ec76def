"""Task rows -> tokenised arrays, prepared once per (tokenizer, task, max length) and cached.

Every trial of a task reads the same `.npz` files from the study's cache, so a grid of
hundreds of trials tokenises each data set exactly once (the prepare step runs as one Ray task
per task before the grid starts). The family (`trainables.tasks.family.TaskFamily`, named by
`module:Class` in `sweeper.contract.registry.FAMILIES`) owns the encoding, the head, the loss and the score.
"""
from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np

from sweeper.contract.configs import TaskInfo
from sweeper.contract.registry import resolve
from sweeper.store import folders, storage
from sweeper.store.layout import TASK_MARKER
from trainables.tasks.adapters import QRELS_SCHEMAS
from trainables.tasks.family import TaskFamily
from trainables.tasks.pools import load_qrels_splits
from sweeper.contract.text_sources import iter_rows

VALIDATION_SHARE, VALIDATION_SEED = 0.05, 42
AUTHORS_TRAIN_SIZE = 0.95
"""EncodEval's `train_test_split(train_size=0.95, seed=42)` on GLUE, SQuAD and ReCoRD."""
SPLITS = ("train", "validation", "test")


def carve_validation(rows: list[dict], share: float = VALIDATION_SHARE,
                     draw: str | None = None) -> tuple[list[dict], list[dict]]:
    """(rest, validation): validation is `share` (5 %) of the rows drawn with seed 42, as in the
    paper; draw `train_test_split`: exactly the rows of `datasets`' `train_test_split(train_size=0.95,
    seed=42)`, the authors' call (validation: the first n - floor(0.95 n) rows of numpy's
    default_rng(42) permutation)."""
    if draw == "train_test_split":
        n_validation = len(rows) - math.floor(AUTHORS_TRAIN_SIZE * len(rows))
        order = [int(i) for i in np.random.default_rng(VALIDATION_SEED).permutation(len(rows))]
    else:
        order = list(range(len(rows)))
        random.Random(VALIDATION_SEED).shuffle(order)
        n_validation = max(1, round(share * len(rows))) if rows else 0
    return [rows[i] for i in order[n_validation:]], [rows[i] for i in order[:n_validation]]


def source_rows(task: TaskInfo, split: str, revision: str | None = None) -> list[dict]:
    if task.split_column:
        return [r for r in iter_rows(task.source, revision=revision) if r[task.split_column] == split]
    return list(iter_rows(task.source, split, task.data_files or None, revision))


def load_task_splits(task: TaskInfo, max_train: int | None, max_eval: int | None,
                     revision: str | None = None) -> dict[str, list[dict]]:
    """{'train', 'validation', 'test'} rows. Test is the source's `test_split` (GLUE, SQuAD, ReCoRD:
    the official validation set); validation the source's own `validation_split` where the task
    names one (the authors' TC copies), else 5 % of train (seed 42), as in the paper. An
    evaluation-only set (`train_task`) has no training rows: validation is `validation_share`
    (5 %) of its evaluation split and the rest its test. The authors' retrieval sources
    (QRELS_SCHEMAS) are read by trainables.tasks.pools. Limits cut after the split. `revision`:
    a hub source's commit (None: the latest)."""
    if task.schema in QRELS_SCHEMAS:
        return load_qrels_splits(task, max_train, max_eval, revision, sample)
    if task.train_task:
        test, validation = carve_validation(source_rows(task, task.test_split, revision),
                                            task.validation_share or VALIDATION_SHARE)
        train = []
    elif task.validation_split:
        train, validation = (source_rows(task, split, revision) for split in (task.train_split, task.validation_split))
        test = source_rows(task, task.test_split, revision)
    else:
        train, validation = carve_validation(source_rows(task, task.train_split, revision),
                                             draw=task.validation_draw)
        test = source_rows(task, task.test_split, revision)
    return {"train": sample(train, max_train), "validation": sample(validation, max_eval),
            "test": sample(test, max_eval)}


def sample(rows: list[dict], limit: int | None) -> list[dict]:
    """At most `limit` rows, drawn with seed 42 (sources are often sorted by label: never cut the head)."""
    if not limit or limit >= len(rows):
        return rows
    chosen = sorted(random.Random(VALIDATION_SEED).sample(range(len(rows)), limit))
    return [rows[i] for i in chosen]


def task_tokenizer(tokenizer_dir: str):
    """The tokenizer as the families encode with it: padding on the right (a real token's
    position is its column, in the padded and the packed pass alike) with a pad token even where
    the tokenizer has none (Llama's: its EOS; the attention mask hides padding whatever its id)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    tokenizer.padding_side = "right"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    return tokenizer


def prepare_task_data(task: TaskInfo, family: str, tokenizer_dir: str, max_length: int, out_dir: str,
                      max_train: int | None = None, max_eval: int | None = None,
                      settings: dict | None = None, revision: str | None = None, record: dict | None = None) -> dict:
    """Tokenise the task's three splits into `out_dir` (a study location) unless already
    there; return its meta, with `summary` (the family's one-line description) added.
    `family`: `module:Class` of the task's family; `settings`: its encoding settings (extractive
    QA: `doc_stride`); `revision`: a hub source's commit; `record`: added to the meta (what
    keyed the folder: the tokenizer's content hash, checked by each trial)."""
    implementation: TaskFamily = resolve(family)

    def build(tmp: Path) -> None:
        tokenizer = task_tokenizer(tokenizer_dir)
        splits = load_task_splits(task, max_train, max_eval, revision)
        arrays, meta = implementation.encode(splits, task, tokenizer, max_length, settings or {})
        for split in SPLITS:
            np.savez(tmp / f"{split}.npz", **arrays[split])
        meta = {"task": task.name, "family": task.family, "max_length": max_length, **(record or {}), **meta,
                "sizes": {split: len(rows) for split, rows in splits.items()}}
        (tmp / TASK_MARKER).write_text(json.dumps(meta, indent=1))

    folders.build_once(out_dir, TASK_MARKER, build)
    meta = storage.read_json(storage.join(out_dir, TASK_MARKER))
    return {**meta, "summary": implementation.describe(meta)}


def load_prepared(out_dir: str) -> tuple[dict, dict[str, dict[str, np.ndarray]]]:
    out = folders.local_copy(out_dir, TASK_MARKER)
    meta = json.loads((out / TASK_MARKER).read_text())
    splits = {}
    for split in SPLITS:
        with np.load(out / f"{split}.npz") as data:
            splits[split] = {key: data[key] for key in data.files}
    return meta, splits
