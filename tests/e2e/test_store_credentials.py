"""Refused credentials on the object store (issue #57), against moto's server made to check keys
as S3 does (tests/support/local_s3.py's `check_credentials`): an access key it does not know, a
secret key that is not the key's, a session token that is not the key's. `sweeper run`, `status`
and `report` each stop at once (no retries: a refusal is not transient), exit 1, with one line
`storage error: s3://...: <why>` and no traceback, and write nothing. A key whose policy denies
writes reads the study (`status`) and is refused its first write, said as such."""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

import pytest
from cli_process import sweeper_cli
from local_s3 import LocalS3, check_credentials, iam_user, local_s3, objects_under
from test_damage import SMOKE, record_study

from sweeper.store import storage
from sweeper.store.filesystems import UNEXPLAINED_REFUSAL, refusal
from sweeper.store.permanent_errors import permanent_line

BUCKET = "sweeper-credentials"
EVERYTHING = [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]
READ_ONLY = [*EVERYTHING, {"Effect": "Deny", "Action": ["s3:PutObject", "s3:DeleteObject"], "Resource": "*"}]
AWS_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
UNKNOWN_KEY = "the access key is not known to the store (InvalidAccessKeyId)"
WRONG_SECRET = "the secret key does not match the access key (SignatureDoesNotMatch)"
WRONG_TOKEN = "the session token is not valid for the access key (InvalidToken)"
DENIED = "access denied: the credentials are valid but not allowed this request (AccessDenied)"
AT_ONCE_S = 60
"""A refused command's limit, fork to exit: far under the ~100 s that the SDK's 12 tries with
backoff would take for one request. Measured 2-17 s on a loaded 2-core machine, nearly all of it
`status` and `report` importing what they show (pandas, scipy, matplotlib; ~4 CPU-s); each refused
request alone takes under 0.3 s (the test after)."""


@dataclass(frozen=True)
class Store:
    s3: LocalS3
    writer: tuple[str, str]
    reader: tuple[str, str]
    """A key allowed to read and list, denied PutObject and DeleteObject."""
    session: tuple[str, str, str]
    """(key, secret, session token) of a role's session."""
    study: str
    """A recorded study (the smoke plan's rows and markers), written with `writer`'s key."""

    def snapshot(self) -> dict[str, bytes]:
        """Every object in the bucket, read with the writer's key."""
        return objects_under(self.s3.uri("", *self.writer))


def role_session(s3: LocalS3) -> tuple[str, str, str]:
    """The key, secret and session token of a session of a role allowed everything in S3."""
    import boto3

    options = {"endpoint_url": s3.endpoint, "region_name": "us-east-1", "aws_access_key_id": "testing",
               "aws_secret_access_key": "testing"}
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                      "Principal": {"AWS": "arn:aws:iam::123456789012:root"}}]}
    role = boto3.client("iam", **options).create_role(RoleName="study", AssumeRolePolicyDocument=json.dumps(trust))
    boto3.client("iam", **options).put_role_policy(RoleName="study", PolicyName="s3", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": EVERYTHING}))
    session = boto3.client("sts", **options).assume_role(RoleArn=role["Role"]["Arn"], RoleSessionName="study")
    return tuple(session["Credentials"][name] for name in ("AccessKeyId", "SecretAccessKey", "SessionToken"))


@pytest.fixture(scope="module")
def store():
    saved = {name: os.environ.get(name) for name in AWS_VARIABLES}
    try:
        with local_s3(BUCKET) as s3:
            writer = iam_user(s3, "writer", EVERYTHING)
            reader = iam_user(s3, "reader", READ_ONLY)
            session = role_session(s3)
            check_credentials(s3)
            study, _ = record_study(storage.normalize(s3.uri("study", *writer)))
            for stage in ("cli", "run"):  # the forking servers start here, not in a command's time
                sweeper_cli("plan", str(SMOKE), stage=stage)
            yield Store(s3, writer, reader, session, study)
    finally:  # the driver's functions put a URI's keys in this process's environment
        for name, value in saved.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value


def sweeper(command: str, location: str, **environment: str):
    """`sweeper <command>` of the study at `location` (`run` with the smoke spec) and its time."""
    args = {"run": ["run", str(SMOKE), "--storage", location], "status": ["status", location],
            "report": ["report", location]}[command]
    env = {name: value for name, value in os.environ.items() if name not in AWS_VARIABLES}
    env.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", **environment})
    started = time.monotonic()
    result = sweeper_cli(*args, env=env, stage="run" if command == "run" else "cli", timeout=120)
    return result, time.monotonic() - started


def storage_error(result, secret: str) -> str:
    """The one `storage error:` line of a refused command (exit 1, no traceback, no secret)."""
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-4000:]
    assert "Traceback" not in output and secret not in output, output[-4000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("storage error: ")]
    assert len(lines) == 1, result.stderr[-4000:]
    return lines[0]


