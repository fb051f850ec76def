"""Content hashes that key a study's caches (Ray- and torch-free: the driver names cache folders
with them, the workers check what they read against them).

A cache folder is reused whenever its name matches, so its name must change whenever anything
that shapes its content changes. Names of things (a corpus path, a tokenizer's cache key) are not
enough: a file edited in place, a tokenizer retrained from other documents, keep their names.
These functions hash content; docs/security.md ("Caches and what keys them") lists each cache
and what its key covers.
"""
from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path

from sweeper.store import storage

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "vocab.json",
                   "merges.txt", "added_tokens.json", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model")
"""The files a Hugging Face tokenizer is saved as: what a tokenizer's content hash covers."""
TOKENIZER_FOLDER = "tokenizer"
"""Where a prepared corpus and an imported checkpoint keep their tokenizer (a study's own
checkpoint keeps its tokenizer files at its top, beside the weights)."""


def file_digest(path: str) -> str:
    """SHA-256 (hex) of a local file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


@lru_cache(maxsize=256)
def _local_digest(path: str, size: int, mtime_ns: int) -> str:
    return file_digest(path)


def content_digest(location: str) -> str:
    """SHA-256 of one file, local or in an object store. A local file is hashed once per process
    and content (its size and mtime are in the cache key: a driver names many folders from it)."""
    if storage.is_remote(location):
        return hashlib.sha256(storage.read_bytes(location)).hexdigest()
    stat = os.stat(location)
    return _local_digest(str(Path(location).resolve()), stat.st_size, stat.st_mtime_ns)


def digest_of(parts: dict[str, str]) -> str:
    """16 hex digits of SHA-256 over name -> digest pairs, in name order."""
    digest = hashlib.sha256()
    for name in sorted(parts):
        digest.update(f"{name}\0{parts[name]}\n".encode())
    return digest.hexdigest()[:16]


def tokenizer_digest(folder: str) -> str:
    """The content hash of the tokenizer saved in `folder` (local or object store): its tokenizer
    files, names and bytes, the same whichever folder holds a copy of them. FileNotFoundError
    when `folder` holds none."""
    names = sorted(name for name in storage.file_sizes(folder) if name in TOKENIZER_FILES)
    if not names:
        raise FileNotFoundError(f"{storage.display(folder)} holds no tokenizer files "
                                f"({', '.join(TOKENIZER_FILES[:3])}, ...)")
    return digest_of({name: content_digest(storage.join(folder, name)) for name in names})


def checkpoint_tokenizer_digest(checkpoint: str) -> str:
    """The content hash of the tokenizer a checkpoint folder carries: in its `tokenizer/`
    (an imported checkpoint) or at its top (the study's own)."""
    inner = storage.join(checkpoint, TOKENIZER_FOLDER)
    if any(name in TOKENIZER_FILES for name in storage.file_sizes(inner)):
        return tokenizer_digest(inner)
    return tokenizer_digest(checkpoint)
