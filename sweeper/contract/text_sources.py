"""Where text comes from, for the corpus and for the tasks (torch- and Ray-free: the driver checks a
source with it before anything starts, the corpus preparation's workers and the task preparation
read with it).

Corpus text: a source string resolved to an ordered list of files, and a streaming reader of one
file's documents (`resolve_files`, `read_documents`). Task rows (`iter_rows`): a built-in file, a
local file or a folder with one file per split (`train.jsonl`, `validation.parquet`, ...: a hub
data set copied to a disk keeps its schema and its task mapping), or a hub dataset id (`name` or
`name:config`), which needs network access a cluster has and these machines do not.

A source is one of:
- `wordnet`: the shipped corpus (trainables/data_files/wordnet);
- a local file (.jsonl, .jsonl.gz, .json (JSON lines), .parquet, .txt, .txt.gz) or a folder of
  them, read recursively in sorted order of their paths. A folder holding a `train.<suffix>`
  file at its top is a data set copied from the hub (one file per split): only that file is read;
- an object-store prefix or file (`s3://bucket/prefix`, `gs://...`), through sweeper.store.storage's
  pyarrow filesystems;
- `hf://datasets/<owner>/<name>/<path>`: parquet files on the Hugging Face hub (needs network),
  e.g. `hf://datasets/HuggingFaceFW/fineweb-edu/sample/100BT`;
- anything else that looks like a hub id (`owner/name` or `owner/name:config`): that data set's
  parquet export (`refs/convert/parquet`, split `train`) on the hub.

Documents are the rows in file order; blank lines of JSON-lines and text files are not rows (as
before streaming), and a row's position is its index among the rows of its file, which is what
the corpus index records and what a resumed preparation skips to.
"""
from __future__ import annotations

import importlib.util
import gzip
import io
import json
import re
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path, PurePosixPath
from urllib.parse import quote, unquote

import pyarrow.fs as pafs

from sweeper.store import storage
from sweeper.store.cache_keys import content_digest

SUFFIX_KINDS = {".jsonl": "jsonl", ".jsonl.gz": "jsonl", ".json": "jsonl", ".json.gz": "jsonl",
                ".parquet": "parquet", ".txt": "txt", ".txt.gz": "txt"}
"""File name endings the corpus reader understands, and how it reads each."""
SHIPPED_FILES = {
    "wordnet": ("wordnet", "corpus.jsonl.gz"),
    "wordnet-supersense-cls": ("wordnet", "supersense_cls.jsonl.gz"),
    "wordnet-supersense-tag": ("wordnet", "supersense_tag.jsonl.gz"),
    "wordnet-supersense-qa": ("wordnet", "supersense_qa.jsonl.gz"),
    "wordnet-usage-retrieval": ("wordnet", "usage_retrieval.jsonl.gz"),
    "wordnet-definition-retrieval": ("wordnet", "definition_retrieval.jsonl.gz"),
}
"""Built-in source names (the corpus and the tasks' data) -> file under trainables/data_files
(found without importing trainables, which imports torch; sweeper.contract.text_sources reads this map)."""
BUILTIN_CORPORA = ("wordnet",)
"""Built-in names that are corpora."""
HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+(:[\w.-]+)?$")


class SourceError(ValueError):
    """A corpus source that cannot be read: missing, of an unknown type, or without the text column."""


def kind_of(location: str) -> str | None:
    """jsonl / parquet / txt for a data file's name, else None."""
    lowered = storage.name(location).lower()
    for suffix in sorted(SUFFIX_KINDS, key=len, reverse=True):
        if lowered.endswith(suffix):
            return SUFFIX_KINDS[suffix]
    return None


def builtin_path(name: str) -> Path:
    spec = importlib.util.find_spec("trainables")
    return Path(list(spec.submodule_search_locations)[0], "data_files", *SHIPPED_FILES[name])


def hub_filesystem() -> pafs.FileSystem:
    from huggingface_hub import HfFileSystem

    return pafs.PyFileSystem(pafs.FSSpecHandler(HfFileSystem()))


