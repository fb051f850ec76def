"""sweeper.contract.heavy_imports: a block runs with the cyclic collector paused, what is alive at
its end is frozen, and the collector is left as it was found, also when the block raises."""
from __future__ import annotations

import gc

import pytest

from sweeper.contract.heavy_imports import imports_frozen


@pytest.fixture
def collector_state():
    was_on = gc.isenabled()
    yield
    (gc.enable if was_on else gc.disable)()


@pytest.mark.parametrize("on", [True, False], ids=["collector on", "collector off"])
def test_the_block_runs_paused_and_what_it_made_is_frozen(collector_state, on):
    (gc.enable if on else gc.disable)()
    frozen_before = gc.get_freeze_count()
    with imports_frozen():
        assert not gc.isenabled()
        made = [[index] for index in range(5000)]  # tracked containers, as an import's tables are
    assert gc.isenabled() is on
    assert gc.get_freeze_count() - frozen_before >= len(made)


def test_a_block_that_raises_still_restores_the_collector(collector_state):
    gc.enable()
    with pytest.raises(ImportError):
        with imports_frozen():
            raise ImportError("no module named 'plugin'")
    assert gc.isenabled()
