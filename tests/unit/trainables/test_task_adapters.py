"""The paper's 12 hub data sets, each read from a small local copy in its hub schema.

The hub is unreachable here, so each `tests/data/hub/<task>/` holds a few rows laid out exactly as
`datasets.load_dataset(<hub id>)` yields them (integer class ids, nested answer and passage
structs); the catalog entry's own column mapping, label names and split names are used, only the
source is swapped for the local folder.
"""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from transformers import AutoTokenizer

from sweeper.contract import registry
from sweeper.contract.configs import TaskInfo
from sweeper.contract.registry import current, get_task, resolve
from trainables.tasks.adapters import QRELS_SCHEMAS, retrieval_split
from trainables.tasks.data import load_task_splits
from trainables.tasks.family import TaskFamily
from trainables.tasks.metrics import normalize_answer
from trainables.tasks.qa import best_answers, encode_examples
from sweeper.contract.text_sources import iter_rows

from conftest import ROOT


HUB = ROOT / "tests" / "data" / "hub"
PAPER_TASKS = ["sst2", "mnli", "qqp", "conll2003", "ontonotes5", "uner-en", "squad", "squad-v2", "record",
               "msmarco", "nq", "mldr-en"]
SETTINGS = {"doc_stride": 8, "retrieval_temperature": 0.05}


def local(name: str) -> TaskInfo:
    """The catalog's task with its sources swapped for the local copies (hub-only file lists
    dropped): `<task>/`, and beside it `<task>-qrels/` and the training source's copy."""
    task = get_task(name)
    train_source = str(HUB / task.train_source.split("/")[-1]) if task.train_source else None
    return replace(task, source=str(HUB / name), data_files={}, train_source=train_source)


def family_of(task: TaskInfo) -> TaskFamily:
    return resolve(registry.family_of(task.family).implementation)


@pytest.fixture(scope="module")
def tokenizer(wordpiece_dir):
    return AutoTokenizer.from_pretrained(wordpiece_dir)


def test_every_paper_data_set_has_a_local_copy_and_a_catalog_entry():
    copies = {p.name for p in HUB.iterdir()}
    assert set(PAPER_TASKS) <= copies
    assert copies - set(PAPER_TASKS) == {"msmarco-qrels", "msmarco-pairs", "nq-qrels"}, "the retrieval sources' parts"
    assert {get_task(name).category for name in PAPER_TASKS} == {"SC", "TC", "QA", "IR"}


@pytest.mark.parametrize("name", PAPER_TASKS)
def test_hub_schema_loads_splits_and_encodes(name, tokenizer):
    task = local(name)
    splits = load_task_splits(task, None, None)
    if task.schema in QRELS_SCHEMAS:  # split and pooled by trainables.tasks.pools (tests/test_paper_tasks.py)
        assert splits["validation"] and splits["test"] and bool(splits["train"]) != bool(task.train_task)
    elif task.validation_split:  # the source's own three splits, as they are
        for split, source_split in (("train", task.train_split), ("validation", task.validation_split),
                                    ("test", task.test_split)):
            assert len(splits[split]) == len(list(iter_rows(task.source, source_split))), split
    elif task.train_task:  # evaluation-only: 5 % of its evaluation split is validation, the rest test
        assert not splits["train"] and len(splits["validation"]) == 1
        assert len(splits["test"]) + 1 == len(list(iter_rows(task.source, task.test_split)))
    else:
        assert len(splits["test"]) == len(list(iter_rows(task.source, task.test_split)))
        assert len(splits["train"]) + len(splits["validation"]) == len(list(iter_rows(task.source, "train")))
    arrays, meta = family_of(task).encode(splits, task, tokenizer, 48, SETTINGS)
    assert set(arrays) == {"train", "validation", "test"}
    assert family_of(task).describe(meta)
    for split, columns in arrays.items():
        lengths = {len(v) for k, v in columns.items() if not k.startswith(("doc_", "positive_", "contexts", "gold_"))}
        assert len(lengths) <= 1, f"{split}: columns of different lengths {lengths}"


@pytest.mark.parametrize("name, expected", [
    ("sst2", ["positive", "negative"]),
    ("mnli", ["entailment"]),
    ("qqp", ["duplicate"]),
])
def test_sequence_classification_maps_class_ids_to_names_and_joins_pairs(name, expected, tokenizer):
    task = local(name)
    splits = load_task_splits(task, None, None)
    arrays, meta = family_of(task).encode(splits, task, tokenizer, 48, SETTINGS)
    assert [meta["labels"][i] for i in arrays["test"]["labels"]] == expected
    text = tokenizer.decode(arrays["test"]["input_ids"][0], skip_special_tokens=True).lower()
    for prefix in task.field_prefixes:
        assert prefix.strip().rstrip(":").lower() in text