def filesystem_of(location: str) -> tuple[pafs.FileSystem, str]:
    """(pyarrow filesystem, path on it) of a file or folder of a source."""
    if location.startswith("hf://"):
        return hub_filesystem(), location.removeprefix("hf://")
    return storage.filesystem(location)


def looks_like_path(source: str) -> bool:
    return source.startswith(("/", ".", "~")) or kind_of(source) is not None or not HUB_ID.match(source)


def resolve_files(source: str) -> list[str]:
    """The source's data files, in stream order. Raises SourceError naming the source."""
    if source in BUILTIN_CORPORA:
        return [str(builtin_path(source))]
    if source.startswith("file://"):
        source = storage.normalize(source)
    if source.startswith("hf://") or storage.is_remote(source):
        return remote_files(source)
    path = Path(source).expanduser()
    if not path.exists():
        if looks_like_path(source):
            raise SourceError(f"{source!r} does not exist")
        name, _, config = source.partition(":")
        revision = quote("refs/convert/parquet", safe="")
        try:
            return remote_files(f"hf://datasets/{name}@{revision}/{config or 'default'}/train")
        except SourceError as error:
            raise SourceError(f"{source!r} is not a local file or folder, nor a hub data set here ({error})") from None
    if path.is_file():
        if kind_of(str(path)) is None:
            raise SourceError(f"{source!r}: unknown file type (known: {', '.join(SUFFIX_KINDS)})")
        return [str(path.resolve())]
    split_files = sorted(f for f in path.iterdir() if f.is_file() and f.name.startswith("train.") and kind_of(f.name))
    if split_files:
        return [str(split_files[0].resolve())]
    files = sorted(
        (f for f in path.rglob("*") if f.is_file() and kind_of(f.name)), key=lambda f: f.relative_to(path).as_posix()
    )
    if not files:
        raise SourceError(f"{source!r} holds no data files ({', '.join(SUFFIX_KINDS)})")
    return [str(f.resolve()) for f in files]


def remote_files(source: str) -> list[str]:
    try:
        fs, path = filesystem_of(source)
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise SourceError(f"{storage.display(source)!r} does not exist")
        if info.type == pafs.FileType.File:
            if kind_of(source) is None:
                raise SourceError(f"{storage.display(source)!r}: unknown file type (known: {', '.join(SUFFIX_KINDS)})")
            return [source]
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=True))
    except SourceError:
        raise
    except (OSError, ValueError, ImportError) as error:
        raise SourceError(
            f"cannot read {storage.display(source)!r}: {storage.redact(str(error).splitlines()[0])}"
        ) from None
    base = path.rstrip("/")
    relative = sorted(info.path[len(base) + 1:] for info in infos
                      if info.type == pafs.FileType.File and kind_of(info.path))
    if not relative:
        raise SourceError(f"{storage.display(source)!r} holds no data files ({', '.join(SUFFIX_KINDS)})")
    return [f"{source.rstrip('/')}/{PurePosixPath(rel).as_posix()}" for rel in relative]


def read_documents(location: str, text_column: str, skip_rows: int = 0) -> Iterator[str]:
    """The texts of one data file's rows from row `skip_rows` on, streamed (memory: one parquet
    batch or one line). Skipped rows are counted, not parsed."""
    kind = kind_of(location)
    fs, path = filesystem_of(location)
    if kind == "parquet":
        yield from read_parquet(fs, path, location, text_column, skip_rows)
        return
    with fs.open_input_stream(path, compression="detect") as raw:
        lines = (line for line in io.TextIOWrapper(raw, encoding="utf-8") if line.strip())
        for index, line in enumerate(lines):
            if index < skip_rows:
                continue
            if kind == "txt":
                if text_column != "text":
                    raise SourceError(f"{location}: a text file has one column, 'text', not {text_column!r}")
                yield line.strip()
                continue
            row = json.loads(line)
            if text_column not in row:
                raise SourceError(f"{location}: row {index} has no column {text_column!r} "
                                  f"(columns: {', '.join(sorted(row))[:200]})")
            yield row[text_column]