def with_key(store: Store, case: str) -> tuple[str, dict, str, str]:
    """(location, environment, secret to look for in the output, expected reason) of a case."""
    key, secret = store.writer
    path = storage.bucket_and_path(store.study)[1].strip("/")
    if case == "unknown key":
        return store.s3.uri(path, "AKIA" + "X" * 16, secret), {}, secret, UNKNOWN_KEY
    if case == "wrong secret":
        return store.s3.uri(path, key, secret[::-1]), {}, secret[::-1], WRONG_SECRET
    key, secret, token = store.session  # from the environment, as a node's provider chain gives it
    environment = {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret, "AWS_SESSION_TOKEN": token[::-1]}
    return storage.strip_credentials(store.study), environment, secret, WRONG_TOKEN


@pytest.mark.parametrize("case", ["unknown key", "wrong secret", "wrong token"])
def test_refused_credentials_stop_each_command_at_once_in_one_line_writing_nothing(store, case):
    location, environment, secret, reason = with_key(store, case)
    before = store.snapshot()
    for command in ("run", "status", "report"):
        result, took = sweeper(command, location, **environment)
        line = storage_error(result, secret)
        assert line.startswith(f"storage error: s3://{BUCKET}") and line.endswith(f": {reason}"), (command, line)
        assert took < AT_ONCE_S, f"{command} took {took:.1f} s"
        print(f"{case}: {command} {took:.1f} s: {line}")
    assert store.snapshot() == before, "nothing written, nothing removed"


def test_the_store_refuses_these_keys_in_the_drivers_own_reads_and_writes_within_a_second(store):
    """What the commands meet, one request at a time: each refusal is raised on the first try, and
    `permanent_line` gives its reason (asking the store once more where a HEAD got none)."""
    path = storage.bucket_and_path(store.study)[1].strip("/")
    key, secret = store.writer
    before = store.snapshot()
    good = storage.normalize(store.s3.uri(path, key, secret))
    assert storage.read_json(storage.join(good, "plan.json"))["trials"] > 0, "the writer's key reads"
    for bad, reason in ((store.s3.uri(path, "AKIA" + "Y" * 16, secret), UNKNOWN_KEY),
                        (store.s3.uri(path, key, secret.upper()), WRONG_SECRET)):
        location = storage.normalize(bad)
        for request in (lambda: storage.write_bytes(storage.join(location, "new.json"), b"{}"),
                        lambda: storage.read_bytes(storage.join(location, "plan.json")),
                        lambda: storage.list_names(location)):
            started = time.monotonic()
            with pytest.raises(OSError) as raised:
                request()
            assert time.monotonic() - started < 1.0, raised.value
            assert refusal(raised.value) in (reason, UNEXPLAINED_REFUSAL), raised.value  # a read's HEAD: no reason
            assert permanent_line(raised.value, location).endswith(f": {reason}"), raised.value
    assert store.snapshot() == before, "nothing written"


def test_a_key_denied_writes_reads_the_study_and_is_refused_its_first_write(store):
    key, secret = store.reader
    path = storage.bucket_and_path(store.study)[1].strip("/")
    location = store.s3.uri(path, key, secret)
    before = store.snapshot()
    status, _ = sweeper("status", location)
    assert status.returncode == 0 and "Traceback" not in status.stderr, status.stdout[-3000:] + status.stderr[-3000:]
    for command in ("report", "run"):  # `report` reads and computes first: refused at its first write
        result, took = sweeper(command, location)
        line = storage_error(result, secret)
        assert line.startswith(f"storage error: s3://{BUCKET}/{path}/") and line.endswith(f": {DENIED}"), line
        assert command == "report" or took < AT_ONCE_S, f"{command} took {took:.1f} s"
        print(f"denied writes: {command} {took:.1f} s: {line}")
    assert store.snapshot() == before
