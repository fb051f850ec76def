"""The lease tests of tests/unit/run/test_lease.py, run on a lease location in moto's S3 server."""
from __future__ import annotations

import uuid

import pytest

from sweeper.store import storage

from test_lease import (  # noqa: F401  (the unit tests, collected again here on s3://)
    test_a_fresh_study_is_taken_and_released, test_a_live_holder_is_refused_by_name,
    test_one_process_holds_one_lease, test_a_dead_holder_on_this_host_is_taken_over_at_once,
    test_a_silent_holder_is_taken_over_after_the_stale_threshold,
    test_release_and_renew_touch_only_our_own_lease)


@pytest.fixture(params=["s3"])
def lease_at(request, object_store):
    """The lease location of a fresh study in S3."""
    return storage.join(object_store(f"lease-{uuid.uuid4().hex[:8]}/study"), "lease.json")
