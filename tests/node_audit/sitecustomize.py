"""Loaded by every Python process of one node of the multi-node test cluster (tests/conftest.py
puts this folder on the node's PYTHONPATH): logs each file-system access of the process to a
path below any node's folders, so tests/e2e/test_multinode.py can assert that no node touched
another node's folders (a cache read across nodes works on one machine and fails on a cluster).

Python's audit events cover `open` from Python code (json, numpy's np.load, torch.load, a
Hugging Face config.json or tokenizer file), listing, renames and removals, from any thread.
Opens in C++ or Rust (pyarrow, safetensors' weights) raise none, but no folder is read that way
alone: Hugging Face opens the folder's config.json first, and the test also checks what each
node's cache holds. The log is written with `os.write` on a descriptor
opened before the hook is installed (no audit event, so no recursion), one line per access,
appended whole (O_APPEND), so the node's processes share one log."""
import os
import sys

_LOG = os.environ.get("SWEEPER_NODE_AUDIT_LOG")
_NODE = os.environ.get("SWEEPER_NODE_NAME", "?")
_WATCHED = tuple(p.rstrip("/") + "/" for p in os.environ.get("SWEEPER_NODE_AUDIT_ROOTS", "").split(os.pathsep) if p)
_EVENTS = frozenset({"open", "os.listdir", "os.scandir", "os.rename", "os.remove", "os.rmdir", "os.mkdir",
                     "shutil.copytree", "shutil.copyfile", "os.symlink", "shutil.rmtree"})


def _install() -> None:
    fd = os.open(_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, f"{_NODE}\tstart\t{os.getpid()}\t{' '.join(sys.argv)[:200]}\n".encode())

    def hook(event: str, args: tuple) -> None:
        if event not in _EVENTS or not args:
            return
        for path in (
            args[:2] if event in ("os.rename", "shutil.copytree", "shutil.copyfile", "os.symlink") else args[:1]
        ):
            if isinstance(path, (str, bytes, os.PathLike)):
                text = os.path.abspath(os.fsdecode(path))
                if (text + "/").startswith(_WATCHED):
                    os.write(fd, f"{_NODE}\t{event}\t{os.getpid()}\t{text}\n".encode())

    sys.addaudithook(hook)


if _LOG and _WATCHED:
    _install()
