"""Where a study lives: a local path (a disk, or a mount every node sees) or an object-store
URI (`s3://bucket/prefix`, `gs://bucket/prefix`), through one set of functions used by the
driver and the workers alike (no torch here).

A location is a string: an absolute path, or a URI that `pyarrow.fs.FileSystem.from_uri`
understands, query included (`s3://bucket/x?endpoint_override=host:port&scheme=http` for an
S3-compatible server). `file://` URIs are plain paths.

What each kind guarantees, and how the study relies on it:
- Local: a file or folder is written under a temporary name and renamed into place, so a reader
  sees all of it or nothing (as before this module existed).
- Object store: there is no rename, but one object is written whole by one upload (S3 and GCS
  never store half an object; a small file rewritten while pyarrow reads it can come back cut
  short, which `read_json` reads again). A folder (checkpoint, tokenised data, corpus) is uploaded file by
  file with its *marker* last, so "marker present" means "folder complete", and readers look
  for the marker first.
- Code that needs files on a disk (Hugging Face loaders, memory-mapped tokens) asks for
  `local_copy(location, marker)`: the location itself when local, else a node-local copy in the
  cache folder (`$SWEEPER_CACHE`, default `~/.cache/sweeper`), downloaded once per node and keyed
  by the marker's content, so a folder rewritten with other content is downloaded again.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit, urlunsplit

import pyarrow.fs as pafs

OBJECT_STORE_SCHEMES = ("s3", "gs", "gcs")


def normalize(location: str | Path) -> str:
    """A location as the study keeps it: an absolute path, or the URI without credentials. The
    driver calls this on `--storage` / the spec's `storage:` first: an s3:// URI's credentials go
    into its environment there (`use_credentials`), so it and a local Ray it starts reach the
    bucket, and no location the study passes on carries them."""
    text = str(location)
    if text.startswith("file://"):
        return str(Path(urlsplit(text).path).resolve())
    if is_remote(text):
        return use_credentials(text)
    return str(Path(text).resolve())


def is_remote(location: str | Path) -> bool:
    return "://" in str(location) and not str(location).startswith("file://")


def scheme_error(location: str) -> str | None:
    """Why `location` cannot hold a study, or None (used by the spec's validation)."""
    if not is_remote(location):
        return None
    scheme = urlsplit(location).scheme
    if scheme not in OBJECT_STORE_SCHEMES:
        return f"unsupported storage scheme {scheme!r}: use a path, or s3://, gs:// (or file://)"
    if not urlsplit(location).netloc:
        return f"{redact(location)!r} names no bucket"
    return None


def reach_error(location: str) -> str | None:
    """Why the study's bucket cannot be used from here, or None (always None for a path): a
    missing bucket or refused credentials say so before any Ray process starts."""
    if not is_remote(location):
        return None
    try:
        fs, path = filesystem(location)
        bucket = path.split("/", 1)[0]
        if fs.get_file_info(bucket).type == pafs.FileType.NotFound:
            return f"bucket {bucket!r} does not exist (create it first, or check the endpoint)"
    except (OSError, ValueError) as error:
        return f"cannot reach {display(location)}: {redact(str(error).splitlines()[0])}"
    return None


def bucket_and_path(location: str) -> tuple[str, str]:
    """(bucket, path inside it) of a URI, credentials left out."""
    parts = urlsplit(location)
    return parts.netloc.rsplit("@", 1)[-1], parts.path


def display(location: str) -> str:
    """The location with any credentials (`s3://key:secret@bucket`) and its query hidden, for printing."""
    if not is_remote(location):
        return location
    return redact(urlunsplit((urlsplit(location).scheme, *bucket_and_path(location), "", "")))


# Credentials: `s3://KEY:SECRET@bucket/...` is accepted, but the key and secret never leave the
# driver. Whatever crosses to a worker (PretrainConfig, TrialConfig, a shard), goes to W&B or is
# written into the study (the spec copy, rows, failure notes) holds `strip_credentials(location)`
# or `redact(text)`; the driver reaches the bucket through its environment (`use_credentials`),
# the workers of a cluster through their own provider chain (instance role, AWS_* variables).
_URI_CREDENTIALS = re.compile(
    r"""\b((?:s3|gs|gcs)://)"""            # an object-store URI, then its user info:
    r"""(?:[^\s/?#'"<>]*@"""                # `key:secret@` (a secret may hold `@`: up to the last one)
    r"""|[^\s/?#@:'"<>]+:[^\s@'"<>]*@)""")  # or `key:se/cret@` (a `/` a writer forgot to escape)


def redact(text: str) -> str:
    """`text` with the `user:password@` of every s3:// and gs:// URI in it removed (tracebacks,
    log lines, a spec's text): `s3://KEY:SECRET@bucket/x` -> `s3://bucket/x`."""
    return _URI_CREDENTIALS.sub(r"\1", text)


def strip_credentials(location: str | None) -> str | None:
    """The location without its `key:secret@` (query kept: `s3://bucket/x?endpoint_override=...`):
    what may leave the driver. A path (or None) is returned unchanged."""
    if location is None or not is_remote(location):
        return location
    scheme, netloc, path, query, fragment = urlsplit(str(location))
    return redact(urlunsplit((scheme, netloc.rsplit("@", 1)[-1], path, query, fragment)))


def use_credentials(location: str) -> str:
    """Put the `key:secret@` of an s3:// location into this process's environment, where pyarrow's
    S3 provider chain reads them (and a local Ray started from here inherits them), and return the
    location without them. A location without credentials changes nothing."""
    parts = urlsplit(str(location))
    if parts.scheme == "s3" and "@" in parts.netloc:
        key, _, secret = parts.netloc.rsplit("@", 1)[0].partition(":")
        wanted = {"AWS_ACCESS_KEY_ID": unquote(key), "AWS_SECRET_ACCESS_KEY": unquote(secret)}
        if any(os.environ.get(name) != value for name, value in wanted.items()):
            os.environ.update(wanted)
            os.environ.pop("AWS_SESSION_TOKEN", None)  # it belonged to other credentials
    return strip_credentials(location)


def join(location: str, *parts: str) -> str:
    """`location/part/...`; a URI keeps its query (endpoint, scheme) after the new path."""
    if not is_remote(location):
        return str(Path(location).joinpath(*parts))
    scheme, netloc, path, query, fragment = urlsplit(location)
    path = "/".join([path.rstrip("/"), *(p.strip("/") for p in parts)])
    return urlunsplit((scheme, netloc, path, query, fragment))


def name(location: str) -> str:
    """The last path component (a folder's or file's name)."""
    return Path(urlsplit(location).path if is_remote(location) else location).name


def parent(location: str) -> str:
    if not is_remote(location):
        return str(Path(location).parent)
    scheme, netloc, path, query, fragment = urlsplit(location)
    return urlunsplit((scheme, netloc, path.rstrip("/").rsplit("/", 1)[0], query, fragment))


@lru_cache(maxsize=64)
def _filesystem_of_root(root: str) -> pafs.FileSystem:
    return pafs.FileSystem.from_uri(root)[0]


def filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """(pyarrow filesystem, path on it): what pyarrow, Ray Train and Tune take for a location.
    One filesystem object per bucket and query (an S3 client is costly to create). The object
    holds no credentials (they are in the environment, `use_credentials`): Ray pickles it into
    Tune's state and the trainables' payloads, and pyarrow pickles explicit keys with it."""
    if not is_remote(location):
        return pafs.LocalFileSystem(), str(location)
    scheme, netloc, _, query, _ = urlsplit(use_credentials(location))
    filesystem_ = _filesystem_of_root(urlunsplit((scheme, netloc, "", query, "")))
    return filesystem_, "".join(bucket_and_path(location)).rstrip("/")


def exists(location: str) -> bool:
    if not is_remote(location):
        return os.path.exists(location)
    fs, path = filesystem(location)
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def read_bytes(location: str) -> bytes:
    if not is_remote(location):
        return Path(location).read_bytes()
    fs, path = filesystem(location)
    with fs.open_input_stream(path) as stream:
        return stream.read()


def read_text(location: str) -> str:
    return read_bytes(location).decode()


def read_json(location: str, default=None, patience_s: float = 5.0,
              damaged: Callable[[str, str], None] | None = None):
    """The JSON object at `location`, or `default` when there is none.

    pyarrow reads an object by asking its size, then its bytes: when a writer replaces a small
    file (progress.json, live.json) between the two, the bytes read are a splice of both
    versions (seen in CI against S3): cut short, so not valid JSON. It is read again (for up to
    `patience_s`: a real writer rewrites such a file every few seconds at most).

    A file that stays unreadable (empty or cut short: a power loss before its rename reached the
    disk) is damaged: it reads as `default`, i.e. absent, and `damaged(location, why)` is told
    (without one, a warning names it on stderr). A local file is not read again: no writer
    replaces a local file half-way."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            return json.loads(read_text(location))
        except FileNotFoundError:
            return default
        except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
            if is_remote(location) and time.monotonic() < deadline:
                time.sleep(0.02)
                continue
            why = "empty file" if isinstance(error, json.JSONDecodeError) and not error.doc.strip() \
                else f"not JSON ({error})"
            if damaged is None:
                print(f"[storage] damaged file {display(location)}: {why}; read as absent", file=sys.stderr, flush=True)
            else:
                damaged(location, why)
            return default


def sync_path(path: str | Path) -> None:
    """fsync a local file or folder (a folder: the names in it, so a rename in it survives a
    power loss). A filesystem that cannot sync a folder (EINVAL) is left as it is."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as error:
        if error.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)


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


