"""Source schemas -> the records a family encodes (QA and retrieval; classification maps columns).

Each hub data set keeps its own layout; an adapter reads one layout and yields the family's
normalised records, so the same encoder serves SQuAD and ReCoRD, or MS MARCO, NQ and MLDR.
- QA record: {"id", "question", "context", "answers": [text], "starts": [char offset]}; no
  answers = unanswerable (SQuAD v2).
- Retrieval split: queries [{"query_id", "query", "positives": [doc id]}] and the labelled pool
  {doc id: text} (every passage the split's rows list, relevant or not).

The authors' retrieval sources (BEIR queries / corpus / qrels, MLDR with a corpus config) are read
by trainables.tasks.pools into rows of one normalised layout (QRELS_SCHEMAS): query rows
{"query_id", "query", "positives"} and pool rows {"docid", "text"}; the judgement rules (a
positive is a qrels score >= 1; MLDR's pool is its positives) are the functions below, each
following EncodEval's `encodeval/datasets.py` (hgissbkh/EncodEval).
"""
from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable

QRELS_SCHEMAS = ("beir", "mldr-corpus")
"""Retrieval schemas read through trainables.tasks.pools into query rows and pool rows."""


def qa_record(row: dict, schema: str) -> dict:
    if schema == "squad":
        answers = row["answers"]
        # The authors' ReCoRD copy (hgissbkh/record) is read in this layout too; an id is optional.
        identifier = row.get("id", doc_id(row["question"] + "\n" + row["context"]))
        return {"id": str(identifier), "question": row["question"], "context": row["context"],
                "answers": list(answers["text"]), "starts": [int(s) for s in answers["answer_start"]]}
    if schema == "record":
        # ReCoRD: a cloze query over a news passage; every mention of an answer entity is a gold
        # span. Its "@placeholder" stays in the question, which is what the model reads.
        spans = row["entity_spans"]
        golds = set(row["answers"])
        mentions = [(text, int(start)) for text, start in zip(spans["text"], spans["start"]) if text in golds]
        idx = row.get("idx", {})
        return {"id": f"{idx.get('passage', '')}-{idx.get('query', '')}" if isinstance(idx, dict) else str(idx),
                "question": row["query"], "context": row["passage"],
                "answers": [text for text, _ in mentions], "starts": [start for _, start in mentions]}
    raise ValueError(f"unknown extractive QA schema {schema!r}")


def doc_id(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def retrieval_split(rows: list[dict], schema: str) -> tuple[list[dict], dict[str, str]]:
    """Queries with at least one relevant document, and the labelled document pool."""
    queries, documents = [], {}
    for number, row in enumerate(rows):
        if schema in QRELS_SCHEMAS:  # a query row, or a pool row (trainables.tasks.pools)
            if "docid" in row:
                documents[str(row["docid"])] = row["text"]
                continue
            positives, query_id = [str(d) for d in row["positives"]], str(row["query_id"])
        elif schema == "msmarco":
            texts, selected = row["passages"]["passage_text"], row["passages"]["is_selected"]
            ids = [doc_id(text) for text in texts]
            documents.update(zip(ids, texts))
            positives = [i for i, chosen in zip(ids, selected) if chosen]
            query_id = str(row.get("query_id", number))
        elif schema == "pairs":  # sentence-transformers/natural-questions: {query, answer}
            positives = [doc_id(row["answer"])]
            documents[positives[0]] = row["answer"]
            query_id = str(number)
        elif schema == "mldr":
            for passage in row["positive_passages"] + row.get("negative_passages", []):
                documents[str(passage["docid"])] = passage["text"]
            positives = [str(passage["docid"]) for passage in row["positive_passages"]]
            query_id = str(row["query_id"])
        else:
            raise ValueError(f"unknown retrieval schema {schema!r}")
        if positives:  # MS MARCO lists queries none of whose passages answers them
            queries.append({"query_id": query_id, "query": row["query"], "positives": list(dict.fromkeys(positives))})
    return queries, documents


# --- the authors' evaluation sources: judgements, splits and the labelled pool ----------------

def qrels_judgements(rows: Iterable[dict]) -> dict[str, dict]:
    """BEIR qrels rows (`query-id`, `corpus-id`, `score`) -> {query id: {"positives", "labelled"}}
    in the order seen: every judged document is labelled (it joins the pool), one of score >= 1
    is relevant (EncodEval `msmarco()` / `nq()`)."""
    judged: dict[str, dict] = {}
    for row in rows:
        entry = judged.setdefault(str(row["query-id"]), {"positives": [], "labelled": []})
        document = str(row["corpus-id"])
        entry["labelled"].append(document)
        if row["score"] >= 1:
            entry["positives"].append(document)
    return judged


def mldr_judgements(rows: Iterable[dict]) -> dict[str, dict]:
    """MLDR rows (`query_id`, `query`, `positive_passages` [{docid, ...}]) -> the same, with the
    query text: only the positives are labelled (EncodEval `mldr_en()` adds no negatives)."""
    judged = {}
    for row in rows:
        positives = [str(passage["docid"]) for passage in row["positive_passages"]]
        judged[str(row["query_id"])] = {"positives": positives, "labelled": list(positives), "query": row["query"]}
    return judged


def split_queries(query_ids: Iterable[str], validation_share: float, seed: int = 42) -> tuple[list[str], list[str]]:
    """(validation, test) query ids: `validation_share` of the sorted ids drawn with `seed`, the
    rest test (EncodEval `nq()` draws half of NQ's test queries, unseeded; here seed 42)."""
    ordered = sorted(set(query_ids))
    chosen = set(random.Random(seed).sample(ordered, round(validation_share * len(ordered))))
    return [q for q in ordered if q in chosen], [q for q in ordered if q not in chosen]


def labelled_pool(judgements: Iterable[dict]) -> list[str]:
    """The document ids the given queries' judgements label, each once, in first-seen order:
    the pool every evaluation of the task ranks (the labelled documents, not the corpus)."""
    return list(dict.fromkeys(doc for judged in judgements for doc in judged["labelled"]))


def corpus_text(row: dict) -> str:
    """A BEIR corpus row's text as the authors embed it: "<title>. <text>" (NQ), the text alone
    where the title is empty (MS MARCO passages have none)."""
    return f"{row['title']}. {row['text']}" if row.get("title") else row["text"]
