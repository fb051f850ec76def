"""Every run key and trial key of the shipped and test specs stays what it was.

`tests/data/pinned_keys.json` was written by `scripts/pin_keys.py` before the configuration
types changed; a refactor that moves a field, renames a setting or reorders a hash would give
recorded cells new keys (their results would be recomputed). Small specs are compared key by
key, so a failure names the cell; paper.yaml's 18,000 trial keys by count and digest.
"""
from __future__ import annotations

import json

import pytest

from conftest import ROOT

from pin_keys import SPECS, keys_of

PINNED = json.loads((ROOT / "tests" / "data" / "pinned_keys.json").read_text())


@pytest.mark.parametrize("relative", sorted(SPECS))
def test_run_and_trial_keys_are_the_pinned_ones(relative):
    pinned, now = PINNED[relative], keys_of(relative, SPECS[relative])
    assert now["runs"] == pinned["runs"], "run names or run keys changed"
    assert now["trial_count"] == pinned["trial_count"]
    if "trials" in pinned:
        changed = {cell: (key, now["trials"].get(cell)) for cell, key in pinned["trials"].items()
                   if now["trials"].get(cell) != key}
        assert not changed, f"{len(changed)} trial keys changed, e.g. {list(changed.items())[:3]}"
    assert now["trials_sha256"] == pinned["trials_sha256"], "trial keys changed"


@pytest.mark.parametrize("relative", sorted(SPECS))
def test_replicate_0_of_every_run_keeps_the_pinned_keys(relative):
    """Planned with 3 replicates of every run, replicate 0 keeps every pinned run name, run key
    and trial key: a study that adds replicates later trains and fine-tunes only the new ones."""
    pinned, now = PINNED[relative], keys_of(relative, SPECS[relative], replicates=3)
    # A shipped spec may replicate some runs itself (micro.yaml): its pins hold those too.
    assert now["runs"].items() <= pinned["runs"].items() and now["runs"]
    if "trials" in pinned:
        assert now["trials"].items() <= pinned["trials"].items() and now["trials"]
    else:  # pinned as a digest: a spec without replicates of its own (paper.yaml)
        assert (now["trial_count"], now["trials_sha256"]) == (pinned["trial_count"], pinned["trials_sha256"])
