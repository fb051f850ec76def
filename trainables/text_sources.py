"""Where text comes from: the shipped WordNet-derived files, local files, or the Hugging Face hub.

Built-in names resolve to files in `trainables/data_files/` (see its README for source and
licence); a path to .jsonl/.json/.parquet/.txt reads locally, and a local directory holds one such
file per split (`train.jsonl`, `validation.parquet`, ...): a hub data set copied to a disk keeps its
schema and its task mapping. Anything else is a hub dataset id (`name` or `name:config`), which
needs network access a cluster has and these machines do not.
"""
from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

from sweeper.run.corpus_source import SHIPPED_FILES

DATA_DIR = Path(__file__).parent / "data_files"
BUILTIN_FILES = {name: DATA_DIR.joinpath(*parts) for name, parts in SHIPPED_FILES.items()}
SPLIT_FILE_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".parquet")


def read_jsonl(path: Path) -> Iterator[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def iter_rows(source: str, split: str | None = None, data_files: dict | None = None,
              revision: str | None = None) -> Iterator[dict]:
    """Rows of a built-in file, a local file or split directory, or a hub dataset split
    (`data_files`: split -> files of the hub repository, for sources without a runnable builder;
    `revision`: the hub commit to read, None for the latest)."""
    path = BUILTIN_FILES.get(source) or Path(source)
    if path.is_dir():
        split = split or "train"
        files = [path / f"{split}{suffix}" for suffix in SPLIT_FILE_SUFFIXES if (path / f"{split}{suffix}").exists()]
        if not files:
            raise FileNotFoundError(f"{path} has no file for split {split!r} ({split}.jsonl/.json/.parquet)")
        path = files[0]
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
    split = split or "train"
    if data_files:
        files = data_files[split]
        at = f"@{revision}" if revision else ""
        files = [f"hf://datasets/{name}{at}/{f}" for f in (files if isinstance(files, list) else [files])]
        yield from datasets.load_dataset("json", data_files={split: files}, split=split, streaming=True)
        return
    yield from datasets.load_dataset(name, config or None, split=split, streaming=True, revision=revision)


def iter_corpus_texts(source: str, text_column: str, max_documents: int | None) -> Iterator[str]:
    for index, row in enumerate(iter_rows(source)):
        if max_documents is not None and index >= max_documents:
            return
        yield row[text_column]
