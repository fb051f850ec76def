"""The paper's 12 tasks read as the authors read them (EncodEval `encodeval/datasets.py`): each
small copy in `tests/data/hub/` is laid out in its hub data set's schema (docs/paper-protocol.md
says which columns come from where), and goes through the catalog entry's adapter, its split rule
and, for retrieval, the restriction of the pool to the labelled documents."""
from __future__ import annotations

import json
from dataclasses import asdict, replace

import pytest
from transformers import AutoTokenizer

from sweeper.contract.catalog import SHIPPED_TASKS
from sweeper.contract.registry import get_task
from sweeper.contract.text_sources import iter_rows
from trainables.tasks.adapters import retrieval_split, split_queries
from trainables.tasks.data import load_task_splits
from trainables.tasks.retrieval import Retrieval

from conftest import ROOT

HUB = ROOT / "tests" / "data" / "hub"
SETTINGS = {"doc_stride": 8, "retrieval_temperature": 0.05}


def local(name: str):
    task = get_task(name)
    train_source = str(HUB / task.train_source.split("/")[-1]) if task.train_source else None
    return replace(task, source=str(HUB / name), data_files={}, train_source=train_source)


def rows(name: str, split: str) -> list[dict]:
    return list(iter_rows(str(HUB / name), split))


def as_set(items: list[dict]) -> set[str]:
    return {json.dumps(item, sort_keys=True) for item in items}


@pytest.mark.parametrize("name", ["sst2", "mnli", "qqp", "squad", "squad-v2", "record"])
def test_glue_squad_and_record_test_on_validation_and_draw_validation_as_the_authors(name):
    """Test = the official validation split; validation = the rows of EncodEval's
    `train_test_split(train_size=0.95, seed=42)`, the rest train."""
    from datasets import Dataset

    task = local(name)
    splits = load_task_splits(task, None, None)
    assert splits["test"] == rows(name, task.test_split)
    train = rows(name, "train")
    authors = Dataset.from_list(train).train_test_split(train_size=0.95, seed=42)
    assert as_set(splits["validation"]) == as_set(authors["test"].to_list()) and splits["validation"]
    assert as_set(splits["train"]) == as_set(authors["train"].to_list())


def test_the_authors_draw_matches_datasets_on_a_larger_split():
    from datasets import Dataset

    train = [{"i": i} for i in range(1013)]
    task = replace(local("sst2"), source="unused")
    from trainables.tasks.data import carve_validation
    rest, validation = carve_validation(train, draw=task.validation_draw)
    authors = Dataset.from_list(train).train_test_split(train_size=0.95, seed=42)
    assert [r["i"] for r in validation] == authors["test"]["i"] and len(validation) == 51
    assert sorted(r["i"] for r in rest) == sorted(authors["train"]["i"])


@pytest.mark.parametrize("name", ["conll2003", "ontonotes5", "uner-en"])
def test_token_classification_copies_keep_their_own_validation_and_test_splits(name):
    task = local(name)
    splits = load_task_splits(task, None, None)
    for split in ("train", "validation", "test"):
        assert splits[split] == rows(name, split), split
    assert task.text_fields[0] in splits["test"][0] and task.label_field in splits["test"][0]


def pool_and_queries(split_rows: list[dict], schema: str):
    queries, documents = retrieval_split(split_rows, schema)
    return {q["query_id"]: q for q in queries}, documents


def test_msmarco_trains_on_the_pairs_and_scores_the_labelled_pool_of_its_qrels():
    task = local("msmarco")
    splits = load_task_splits(task, None, None)
    validation, pool = pool_and_queries(splits["validation"], task.schema)
    test, test_pool = pool_and_queries(splits["test"], task.schema)
    assert set(validation) == {"0", "1", "2"} and validation["0"]["positives"] == ["p0"]
    assert set(test) == {"3", "4"}, "a query judged only 0 has no relevant document: not scored"
    judged = {f"p{i}" for i in range(8)}  # p8, p9: in the corpus, judged for no query
    assert set(pool) == set(test_pool) == judged, "one pool: the labelled documents of both splits"
    assert validation["0"]["query"] == "Query: what is a kiwi"
    assert pool["p0"] == "Document: A kiwi is a flightless bird of New Zealand.", "MS MARCO passages have no title"
    train, train_pool = pool_and_queries(splits["train"], task.schema)
    assert len(train) == len(rows("msmarco-pairs", "train")) == len(train_pool)
    first = train["0"]
    assert first["query"] == "Query: what is a kiwi"
    assert train_pool[first["positives"][0]] == "Document: A kiwi is a flightless bird of New Zealand."


