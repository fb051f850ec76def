"""The pyarrow filesystem behind an object-store location, built once per bucket and query, with
the retry settings that let a study ride out a cloud store's weather (sweeper.store.storage
passes locations; this module makes the client)."""
from __future__ import annotations

import random
import re
import time
from functools import lru_cache

import pyarrow.fs as pafs

S3_MAX_ATTEMPTS = 12
"""Tries per S3 request (pyarrow's default is 3). Each request pyarrow makes (a listing, one
object's read, one part of an upload) is retried by the AWS SDK's default strategy, which retries
only what is transient (503 SlowDown, throttling, 5xx, reset or dropped connections, timeouts)
with exponential backoff (25 ms doubling: 51 s before the 12th try, 100 s in all) and stops at
once on a permanent error (403, a missing bucket). Not the SDK's standard strategy, pyarrow's
default: through pyarrow (26) its retry quota is spent and never refilled, so a client stops
retrying altogether after about 100 retries (measured through tests/support/faulty_proxy.py:
the 335th write of one client at 25 % SlowDown failed on its first 503), hours into a study.
Three tries let about one request in 600 through a store that fails one in eight (10 % SlowDown,
2 % dropped connections); twelve about one in 10^11."""


class _RetryingS3FileSystem(pafs.S3FileSystem):
    """An S3FileSystem that keeps its retry settings when pickled: pyarrow's own pickling leaves
    `retry_strategy` out (pyarrow 26), so the copies Ray sends to Tune's trainables and Train's
    workers would try three times. Pickled as its credential-free root URI, rebuilt by the
    receiving process from its own environment (`filesystem`)."""

    def __init__(self, root: str, **options):
        super().__init__(**options)
        self._root = root

    def __reduce__(self):
        return filesystem_of_root, (self._root,)


@lru_cache(maxsize=64)
def filesystem_of_root(root: str) -> pafs.FileSystem:
    """The filesystem of `root` (`s3://bucket?query`, no credentials): pyarrow parses the URI's
    query (endpoint_override, scheme, region, ...); S3 gets `S3_MAX_ATTEMPTS` tries per request."""
    parsed = pafs.FileSystem.from_uri(root)[0]
    if not isinstance(parsed, pafs.S3FileSystem):
        return parsed
    options = parsed.__reduce__()[1][0]  # the settings from_uri parsed, as pyarrow pickles them
    # -1 / "" / None stand for "unset" there; the constructor wants them left out.
    options = {key: value for key, value in options.items() if value is not None and value != "" and value != -1.0}
    if not options.get("proxy_options", {}).get("host"):
        options.pop("proxy_options", None)
    options["allow_delayed_open"] = True
    return _RetryingS3FileSystem(root, retry_strategy=pafs.AwsDefaultS3RetryStrategy(max_attempts=S3_MAX_ATTEMPTS),
                                 **options)


TRANSIENT_MARKS = ("SLOW_DOWN", "SlowDown", "THROTTLING", "SERVICE_UNAVAILABLE", "INTERNAL_FAILURE",
                   "NETWORK_CONNECTION", "REQUEST_TIMEOUT", "Failed to flush response stream", "curlCode",
                   "Connection reset")
"""What an OSError from pyarrow says when the request may succeed if sent again. pyarrow reads a
small object into a buffer of the object's size; an error answer longer than that (a 503
SlowDown body to a GET of a 9-byte marker) overflows it and comes back as INTERNAL_FAILURE
"Failed to flush response stream", which the SDK does not retry."""


def transient(error: OSError) -> bool:
    """Whether `error` (not a missing file) may pass if the request is sent again."""
    return not isinstance(error, FileNotFoundError) and any(mark in str(error) for mark in TRANSIENT_MARKS)


REFUSALS = (
    (("INVALID_ACCESS_KEY_ID", "InvalidAccessKeyId", "does not exist in our records"),
     "the access key is not known to the store (InvalidAccessKeyId)"),
    (("SIGNATURE_DOES_NOT_MATCH", "SignatureDoesNotMatch", "signature we calculated does not match"),
     "the secret key does not match the access key (SignatureDoesNotMatch)"),
    (("EXPIRED_TOKEN", "ExpiredToken"), "the session token has expired (ExpiredToken)"),
    (("InvalidToken", "token is malformed"), "the session token is not valid for the access key (InvalidToken)"),
    (("NO_SUCH_BUCKET", "NoSuchBucket"), "the bucket does not exist (NoSuchBucket)"),
    (("ACCESS_DENIED", "AccessDenied"),
     "access denied: the credentials are valid but not allowed this request (AccessDenied)"),
)
"""What an S3 error from pyarrow says (its error type, the store's code, or the store's message)
when no retry mends it, first match first, -> the reason in plain words. S3 checks the key and the
signature before any policy, so an AccessDenied with a body comes after both passed."""
UNEXPLAINED_REFUSAL = ("refused without a reason (the answer to a HEAD request carries none: an unknown "
                       "access key, a wrong secret key or session token, or a policy that denies it)")
"""The reason of a 403 or 400 without a body: S3 answers a HEAD request (an object's or a bucket's
information) with the status alone, which pyarrow reports as "ACCESS_DENIED" or "UNKNOWN (HTTP
status 400)" with "No response body" (400: a session token that is not valid, or has expired)."""
_BODILESS_REFUSAL = re.compile(r"(ACCESS_DENIED|HTTP status 40[03]\b).*No response body")


def refusal(error: OSError) -> str | None:
    """Why the store refused a request for good, in plain words (`REFUSALS`, `UNEXPLAINED_REFUSAL`),
    or None for an error that is not a refusal (a missing object, a transient error, a bug)."""
    text = str(error)
    if _BODILESS_REFUSAL.search(text):
        return UNEXPLAINED_REFUSAL
    return next((words for marks, words in REFUSALS if any(mark in text for mark in marks)), None)


OBJECT_TRIES = 6


def sent_again(request):
    """`request()`'s value, sent again (up to OBJECT_TRIES, exponential backoff with full jitter
    from 50 ms) while it fails for a `transient` reason: over the SDK's own per-request retries,
    for what they leave (an overflowed read buffer; a request whose tries ran out in a long
    outage). Only for idempotent requests: reading an object, writing one whole."""
    for attempt in range(OBJECT_TRIES):
        try:
            return request()
        except OSError as error:
            if attempt == OBJECT_TRIES - 1 or not transient(error):
                raise
            time.sleep(random.uniform(0, 0.05 * 2 ** attempt))
    raise AssertionError("unreachable")


def read_object(fs: pafs.FileSystem, path: str) -> bytes:
    """The bytes of one object (`sent_again`)."""
    def read() -> bytes:
        with fs.open_input_stream(path) as stream:
            return stream.read()
    return sent_again(read)


def write_object(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Replace one object whole (`sent_again`: S3 never stores half an object, so a write sent
    again leaves the old object or the new one)."""
    def write() -> None:
        with fs.open_output_stream(path) as stream:
            stream.write(data)
    sent_again(write)