@pytest.mark.parametrize("name, expected", [
    ("conll2003", ["O", "O", "B-ORG", "O", "O"]),
    ("ontonotes5", ["B-GPE", "O", "B-DATE"]),
    ("uner-en", ["B-PER", "O", "B-LOC"]),
])
def test_token_classification_maps_tag_ids_to_names(name, expected, tokenizer):
    task = local(name)
    arrays, meta = family_of(task).encode(load_task_splits(task, None, None), task, tokenizer, 48, SETTINGS)
    assert json.loads(str(arrays["test"]["gold_tags"][0])) == expected
    first_subtokens = arrays["test"]["labels"][0][arrays["test"]["labels"][0] >= 0]
    assert [meta["labels"][i] for i in first_subtokens] == expected


@pytest.mark.parametrize("name", ["squad", "squad-v2", "record"])
def test_qa_windows_point_at_the_gold_span_or_at_the_null_position(name, tokenizer):
    task = local(name)
    arrays, _ = family_of(task).encode(load_task_splits(task, None, None), task, tokenizer, 48, SETTINGS)
    train = arrays["train"]
    windows_per_example = np.bincount(train["example_index"])
    if name != "record":
        assert windows_per_example.max() > 1, "a long context is split into several windows"
    found = set()
    for feature, (start, end) in enumerate(zip(train["start_positions"], train["end_positions"])):
        example = train["example_index"][feature]
        golds = [normalize_answer(g) for g in json.loads(str(train["gold_answers"][example]))]
        if start == 0:
            assert end == 0
            continue
        offsets = train["offsets"][feature]
        text = str(train["contexts"][example])[offsets[start, 0]:offsets[end, 1]]
        assert normalize_answer(text) in golds, (text, golds)
        found.add(example)
    answerable = {i for i, g in enumerate(train["gold_answers"]) if json.loads(str(g))}
    assert found == answerable, "every answerable question has a window holding its answer"
    if name == "squad-v2":
        assert len(answerable) < len(train["gold_answers"]), "the unanswerable question is kept"


def test_stride_windows_and_no_answer_decoding(tokenizer):
    context = " ".join(f"word{i}" for i in range(60)) + " the answer is here"
    records = [{"id": "a", "question": "where?", "context": context, "answers": ["answer"],
                "starts": [context.index("answer")]},
               {"id": "b", "question": "none?", "context": context, "answers": [], "starts": []}]
    split = encode_examples(records, tokenizer, max_length=32, stride=8)
    assert np.bincount(split["example_index"]).min() > 2
    # Logits that point at the gold window's span; the unanswerable question's null score wins.
    starts = np.full(split["input_ids"].shape, -5.0)
    ends = np.full(split["input_ids"].shape, -5.0)
    for feature, (s, e) in enumerate(zip(split["start_positions"], split["end_positions"])):
        if s > 0:
            starts[feature, s], ends[feature, e] = 5.0, 5.0
        elif split["example_index"][feature] == 1:
            starts[feature, 0], ends[feature, 0] = 5.0, 5.0
    assert best_answers(starts, ends, split, with_no_answer=True) == ["answer", ""]
    # Without no-answer questions (SQuAD v1) a span is always given.
    assert best_answers(starts, ends, split, with_no_answer=False)[1] != ""


def test_retrieval_adapters_read_each_schema():
    """The other hub layouts a plugin task may name (microsoft/ms_marco v1.1, sentence-transformers
    natural-questions pairs, Shitao/MLDR): tests/data/legacy_schemas."""
    legacy = ROOT / "tests" / "data" / "legacy_schemas"
    queries, docs = retrieval_split(list(iter_rows(str(legacy / "ms_marco-v1.1"), "train")), "msmarco")
    assert len(queries) == 5, "a query with no selected passage is dropped"
    assert docs[queries[2]["positives"][0]] == "Leonardo da Vinci painted the Mona Lisa."
    assert len(docs) == 13, "the pool is every listed passage, relevant or not"
    queries, docs = retrieval_split(list(iter_rows(str(legacy / "natural-questions-pairs"), "train")), "pairs")
    assert docs[queries[1]["positives"][0]].endswith("by Jane Austen.") and len(docs) == 6
    queries, docs = retrieval_split(list(iter_rows(str(legacy / "Shitao-MLDR-en"), "dev")), "mldr")
    assert queries[0]["positives"] == ["doc-en-1"] and len(docs) == 9


def test_retrieval_evaluation_only_sets_name_their_training_task():
    assert get_task("nq").train_task == get_task("mldr-en").train_task == "msmarco"
    assert get_task("wordnet-definition-retrieval").train_task == "wordnet-usage-retrieval"
    assert get_task("msmarco").train_task is None


def test_every_registered_family_implements_the_task_family_contract():
    import inspect

    methods = {name: inspect.signature(value.__func__) for name, value in vars(TaskFamily).items()
               if isinstance(value, staticmethod)}
    assert set(methods) == {"encode", "build", "train_size", "loss", "score", "describe"}
    for info in current().families.values():
        family = resolve(info.implementation)
        for name, signature in methods.items():
            assert list(inspect.signature(getattr(family, name)).parameters) == list(signature.parameters), (
                info.name, name)