def test_nq_halves_its_test_queries_and_pools_their_labelled_passages():
    task = local("nq")
    splits = load_task_splits(task, None, None)
    assert splits["train"] == []
    validation, pool = pool_and_queries(splits["validation"], task.schema)
    test, _ = pool_and_queries(splits["test"], task.schema)
    assert (sorted(validation), sorted(test)) == split_queries([f"test{i}" for i in range(6)], 0.5)
    assert len(validation) == len(test) == 3 and not set(validation) & set(test)
    assert set(pool) == {f"doc{i}" for i in range(7)}, "doc7 is judged for no query: left out"
    assert pool["doc0"] == "Document: Eiffel Tower. The tower was built from 1887 to 1889."
    both = validation | test
    assert both["test3"]["positives"] == ["doc3", "doc6"]


def test_mldr_uses_dev_and_test_and_pools_the_positives_only():
    task = local("mldr-en")
    splits = load_task_splits(task, None, None)
    validation, pool = pool_and_queries(splits["validation"], task.schema)
    test, _ = pool_and_queries(splits["test"], task.schema)
    assert sorted(validation) == ["q-en-1", "q-en-2"] and sorted(test) == ["q-en-3", "q-en-4", "q-en-5"]
    assert set(pool) == {f"doc-en-{i}" for i in range(1, 6)}, "EncodEval adds no negatives to the pool"
    assert pool["doc-en-3"] == "Document: Paper was invented in China." and test["q-en-3"]["query"].startswith(
        "Query: "
    )


def test_capped_splits_pool_only_their_queries_documents_and_keep_every_positive():
    task = local("msmarco")
    splits = load_task_splits(task, 2, 1)
    validation, pool = pool_and_queries(splits["validation"], task.schema)
    test, _ = pool_and_queries(splits["test"], task.schema)
    kept = [d for q in (*validation.values(), *test.values()) for d in q["positives"]]
    assert len(validation) <= 1 and len(test) <= 1 and set(kept) <= set(pool) and len(pool) < 8
    train, train_pool = pool_and_queries(splits["train"], task.schema)
    assert len(train) == 2 and set(train_pool) == {d for q in train.values() for d in q["positives"]}


@pytest.mark.parametrize("name", ["msmarco", "nq", "mldr-en"])
def test_retrieval_encodes_one_labelled_pool_per_evaluation(name, wordpiece_dir):
    task = local(name)
    tokenizer = AutoTokenizer.from_pretrained(wordpiece_dir)
    arrays, meta = Retrieval.encode(load_task_splits(task, None, None), task, tokenizer, 32, SETTINGS)
    pools = meta["pool"]
    assert pools["validation"] == pools["test"] == {"msmarco": 8, "nq": 7, "mldr-en": 5}[name]
    assert bool(pools["train"]) == (name == "msmarco")


def test_tasks_defined_before_the_new_fields_hash_as_before():
    for info in SHIPPED_TASKS.values():
        unset = {key for key in info.ADDED if getattr(info, key) is None}
        assert info.identity() == {k: v for k, v in asdict(info).items() if k not in unset}
    wordnet = SHIPPED_TASKS["wordnet-supersense-cls"]
    assert wordnet.identity() == {k: v for k, v in asdict(wordnet).items() if k not in wordnet.ADDED}
    assert SHIPPED_TASKS["conll2003"].identity()["validation_split"] == "validation"
