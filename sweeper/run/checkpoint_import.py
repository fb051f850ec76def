"""Checkpoints from elsewhere, brought into the study before their trials run.

Each `finetuning.checkpoints` entry is copied once into the study (`cache/checkpoints/<name>-<key>`,
layout.external_checkpoint): config.json and weights at the top, the tokenizer in `tokenizer/`,
and the checkpoint marker last, so workers read it exactly as they read the study's own
checkpoints (`folders.local_copy`, one copy per node; no shared disk needed) and the task data
is tokenised from its `tokenizer/` as from a corpus's. A hub model is downloaded at the commit
the plan resolved (`ExternalCheckpoint.revision`): that commit, pinned in the folder's marker
and name, is what every trial of the study fine-tunes, whatever the hub holds later. A local
folder is hashed again after the copy: weights edited since the study was planned are refused,
never fine-tuned under the old key.
"""
from __future__ import annotations

import fnmatch
import os
import shutil
from pathlib import Path

import pyarrow.fs as pafs

from sweeper.plan.checkpoint_sources import (
    CONFIG_FILE,
    HUB_PREFIX,
    TOKENIZER_FILES,
    WEIGHT_SUFFIXES,
    ExternalCheckpoint,
    content_fingerprint,
    hub_repo,
    keyed_files,
    tokenizer_names,
    weight_names,
)
from sweeper.plan.source_tree import OutsideSource, open_inside, points_to
from sweeper.plan.study_plan import EvaluatedCheckpoint
from sweeper.store import folders, storage
from sweeper.store.cache_keys import TOKENIZER_FOLDER
from sweeper.store.layout import CHECKPOINT_MARKER, StudyLayout


class SourceChanged(RuntimeError):
    """A local source's weights differ from those the study was planned with."""


def copy_inside(folder: str, name: str, target: Path) -> None:
    """Copy the file `name` of the local `folder` to `target`, from the very file checked to lie
    inside the folder's tree (sweeper.plan.source_tree.open_inside: never through a link out)."""
    with open_inside(folder, name) as source, open(target, "wb") as copy:
        shutil.copyfileobj(source, copy, 1 << 20)


def fetch_files(source: str, names: list[str], target: Path, revision: str | None = None) -> None:
    """Copy the named files (patterns for a hub model) of a local folder, an object-store prefix
    or a hub model (at `revision`) into `target`. A local file or a hub snapshot's file that
    resolves outside its tree (the snapshot's own blobs/ for a hub model) is refused
    (OutsideSource), never followed."""
    target.mkdir(parents=True, exist_ok=True)
    if source.startswith(HUB_PREFIX):
        from huggingface_hub import snapshot_download

        snapshot = snapshot_download(hub_repo(source), revision=revision, allow_patterns=names)
        for name in sorted(os.listdir(snapshot)):
            if any(fnmatch.fnmatchcase(name, pattern) for pattern in names):
                copy_inside(snapshot, name, target / name)
        return
    for name in names:
        if storage.is_remote(source):
            fs, path = storage.filesystem(storage.join(source, name))
            pafs.copy_files(path, str(target / name), source_filesystem=fs,
                            destination_filesystem=pafs.LocalFileSystem())
        else:
            copy_inside(source, name, target / name)


def only_plain_files(tmp: Path) -> None:
    """The study's side of the rule: the folder about to be published (and uploaded, in an object
    store) holds regular files and folders only, no link (OutsideSource otherwise)."""
    for root, folders_here, files in os.walk(tmp):
        for name in folders_here + files:
            path = os.path.join(root, name)
            if os.path.islink(path) or not (os.path.isdir(path) or os.path.isfile(path)):
                raise OutsideSource(f"{path} is not a plain file the import wrote{points_to(path)}: "
                                    "nothing is published")