def read_parquet(fs, path: str, location: str, text_column: str, skip_rows: int) -> Iterator[str]:
    import pyarrow.parquet as pq

    with fs.open_input_file(path) as handle:
        parquet = pq.ParquetFile(handle)
        if text_column not in parquet.schema_arrow.names:
            raise SourceError(f"{location}: no column {text_column!r} (columns: "
                              f"{', '.join(parquet.schema_arrow.names)[:200]})")
        first = 0
        for group in range(parquet.num_row_groups):
            rows = parquet.metadata.row_group(group).num_rows
            if first + rows <= skip_rows:  # whole row group before the resume point: not read
                first += rows
                continue
            for batch in parquet.iter_batches(batch_size=1024, row_groups=[group], columns=[text_column]):
                texts = batch.column(0).to_pylist()
                start = max(0, skip_rows - first)
                first += len(texts)
                yield from texts[start:]


def hub_dataset_revision(repo: str, revision: str | None = None) -> str | None:
    """The commit a hub data set's `revision` (default main) names now, or None where the hub
    cannot be reached from here (offline: the data set's name alone then keys its caches)."""
    return _hub_dataset_revision(repo, revision)


@lru_cache(maxsize=64)
def _hub_dataset_revision(repo: str, revision: str | None) -> str | None:
    try:
        from huggingface_hub import HfApi

        return HfApi().dataset_info(repo, revision=revision, timeout=20).sha
    except Exception:  # offline, unknown repository, refused token: the key says "unresolved"
        return None


def hub_parts(source: str) -> tuple[str, str | None]:
    """(owner/name, revision or None) of a hub source: `hf://datasets/owner/name[@rev]/path`, or
    `owner/name[:config]` (read from its parquet export)."""
    if source.startswith("hf://"):
        owner, name = source.removeprefix("hf://datasets/").split("/")[:2]
        name, _, revision = name.partition("@")
        return f"{owner}/{name}", unquote(revision) or None
    return source.partition(":")[0], "refs/convert/parquet"


def source_identity(source: str) -> dict:
    """What a corpus's key hashes of its source's content (sweeper.run.corpora.corpus_dir): a
    shipped file's SHA-256; a hub data set's commit; the files of a local or object-store source
    with their sizes and modification times (hashing a corpus of billions of tokens on every run
    would cost more than it protects: a same-size edit that keeps its mtime goes unseen)."""
    if source in SHIPPED_FILES:
        return {"sha256": content_digest(str(builtin_path(source)))}
    local = storage.normalize(source) if source.startswith("file://") else source
    on_hub = not (storage.is_remote(local) or Path(local).expanduser().exists() or looks_like_path(source))
    if source.startswith("hf://") or on_hub:
        repo, revision = hub_parts(source)
        return {"hub": repo, "revision": hub_dataset_revision(repo, revision)}
    files = resolve_files(source)
    if storage.is_remote(files[0]):
        fs = storage.filesystem(files[0])[0]
        infos = fs.get_file_info([storage.filesystem(file)[1] for file in files])
    else:
        infos = pafs.LocalFileSystem().get_file_info(files)
    return {"files": {storage.strip_credentials(file): [info.size, info.mtime_ns] for file, info in zip(files, infos)}}


def source_problem(source: str, text_column: str) -> str | None:
    """Why the corpus cannot be read (missing, unknown type, no such column), or None: checked on
    the driver before anything starts. Reads the first row of the first file only."""
    try:
        files = resolve_files(source)
        next(read_documents(files[0], text_column), None)
    except SourceError as error:
        return str(error)
    except (OSError, ValueError, UnicodeDecodeError) as error:
        return f"cannot read {storage.display(source)!r}: {storage.redact(str(error).splitlines()[0])}"
    return None


# --- task rows ---------------------------------------------------------------------------

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
    path = builtin_path(source) if source in SHIPPED_FILES else Path(source)
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
