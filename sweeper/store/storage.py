"""Where a study lives: a local path (a disk, or a mount every node sees) or an object-store
URI (`s3://bucket/prefix`, `gs://bucket/prefix`), through one set of functions used by the
driver and the workers alike (no torch here).

A location is a string: an absolute path, or a URI that `pyarrow.fs.FileSystem.from_uri`
understands, query included (`s3://bucket/x?endpoint_override=host:port&scheme=http` for an
S3-compatible server). `file://` URIs are plain paths.

What each kind guarantees, and how the study relies on it:
- Local: a file or folder is written under a temporary name and renamed into place, so a reader
  sees all of it or nothing.
- Object store: there is no rename, but one object is written whole by one upload (S3 and GCS
  never store half an object; a small file rewritten while pyarrow reads it can come back cut
  short, which `read_json` reads again). A folder (checkpoint, tokenised data, corpus) is uploaded file by
  file with its *marker* last, so "marker present" means "folder complete", and readers look
  for the marker first.
- Whole folders (published marker last, copied to a node's cache) are sweeper.store.folders'.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import sys
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit, urlunsplit

import pyarrow.fs as pafs

from sweeper.store.filesystems import filesystem_of_root, read_object, refusal, write_object
from sweeper.store.local_files import (  # noqa: F401 - re-exported
    removed_on_error,
    replace_file,
    sync_path,
)

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


NAME_MAX_BYTES = 255
"""Longest file or folder name most file systems take (ext4, XFS, APFS, NTFS)."""


INVISIBLE_CATEGORIES = ("Cc", "Cf", "Cs", "Zl", "Zp")
"""Unicode categories no name may hold: controls (C0, DEL and C1: U+0085, U+009B, ...), format
characters (bidi overrides such as U+202E, zero-width joiners, U+FEFF: they make two names that
print alike differ, or reorder a name on screen), lone surrogates, line and paragraph separators."""


def folder_name_problem(name: str, suffix_bytes: int = 0) -> str | None:
    """Why `name` cannot be a folder name (the study's, a run's, an external checkpoint's), or
    None; `suffix_bytes` are what the study appends to it in some folder name of its own."""
    if not name or "/" in name or name in (".", ".."):
        return f"must be a non-empty name without '/' (and not . or ..), got {name!r:.80}"
    if invisible := sorted({f"U+{ord(c):04X}" for c in name if unicodedata.category(c) in INVISIBLE_CATEGORIES}):
        return (f"must not hold control characters or format characters (NUL, newline, tab, C1 controls, "
                f"bidi overrides, ...), got {name!r:.80} holding {', '.join(invisible[:5])}")
    if (size := len(name.encode())) > (limit := NAME_MAX_BYTES - suffix_bytes):
        room = f" ({NAME_MAX_BYTES} less {suffix_bytes} for what the study appends)" if suffix_bytes else ""
        return f"is {size:,} bytes long (UTF-8); this name takes at most {limit}{room}"
    return None


def scheme_error(location: str) -> str | None:
    """Why `location` cannot hold a study, or None (used by the spec's validation)."""
    if not is_remote(location):
        return None
    scheme = urlsplit(location).scheme
    if scheme not in OBJECT_STORE_SCHEMES:
        return f"unsupported storage scheme {scheme!r}: use a path, or s3://, gs:// (or file://)"
    if not bucket_and_path(location)[0]:  # `s3:///x`, and `s3://KEY:SECRET@/x`: credentials, no bucket
        return f"{redact(location)!r} names no bucket"
    return None


def reach_error(location: str) -> str | None:
    """Why the study's bucket cannot be used from here, or None (always None for a path): a
    missing bucket or an unreachable endpoint say so before any Ray process starts. Refused
    credentials are raised, not returned: they are no mistake of the spec's, and the command says
    so as a storage error (sweeper.store.permanent_errors, exit 1)."""
    if not is_remote(location):
        return None
    try:
        fs, path = filesystem(location)
        bucket = path.split("/", 1)[0]
        if fs.get_file_info(bucket).type == pafs.FileType.NotFound:
            return f"bucket {bucket!r} does not exist (create it first, or check the endpoint)"
    except (OSError, ValueError) as error:
        if isinstance(error, OSError) and refusal(error):
            list_names(location)  # S3 says why it refused a GET (a listing), not a HEAD: raise that
            raise
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


def filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """(pyarrow filesystem, path on it): what pyarrow, Ray Train and Tune take for a location.
    One filesystem object per bucket and query (an S3 client is costly to create). The object
    holds no credentials (they are in the environment, `use_credentials`): Ray pickles it into
    Tune's state and the trainables' payloads, and pyarrow pickles explicit keys with it."""
    if not is_remote(location):
        return pafs.LocalFileSystem(), str(location)
    scheme, netloc, _, query, _ = urlsplit(use_credentials(location))
    filesystem_ = filesystem_of_root(urlunsplit((scheme, netloc, "", query, "")))
    return filesystem_, "".join(bucket_and_path(location)).rstrip("/")


def exists(location: str) -> bool:
    if not is_remote(location):
        return os.path.exists(location)
    fs, path = filesystem(location)
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def read_bytes(location: str) -> bytes:
    if not is_remote(location):
        return Path(location).read_bytes()
    return read_object(*filesystem(location))


def read_text(location: str) -> str:
    return read_bytes(location).decode()


def not_a_file(location: str) -> str | None:
    """Why the local `location` is not a regular file that can be read, or None (also None when
    nothing is there, and for an object store, whose names are files): a folder, a FIFO (reading
    one waits forever), a socket or a device where the study keeps a file is named, never read."""
    if is_remote(location):
        return None
    try:
        mode = os.stat(location).st_mode
    except FileNotFoundError:
        return None
    except OSError as error:  # a link loop, a link through a file, permission denied
        return f"cannot be read ({error.strerror or error})"
    if stat.S_ISREG(mode):
        return None
    kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
    return f"{kind}, not a file"


def read_json(location: str, default=None, patience_s: float = 5.0,
              damaged: Callable[[str, str], None] | None = None, kind: type | None = None):
    """The JSON object at `location`, or `default` when there is none.

    pyarrow reads an object's size, then its bytes: a writer replacing a small file (progress.json,
    live.json) in between splices two versions (seen in CI against S3) or breaks the read off, so it
    is read again for up to `patience_s` (a real writer rewrites such a file every few seconds at
    most); a local file is not (no writer replaces one half-way). A file that stays unreadable
    (empty or cut short: a power loss before its rename reached the disk), a value of another JSON
    type than `kind` (a list where `kind=dict`) and anything not a regular file (`not_a_file`: a
    folder, a FIFO) is damaged: it reads as `default`, i.e. absent, and `damaged(location, why)`
    is told (without one, a warning names it on stderr)."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            if why := not_a_file(location):
                break
            value = json.loads(read_text(location))
        except FileNotFoundError:
            return default
        except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
            if is_remote(location) and time.monotonic() < deadline:
                time.sleep(0.02)
                continue
            why = "empty file" if isinstance(error, json.JSONDecodeError) and not error.doc.strip() \
                else f"not JSON ({error})"
            break
        # A read broken off half-way (moto ends the response): read again; an error that stays is raised.
        except OSError:
            if not (is_remote(location) and time.monotonic() < deadline):
                raise
            time.sleep(0.02)
            continue
        if kind is None or isinstance(value, kind):
            return value
        why = f"a JSON {JSON_TYPE_NAMES.get(type(value), type(value).__name__)}, not a JSON {JSON_TYPE_NAMES[kind]}"
        break
    if damaged is None:
        print(f"[storage] damaged file {display(location)}: {why}; read as absent", file=sys.stderr, flush=True)
    else:
        damaged(location, why)
    return default


JSON_TYPE_NAMES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean",
                   type(None): "null"}


def write_bytes(location: str, data: bytes) -> None:
    """Replace the file whole: a reader sees the old content or the new, never a part. Local:
    the file, then its folder, are fsynced (one each), so a power loss keeps one of the two."""
    if is_remote(location):
        write_object(*filesystem(location), data)
        return
    replace_file(Path(location), data)


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
    """Relative path -> size in bytes of every file below the folder `location` (none if absent), one listing."""
    if not is_remote(location):
        sizes = {}  # a file or folder removed since the listing (retention, while a reader lists a run) is skipped
        for folder, _, names in os.walk(location):
            for path in (os.path.join(folder, name) for name in names):
                with contextlib.suppress(FileNotFoundError):
                    if stat.S_ISREG((found := os.stat(path)).st_mode):
                        sizes[os.path.relpath(path, location)] = found.st_size
        return sizes
    fs, path = filesystem(location)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=True))
    prefix = len(path.rstrip("/")) + 1
    return {info.path[prefix:]: info.size for info in infos if info.type == pafs.FileType.File}


def step_folders(location: str, marker: str) -> dict[int, str]:
    """The complete `step-<N>` folders (marker present) of a run folder: N -> location."""
    return {int(name(parent(found)).removeprefix("step-")): parent(found)
            for found in find_files(location, f"step-*/{marker}")}