def write_bytes(location: str, data: bytes) -> None:
    """Replace the file whole: a reader sees the old content or the new, never a part. Local:
    the file, then its folder, are fsynced (one each), so a power loss keeps one of the two."""
    if is_remote(location):
        fs, path = filesystem(location)
        with fs.open_output_stream(path) as stream:
            stream.write(data)
        return
    target = Path(location)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())  # the bytes on disk before the name: never an empty file after a power loss
    os.replace(tmp, target)
    sync_path(target.parent)  # the rename itself


def write_text(location: str, text: str) -> None:
    write_bytes(location, text.encode())


def write_json(location: str, value, indent: int | None = 1) -> None:
    write_text(location, json.dumps(value, indent=indent, default=str))


def remove(location: str) -> None:
    """Delete a file; a missing one is fine."""
    if not is_remote(location):
        Path(location).unlink(missing_ok=True)
        return
    fs, path = filesystem(location)
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        pass


def remove_tree(location: str) -> None:
    """Delete a folder and everything in it; a missing one is fine."""
    if not is_remote(location):
        shutil.rmtree(location, ignore_errors=True)
        return
    fs, path = filesystem(location)
    if fs.get_file_info(path).type == pafs.FileType.Directory:
        fs.delete_dir(path)


def make_dirs(location: str) -> None:
    """Local folders only: an object store has no folders, only names with slashes."""
    if not is_remote(location):
        Path(location).mkdir(parents=True, exist_ok=True)


