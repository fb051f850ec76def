"""The words of an object store's refusal (sweeper.store.filesystems.refusal, permanent_line), on
pyarrow 26's own error texts as tests/e2e/test_store_credentials.py met them from moto's server
checking keys (Request IDs cut). The end-to-end test shows the commands; this one pins which
reason wins when a text holds several marks, and that a refusal is never taken for weather."""
from __future__ import annotations

import pytest

from sweeper.store.filesystems import UNEXPLAINED_REFUSAL, refusal, transient
from sweeper.store.permanent_errors import permanent_line

LISTING = "When listing objects under key 'study/' in bucket 'b': AWS Error {} during ListObjectsV2 operation: {}"
HEAD = "When getting information for key 'study/spec.yaml' in bucket 'b': AWS Error {} during HeadObject operation: {}"
SEEN = {
    LISTING.format("INVALID_ACCESS_KEY_ID", "The AWS Access Key Id you provided does not exist in our records."):
        "the access key is not known to the store (InvalidAccessKeyId)",
    LISTING.format("SIGNATURE_DOES_NOT_MATCH", "The request signature we calculated does not match the signature "
                   "you provided. Check your key and signing method."):
        "the secret key does not match the access key (SignatureDoesNotMatch)",
    LISTING.format("UNKNOWN (HTTP status 400)", "The provided token is malformed or otherwise invalid."):
        "the session token is not valid for the access key (InvalidToken)",
    "When uploading object with key 'study/lease.json' in bucket 'b': AWS Error ACCESS_DENIED during PutObject "
    "operation: Access Denied":
        "access denied: the credentials are valid but not allowed this request (AccessDenied)",
    HEAD.format("ACCESS_DENIED", "No response body."): UNEXPLAINED_REFUSAL,
    "When getting information for bucket 'b': AWS Error UNKNOWN (HTTP status 400) during HeadBucket operation: "
    "No response body.": UNEXPLAINED_REFUSAL,
}


@pytest.mark.parametrize("text", SEEN)
def test_each_refusal_is_named_in_plain_words_and_never_retried(text):
    assert refusal(OSError(text)) == SEEN[text]
    assert not transient(OSError(text)), "a refusal is not sent again"


def test_the_line_names_the_object_pyarrow_names_else_the_study_and_no_keys():
    line = permanent_line(OSError(LISTING.format("INVALID_ACCESS_KEY_ID", "...")), "s3://K:S@b/study?x=1")
    assert line == "s3://b/study/: the access key is not known to the store (InvalidAccessKeyId)"
    line = permanent_line(OSError("AWS Error ACCESS_DENIED during PutObject operation: Access Denied"), "s3://K:S@b/x")
    assert line == "s3://b/x: access denied: the credentials are valid but not allowed this request (AccessDenied)"
    assert permanent_line(OSError("some bug")) is None
