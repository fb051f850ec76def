"""Whole folders at a study location: published with their marker last, copied once per node.

A folder (a checkpoint, tokenised task data, a corpus) is complete when its *marker* file is
there: locally it is built under a temporary name, fsynced and renamed into place; in an object
store it is uploaded file by file with the marker last (`publish_tree`, `build_once`), so
"marker present" means "folder complete", and readers look for the marker first.

Code that needs files on a disk (Hugging Face loaders, memory-mapped tokens) asks for
`local_copy(location, marker)`: the location itself when local, else a node-local copy in the
cache folder (`$SWEEPER_CACHE`, default `~/.cache/sweeper`), downloaded once per node and keyed
by the marker's content, so a folder rewritten with other content is downloaded again.
Files one at a time, and locations themselves, are sweeper.store.storage's.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from sweeper.store.permanent_errors import PermanentStorageError, location_line
from sweeper.store.storage import bucket_and_path, display, exists, filesystem, is_remote, join, read_bytes, sync_path


@contextlib.contextmanager
def new_folder(parent: Path | None, prefix: str, target: str):
    """A new empty folder in `parent` (None: the system's temporary folder), where the folder
    `target` is built before the block moves it into place. Whatever is left of it at the end is
    removed: nothing of a failed build stays to take the space a rerun needs, or to be trusted
    (its name is not `target`'s). A failure no retry mends (a full disk) is raised as a
    `PermanentStorageError` naming `target`. Made with the process's umask, as the folder it
    becomes (mkdtemp's would be 0700: a study shared by its users' nodes reads it)."""
    tmp = Path(parent or tempfile.gettempdir()) / f"{prefix}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except Exception as error:
        shutil.rmtree(tmp, ignore_errors=True)  # first: what the failed build wrote is space again
        if (line := location_line(error, str(target))) is not None:
            raise PermanentStorageError(line) from error
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def built_in_temp(location: str) -> str:
    """How a storage error names a folder built in this node's temporary folder before it goes to
    `location` (either may be the one that is full)."""
    return f"{display(location)} (built in this node's {tempfile.gettempdir()})"


def sync_tree(folder: Path) -> None:
    """fsync every file below `folder`, then every folder, deepest first, `folder` last."""
    folders = []
    for path in Path(folder).rglob("*"):
        if path.is_dir():
            folders.append(path)
        else:
            sync_path(path)
    for path in sorted(folders, key=lambda f: len(f.parts), reverse=True):
        sync_path(path)
    sync_path(folder)


def publish_tree(local_dir: Path, location: str, marker: str) -> None:
    """Make the finished folder `local_dir` appear at `location`, marker last, and drop
    `local_dir`. Local: one rename (`local_dir` must be on the same disk), replacing a folder
    left there before (same step of the same run: same content), each file and folder fsynced
    before it and the parent folder after it. Remote: an upload, file by file."""
    if not is_remote(location):
        target = Path(location)
        sync_tree(Path(local_dir))  # the content on disk before the name
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        Path(local_dir).rename(target)
        sync_path(target.parent)
        if Path(local_dir).parent != target.parent:
            sync_path(Path(local_dir).parent)
        return
    fs, path = filesystem(location)
    files = [f for f in Path(local_dir).rglob("*") if f.is_file()]
    for file in sorted(files, key=lambda f: f.name == marker):  # the marker last
        pafs.copy_files(str(file), f"{path}/{file.relative_to(local_dir).as_posix()}",
                        source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
    shutil.rmtree(local_dir, ignore_errors=True)


def copy_tree_from(location: str, local_dir: Path, only: str | None = None, skip: tuple[str, ...] = ()) -> None:
    """Download the folder `location` (or its sub-folder `only`) into `local_dir`, less the
    files named in `skip`."""
    fs, path = filesystem(join(location, only) if only else location)
    for info in fs.get_file_info(pafs.FileSelector(path, recursive=True)):
        if info.type != pafs.FileType.File or info.base_name in skip:
            continue
        target = local_dir / info.path[len(path.rstrip("/")) + 1:]
        target.parent.mkdir(parents=True, exist_ok=True)
        pafs.copy_files(info.path, str(target), source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())


def cache_root() -> Path:
    return Path(os.environ.get("SWEEPER_CACHE") or Path.home() / ".cache" / "sweeper")


def in_cache(kind: str, location: str) -> Path:
    """This node's folder of kind `kind` ("scratch", "copies") for a remote location."""
    bucket, path = bucket_and_path(location)
    return cache_root() / kind / urlsplit(location).scheme / bucket / path.strip("/")


def scratch_dir(location: str, purpose: str) -> Path:
    """A node-local working folder tied to a location: the folder itself when local (so
    nothing changes there), else one in the cache (W&B's files, figures before upload)."""
    path = in_cache("scratch", location) if is_remote(location) else Path(location)
    path = path / purpose if purpose else path
    path.mkdir(parents=True, exist_ok=True)
    return path


def local_copy(location: str, marker: str, only: str | None = None, skip: tuple[str, ...] = ()) -> Path:
    """A folder on this node's disk with the content of the complete folder `location`.
    Local: `location` itself (its writers published it whole). Remote: a copy in the cache,
    made once per node and per content of its marker (FileNotFoundError when there is none
    yet); `only` copies just that sub-folder (a corpus's tokenizer, not its token stream), and
    files named in `skip` stay behind (a checkpoint's optimizer state, when only its weights
    are read)."""
    if not is_remote(location):
        return Path(location, only) if only else Path(location)
    stamp = hashlib.sha256(read_bytes(join(location, marker))).hexdigest()[:16]
    base = in_cache("copies", location)
    target = base / "-".join([stamp, *([only] if only else []), *(f"no-{name}" for name in sorted(skip))])
    if not target.exists():
        base.mkdir(parents=True, exist_ok=True)
        where = f"{target} (this node's cache: $SWEEPER_CACHE)"
        with new_folder(base, f".{target.name}.tmp-", where) as tmp:
            copy_tree_from(location, tmp, only, skip)
            try:
                tmp.rename(target)  # atomic: the entry is there whole or not at all
            except OSError:
                if not target.exists():  # not a race lost to another process (its copy is as good)
                    raise
    return target


def build_once(location: str, marker: str, build: Callable[[Path], None]) -> None:
    """Run `build(folder)` and publish the folder at `location` unless `location/marker`
    exists. Several processes may race: each builds from the same inputs, the folder that
    lands is complete, and a local loser drops its copy."""
    if exists(join(location, marker)):
        return
    if is_remote(location):
        with new_folder(None, "sweeper-build-", built_in_temp(location)) as tmp:
            build(tmp)
            publish_tree(tmp, location, marker)
        return
    out = Path(location)
    with new_folder(out.parent, f"{out.name}.tmp-", location) as tmp:
        build(tmp)
        sync_tree(tmp)
        try:
            tmp.rename(out)
        except OSError:
            if not out.exists():  # not a race lost to another process, whose folder is as good
                raise
            return
    sync_path(out.parent)


def move_tree(source: str, target: str) -> None:
    """Rename a folder (local) or copy it then delete it (object store: no rename)."""
    if not is_remote(source):
        Path(source).rename(target)
        sync_path(Path(target).parent)
        if Path(source).parent != Path(target).parent:
            sync_path(Path(source).parent)
        return
    fs, source_path = filesystem(source)
    _, target_path = filesystem(target)
    pafs.copy_files(source_path, target_path, source_filesystem=fs, destination_filesystem=fs)
    fs.delete_dir(source_path)