def list_names(location: str, folders: bool | None = None) -> list[str]:
    """Names directly inside the folder `location` (sorted; none when it does not exist).
    `folders`: True for sub-folders only, False for files only, None for both."""
    if not is_remote(location):
        if not os.path.isdir(location):
            return []
        entries = [e for e in os.scandir(location) if folders is None or e.is_dir() == folders]
        return sorted(e.name for e in entries)
    fs, path = filesystem(location)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return sorted(info.base_name for info in infos
                  if folders is None or (info.type == pafs.FileType.Directory) == folders)


def find_files(location: str, pattern: str) -> list[str]:
    """Locations of the files below `location` whose relative path matches the glob `pattern`
    (`find_files(run, "step-*/sweeper_checkpoint.json")`: every complete checkpoint's marker)."""
    if not is_remote(location):
        return sorted(str(p) for p in Path(location).glob(pattern))
    fs, path = filesystem(location)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=True))
    prefix = len(path.rstrip("/")) + 1
    found = [info.path[prefix:] for info in infos if info.type == pafs.FileType.File]
    depth = pattern.count("/")
    return sorted(join(location, rel) for rel in found
                  if rel.count("/") == depth and PurePosixPath(rel).match(pattern))


def file_sizes(location: str) -> dict[str, int]:
    """Relative path -> size in bytes of every file below the folder `location` (none when it
    does not exist): one listing, also in an object store."""
    if not is_remote(location):
        root = Path(location)
        return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}
    fs, path = filesystem(location)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=True))
    prefix = len(path.rstrip("/")) + 1
    return {info.path[prefix:]: info.size for info in infos if info.type == pafs.FileType.File}


def step_folders(location: str, marker: str) -> dict[int, str]:
    """The complete `step-<N>` folders (marker present) of a run folder: N -> location."""
    return {int(name(parent(found)).removeprefix("step-")): parent(found)
            for found in find_files(location, f"step-*/{marker}")}


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
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=base))
        copy_tree_from(location, tmp, only, skip)
        try:
            tmp.rename(target)  # atomic; a process that lost the race keeps the winner's copy
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def build_once(location: str, marker: str, build: Callable[[Path], None]) -> None:
    """Run `build(folder)` and publish the folder at `location` unless `location/marker`
    exists. Several processes may race: each builds from the same inputs, the folder that
    lands is complete, and a local loser drops its copy."""
    if exists(join(location, marker)):
        return
    if is_remote(location):
        tmp = Path(tempfile.mkdtemp(prefix="sweeper-build-"))
        build(tmp)
        publish_tree(tmp, location, marker)
        return
    out = Path(location)
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    build(tmp)
    sync_tree(tmp)
    try:
        tmp.rename(out)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
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