def source_names(source: str, tokenizer_only: bool = False) -> list[str]:
    """The files to bring from a source: config.json, weights and tokenizer (or the tokenizer only)."""
    if source.startswith(HUB_PREFIX):  # the hub filters by pattern: ask for every kind
        tokenizer = list(TOKENIZER_FILES)
        return tokenizer if tokenizer_only else [CONFIG_FILE, *(f"*{suffix}" for suffix in WEIGHT_SUFFIXES), *tokenizer]
    files = storage.file_sizes(source)
    tokenizer = tokenizer_names(files)
    return tokenizer if tokenizer_only else [CONFIG_FILE, *weight_names(files), *tokenizer]


def build_checkpoint_folder(external: ExternalCheckpoint, tmp: Path) -> None:
    """config.json and weights into `tmp`, the tokenizer into `tmp/tokenizer`, then the marker;
    `tmp` removed when that fails (nothing half-copied stays in the study)."""
    try:
        copy_checkpoint(external, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def copy_checkpoint(external: ExternalCheckpoint, tmp: Path) -> None:
    names = source_names(external.source)
    fetch_files(external.source, names, tmp, external.revision)
    if not external.source.startswith(HUB_PREFIX) and not storage.is_remote(external.source):
        planned = external.identity["weights"]
        copied = content_fingerprint(str(tmp), keyed_files(storage.file_sizes(str(tmp)),
                                                           external.tokenizer_source == external.source))
        if copied != planned:
            raise SourceChanged(f"checkpoint {external.name}: the files of {external.source} changed after the study "
                                "was planned (their hash differs); plan again (`sweeper plan`) and rerun")
    tokenizer = tmp / TOKENIZER_FOLDER
    if external.tokenizer_source == external.source:
        tokenizer.mkdir()
        for name in TOKENIZER_FILES:
            if (tmp / name).exists():
                (tmp / name).rename(tokenizer / name)
    else:
        # A hub tokenizer at the commit the plan resolved and keyed (not the branch's newest).
        revision = external.identity.get("tokenizer", {}).get("revision")
        fetch_files(external.tokenizer_source, source_names(external.tokenizer_source, tokenizer_only=True), tokenizer,
                    revision)
    only_plain_files(tmp)
    storage.write_json(str(tmp / CHECKPOINT_MARKER), {
        "external": external.name, "source": storage.redact(external.source), "revision": external.revision,
        "key": external.key, "files": {p.relative_to(tmp).as_posix(): p.stat().st_size
                                       for p in tmp.rglob("*") if p.is_file()}})


def import_external_checkpoints(checkpoints: list[EvaluatedCheckpoint], layout: StudyLayout,
                                failed: dict[str, str] | None = None) -> dict[str, str]:
    """Bring each external checkpoint among `checkpoints` into the study (once ever); returns
    its checkpoint id -> folder. With `failed` given, a checkpoint that cannot be imported (its
    files changed since the plan, a file out of its tree, a download refused) is left out and
    its checkpoint id -> one line of reason put there, instead of raising."""
    imported = {}
    for checkpoint in checkpoints:
        external = checkpoint.external
        if external is None or checkpoint.checkpoint_id in imported or checkpoint.checkpoint_id in (failed or {}):
            continue
        location = layout.external_checkpoint(external.name, external.key)
        if not storage.exists(storage.join(location, CHECKPOINT_MARKER)):
            where = f"{external.source}" + (f" at {external.revision[:12]}" if external.revision else "")
            print(f"[finetune] checkpoint {external.name}: importing {storage.redact(where)} "
                  f"({external.model_type or 'unknown architecture'})", flush=True)
            try:
                folders.build_once(location, CHECKPOINT_MARKER, lambda tmp, e=external: build_checkpoint_folder(e, tmp))
            except Exception as error:  # any refusal or failure of the copy: its trials fail, the study goes on
                if failed is None:
                    raise
                failed[checkpoint.checkpoint_id] = reason = one_line(error)
                print(f"[finetune] checkpoint {external.name}: not imported: {reason}", flush=True)
                continue
        imported[checkpoint.checkpoint_id] = location
    return imported


def one_line(error: BaseException) -> str:
    """An error as one line of reason: its type and its message's first line (credentials left out)."""
    text = str(error).strip().splitlines()[0][:500] if str(error).strip() else ""
    return storage.redact(f"{type(error).__name__}: {text}" if text else type(error).__name__)
