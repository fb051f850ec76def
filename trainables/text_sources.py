"""Where text comes from: the shipped WordNet-derived files, local files, or the Hugging Face hub.

Built-in names resolve to files in `trainables/data_files/` (see its README for source and
licence); a path to .jsonl/.json/.parquet/.txt reads locally; anything else is a hub dataset id
(`name` or `name:config`), which needs network access a cluster has and these machines do not.
"""
from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

DATA_DIR = Path(__file__).parent / "data_files"
BUILTIN_FILES = {
    "wordnet": DATA_DIR / "wordnet" / "corpus.jsonl.gz",
    "wordnet-supersense-cls": DATA_DIR / "wordnet" / "supersense_cls.jsonl.gz",
    "wordnet-supersense-tag": DATA_DIR / "wordnet" / "supersense_tag.jsonl.gz",
}


def read_jsonl(path: Path) -> Iterator[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def iter_rows(source: str, split: str | None = None) -> Iterator[dict]:
    """Rows of a built-in file, a local file, or a hub dataset split."""
    path = BUILTIN_FILES.get(source) or Path(source)
    if path.exists():
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            yield from pq.read_table(path).to_pylist()
        elif path.suffix == ".txt":
            yield from ({"text": line.strip()} for line in path.read_text().splitlines() if line.strip())
        else:
            yield from read_jsonl(path)
        return
    import datasets

    name, _, config = source.partition(":")
    yield from datasets.load_dataset(name, config or None, split=split or "train", streaming=True)


def iter_corpus_texts(source: str, text_column: str, max_documents: int | None) -> Iterator[str]:
    for index, row in enumerate(iter_rows(source)):
        if max_documents is not None and index >= max_documents:
            return
        yield row[text_column]
