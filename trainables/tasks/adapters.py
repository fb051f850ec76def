"""Source schemas -> the records a family encodes (QA and retrieval; classification maps columns).

Each hub data set keeps its own layout; an adapter reads one layout and yields the family's
normalised records, so the same encoder serves SQuAD and ReCoRD, or MS MARCO, NQ and MLDR.
- QA record: {"id", "question", "context", "answers": [text], "starts": [char offset]}; no
  answers = unanswerable (SQuAD v2).
- Retrieval split: queries [{"query_id", "query", "positives": [doc id]}] and the labelled pool
  {doc id: text} (every passage the split's rows list, relevant or not).
"""
from __future__ import annotations

import hashlib


def qa_record(row: dict, schema: str) -> dict:
    if schema == "squad":
        answers = row["answers"]
        return {"id": str(row["id"]), "question": row["question"], "context": row["context"],
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
        if schema == "msmarco":
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
