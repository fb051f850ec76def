"""Loaded by every Python process of one node of the multi-node test cluster (tests/conftest.py
puts this folder on the node's PYTHONPATH): logs each file-system access of the process to a
path below any node's folders, so tests/test_multinode.py can assert that no node touched
another node's folders (a cache read across nodes works on one machine and fails on a cluster).

Python's audit events cover `open` (also what numpy, torch's loaders and Hugging Face's call),
listing, renames and removals, from any thread; the log is written with `os.write` on a descriptor
opened before the hook is installed (no audit event, so no recursion), one line per access,
appended whole (O_APPEND), so the node's processes share one log."""
import os
import sys

_LOG = os.environ.get("SWEEPER_NODE_AUDIT_LOG")
_NODE = os.environ.get("SWEEPER_NODE_NAME", "?")
_WATCHED = tuple(p.rstrip("/") + "/" for p in os.environ.get("SWEEPER_NODE_AUDIT_ROOTS", "").split(os.pathsep) if p)
_EVENTS = {"open": 0, "os.listdir": 0, "os.scandir": 0, "os.rename": 0, "os.remove": 0, "os.rmdir": 0,
           "os.mkdir": 0, "shutil.copytree": 0, "shutil.copyfile": 0, "os.symlink": 0, "shutil.rmtree": 0}


def _install() -> None:
    fd = os.open(_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, f"{_NODE}\tstart\t{os.getpid()}\t{' '.join(sys.argv)[:200]}\n".encode())

    def hook(event: str, args: tuple) -> None:
        if event not in _EVENTS or not args:
            return
        for path in args[:2] if event in ("os.rename", "shutil.copytree", "shutil.copyfile", "os.symlink") else args[:1]:
            if isinstance(path, (str, bytes, os.PathLike)):
                text = os.path.abspath(os.fsdecode(path))
                if (text + "/").startswith(_WATCHED):
                    os.write(fd, f"{_NODE}\t{event}\t{os.getpid()}\t{text}\n".encode())

    sys.addaudithook(hook)


if _LOG and _WATCHED:
    _install()
