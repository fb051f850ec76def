"""A real S3 API on the loopback (moto's server) for tests, benchmarks and trying object-store
studies offline. Needs the `test` extra (`moto[server]`); lives with the tests, out of the installed packages.

    with local_s3("my-bucket") as s3:
        location = s3.uri("studies/x")   # s3://testing:testing@my-bucket/studies/x?endpoint_override=...

The driver moves a URI's credentials into its environment and passes on locations without them
(sweeper.store.storage.normalize); Ray workers then need AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
(`testing`) in theirs, as tests/conftest.py sets for its cluster.

The server takes any key until `check_credentials`; after it, only the keys of the IAM users made
with `iam_user`, for what their policies allow, as S3 would (tests/e2e/test_store_credentials.py).
"""
from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from urllib.parse import parse_qs, quote


@dataclass(frozen=True)
class LocalS3:
    bucket: str
    query: str
    """`endpoint_override=127.0.0.1:<port>&scheme=http`: where pyarrow finds the server."""

    def uri(self, path: str, key: str = "testing", secret: str = "testing") -> str:
        """An `s3://` location in the bucket, with credentials (the test ones unless given) and
        the endpoint."""
        return f"s3://{quote(key, safe='')}:{quote(secret, safe='')}@{self.bucket}/{path}?{self.query}"

    @property
    def endpoint(self) -> str:
        """`http://127.0.0.1:<port>`, for boto3 and moto's own API."""
        return "http://" + parse_qs(self.query)["endpoint_override"][0]


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


def iam_user(s3: LocalS3, name: str, policy: list[dict]) -> tuple[str, str]:
    """A new IAM user of the server with the inline policy of `policy`'s statements; its access
    key (id, secret). Made before `check_credentials`, when the server takes any key."""
    import boto3

    iam = boto3.client("iam", endpoint_url=s3.endpoint, region_name="us-east-1",
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName=f"{name}-s3",
                        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": policy}))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return key["AccessKeyId"], key["SecretAccessKey"]


def check_credentials(s3: LocalS3) -> None:
    """From now on the server checks every request as S3 does: signed by an access key of one of
    its IAM users (else InvalidAccessKeyId), with that key's secret (else SignatureDoesNotMatch),
    for an action the user's policies allow (else AccessDenied). moto's server takes any key
    until then; `/moto-api/reset-auth` sets its INITIAL_NO_AUTH_ACTION_COUNT, the number of
    requests it lets through unchecked, to 0."""
    request = urllib.request.Request(f"{s3.endpoint}/moto-api/reset-auth", data=b"0", method="POST",
                                     headers={"Content-Type": "text/plain"})  # not a form: moto reads the body
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert json.loads(answer.read())["status"] == "ok"


def objects_under(location: str) -> dict[str, bytes]:
    """Every object below a location: its path relative to the location -> its bytes."""
    from sweeper.store import storage

    return {name: storage.read_bytes(storage.join(location, name)) for name in storage.file_sizes(location)}


def holding(found: dict[str, bytes], *needles: str) -> list[str]:
    """The names of the files in `found` (name -> bytes) that contain any of `needles`."""
    return sorted(name for name, data in found.items() if any(needle.encode() in data for needle in needles))
