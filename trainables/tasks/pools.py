"""The authors' retrieval sources -> the rows the retrieval family encodes, each evaluation
ranking the labelled documents only (EncodEval `encodeval/datasets.py`, hgissbkh/EncodEval).

- `beir` (MS MARCO `BeIR/msmarco`, NQ `BeIR/nq`): queries and corpus (the `queries` / `corpus`
  files of `source`: `data_files` on the hub, `queries.jsonl` / `corpus.jsonl` in a local copy)
  and the judgements of `<source>-qrels` (`query-id`, `corpus-id`, `score`), split `validation`
  and `test` as the source has them, or one split cut by query into validation and test
  (`validation_share`: NQ's test qrels 50/50).
- `mldr-corpus` (`hgissbkh/mldr-en`): query rows with their positive passages (config `default`,
  splits `dev` and `test`) and the document texts (config `corpus`).
Training rows come from `train_source` (MS MARCO: `hgissbkh/msmarco-pairs`, `query` / `positive`).

The pool is the union of the labelled documents of the validation and the test queries (the
authors build one `corpus_sub` for both), after the example caps, so a capped split still finds
every positive of its queries. Queries get the task's query prefix and documents its document
prefix ("Query: ", "Document: ").
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from sweeper.contract.configs import TaskInfo
from sweeper.contract.text_sources import iter_rows
from trainables.tasks.adapters import (corpus_text, doc_id, labelled_pool, mldr_judgements, qrels_judgements,
                                       split_queries)

DEFAULT_VALIDATION_SHARE = 0.05


def prefixes(task: TaskInfo) -> tuple[str, str]:
    """(query prefix, document prefix): the task's two field prefixes, else none."""
    return tuple(task.field_prefixes) if len(task.field_prefixes) == 2 else ("", "")


def part(source: str, config: str) -> str:
    """A hub source's config (`owner/name:config`), or a local copy's folder (one file per split)."""
    return source if Path(source).is_dir() else f"{source}:{config}"


def rows_of(source: str, split: str, task: TaskInfo, revision: str | None = None) -> Iterator[dict]:
    """The split's rows, streamed: MS MARCO's corpus is 8.8M passages, of which the pool keeps ~17k."""
    files = task.data_files if split in task.data_files and not Path(source).is_dir() else None
    return iter_rows(source, split, files, revision)


def evaluation_judgements(task: TaskInfo, revision: str | None) -> tuple[dict, dict]:
    """({query id: judgement} of validation, of test) as the source splits them."""
    if task.schema == "beir":
        qrels = f"{task.source}-qrels"  # BEIR's convention (BeIR/nq -> BeIR/nq-qrels), as the authors load it

        def read(split):
            return qrels_judgements(rows_of(qrels, split, task))
    else:
        def read(split):
            return mldr_judgements(rows_of(part(task.source, "default"), split, task, revision))
    if task.validation_split:
        return read(task.validation_split), read(task.test_split)
    judged = read(task.test_split)
    validation, test = split_queries(judged, task.validation_share or DEFAULT_VALIDATION_SHARE)
    return {q: judged[q] for q in validation}, {q: judged[q] for q in test}


def training_rows(task: TaskInfo, query_prefix: str, document_prefix: str, revision: str | None) -> list[dict]:
    """(query, positive) pairs of the training source as query rows and pool rows."""
    source = task.train_source or task.source
    rows, documents = [], {}
    for number, pair in enumerate(rows_of(source, task.train_split, task, None if task.train_source else revision)):
        document = doc_id(pair["positive"])
        documents.setdefault(document, document_prefix + pair["positive"])
        rows.append({"query_id": str(number), "query": query_prefix + pair["query"], "positives": [document]})
    return rows + [{"docid": d, "text": text} for d, text in documents.items()]


def load_qrels_splits(task: TaskInfo, max_train: int | None, max_eval: int | None, revision: str | None,
                      sample) -> dict[str, list[dict]]:
    """{'train', 'validation', 'test'} rows in the QRELS_SCHEMAS layout; `sample(rows, limit)`
    is trainables.tasks.data's seeded cap, applied to queries (training pairs: to pairs)."""
    query_prefix, document_prefix = prefixes(task)
    validation, test = evaluation_judgements(task, revision)
    kept = {split: dict(sample(list(judged.items()), max_eval))
            for split, judged in (("validation", validation), ("test", test))}
    wanted = {q for judged in kept.values() for q in judged}
    pool = labelled_pool(judged for split in kept.values() for judged in split.values())
    if task.schema == "beir":
        texts = {str(r["_id"]): r["text"] for r in rows_of(task.source, "queries", task, revision)
                 if str(r["_id"]) in wanted}
        needed = set(pool)
        documents = {str(r["_id"]): corpus_text(r) for r in rows_of(task.source, "corpus", task, revision)
                     if str(r["_id"]) in needed}
    else:
        texts = {q: judged["query"] for split in kept.values() for q, judged in split.items()}
        needed = set(pool)
        documents = {str(r["docid"]): r["text"] for r in rows_of(part(task.source, "corpus"), "corpus", task, revision)
                     if str(r["docid"]) in needed}
    missing = [d for d in pool if d not in documents]
    if missing:
        raise ValueError(f"{task.name}: {len(missing)} judged documents are not in the corpus of {task.source} "
                         f"(e.g. {missing[:3]})")
    pool_rows = [{"docid": d, "text": document_prefix + documents[d]} for d in pool]
    splits = {split: [{"query_id": q, "query": query_prefix + texts[q], "positives": judged["positives"]}
                      for q, judged in kept[split].items()] + pool_rows for split in kept}
    train = [] if task.train_task else training_rows(task, query_prefix, document_prefix, revision)
    if max_train:
        queries = sample([r for r in train if "query" in r], max_train)
        used = {d for r in queries for d in r["positives"]}
        train = queries + [r for r in train if "docid" in r and r["docid"] in used]
    return {"train": train, **splits}
