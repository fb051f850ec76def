"""Keys (sweeper.contract.configs): a trial key written from its parts' JSON is the key of its
whole identity, whatever the values."""
from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from sweeper.contract.configs import (
    AdamWConfig,
    FinetuneProtocol,
    canonical,
    stable_key,
    stable_key_of_parts,
    trial_identity,
    trial_key,
)
from sweeper.contract.registry import get_task

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=False),
                    st.text(max_size=8))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                      max_leaves=10)


@settings(max_examples=200, deadline=None)
@given(payload=st.dictionaries(st.text(max_size=8), values, max_size=6))
def test_a_key_from_its_parts_json_is_the_key_of_the_whole(payload):
    assert stable_key_of_parts({name: canonical(value) for name, value in payload.items()}) == stable_key(payload)


@settings(max_examples=50, deadline=None)
@given(lr=st.one_of(st.none(), st.floats(1e-6, 1.0)), seed=st.integers(0, 2**31), step=st.integers(0, 10**5),
       stride=st.integers(1, 512), sample=st.integers(0, 100), task=st.sampled_from(["sst2", "squad", "msmarco"]))
def test_trial_key_is_the_key_of_trial_identity(lr, seed, step, stride, sample, task):
    info = get_task(task)
    protocol = FinetuneProtocol(learning_rate=lr, batch_size=32, max_steps=100, epochs=1.0, max_length=512,
                                warmup_ratio=0.1, optimizer=AdamWConfig(), family_settings={"doc_stride": stride})
    protocol = replace(protocol, scoring="paper") if stride % 2 else protocol  # a KEYED_IF_SET field set
    task_text, protocol_text = canonical(info.identity()), canonical(protocol.key_fields())
    assert trial_key("run", step, task_text, protocol_text, seed, learning_rate=lr) \
        == stable_key(trial_identity("run", step, info, protocol, seed))
    search = {"optuna": {"sampler": "tpe"}, "seeds": [seed]}
    assert trial_key("run", step, task_text, protocol_text, seed, search_text=canonical(search), sample=sample) \
        == stable_key(trial_identity("run", step, info, protocol, seed, search=search, sample=sample))
