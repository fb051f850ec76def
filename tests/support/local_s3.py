"""A real S3 API on the loopback (moto's server) for tests, benchmarks and trying object-store
studies offline. Needs the `test` extra (`moto[server]`); lives with the tests, out of the installed packages.

    with local_s3("my-bucket") as s3:
        location = s3.uri("studies/x")   # s3://testing:testing@my-bucket/studies/x?endpoint_override=...

The driver moves a URI's credentials into its environment and passes on locations without them
(sweeper.store.storage.normalize); Ray workers then need AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
(`testing`) in theirs, as tests/conftest.py sets for its cluster.
"""
from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class LocalS3:
    bucket: str
    query: str
    """`endpoint_override=127.0.0.1:<port>&scheme=http`: where pyarrow finds the server."""

    def uri(self, path: str) -> str:
        """An `s3://` location in the bucket, with its test credentials and the endpoint."""
        return f"s3://testing:testing@{self.bucket}/{path}?{self.query}"


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports free now: each socket stays bound until all are chosen (one
    at a time, the kernel may hand the same port out twice, and Ray refuses a port given to two
    of its components)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def free_port() -> int:
    return free_ports(1)[0]


@contextlib.contextmanager
def local_s3(bucket: str = "sweeper", timeout_s: float = 60):
    """Start moto's S3 server on 127.0.0.1, create `bucket`, yield a LocalS3, stop the server."""
    import pyarrow.fs as pafs

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + timeout_s
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    raise RuntimeError("moto's S3 server did not start") from None
                time.sleep(0.2)
        query = f"endpoint_override=127.0.0.1:{port}&scheme=http"
        pafs.FileSystem.from_uri(f"s3://testing:testing@{bucket}?{query}&allow_bucket_creation=true")[0].create_dir(bucket)
        yield LocalS3(bucket, query)
    finally:
        server.terminate()
        server.wait(timeout=30)


def objects_under(location: str) -> dict[str, bytes]:
    """Every object below a location: its path relative to the location -> its bytes."""
    from sweeper.store import storage

    return {name: storage.read_bytes(storage.join(location, name)) for name in storage.file_sizes(location)}


def holding(found: dict[str, bytes], *needles: str) -> list[str]:
    """The names of the files in `found` (name -> bytes) that contain any of `needles`."""
    return sorted(name for name, data in found.items() if any(needle.encode() in data for needle in needles))
