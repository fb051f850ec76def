"""`SequentialSpec.looks`: a look only where a verdict can rest on more than the normal tail."""
from __future__ import annotations

import pytest

from sweeper.report.boundaries import nominal_level
from sweeper.spec.sequential import SequentialSpec


@pytest.mark.parametrize("n, maximum", [(3, 15), (6, 15), (9, 15), (5, 20), (4, 4)])
def test_the_first_look_level_is_the_boundaries_first_nominal_level(n, maximum):
    design = SequentialSpec(maximum=maximum)
    fractions = (n / maximum, 1.0) if n < maximum else (1.0,)
    assert design.first_look_level(n) == pytest.approx(nominal_level(fractions, 0, design.alpha), rel=1e-6)


def test_no_look_where_the_level_is_below_what_a_sign_flip_test_reaches():
    design = SequentialSpec()
    assert design.counts() == (3, 6, 9, 12, 15) and design.looks() == (9, 12, 15)
    assert design.first_look_level(6) < 2.0 ** -5 and design.first_look_level(9) >= 2.0 ** -8
    assert design.fractions() == (0.6, 0.8, 1.0)
    assert "no look at 3, 6 runs" in design.skipped()


def test_every_count_keeps_every_look_and_a_small_design_keeps_its_last():
    assert SequentialSpec(every_count=True).looks() == (3, 6, 9, 12, 15)
    assert SequentialSpec(every_count=True).skipped() == ""
    assert SequentialSpec(first=3, step=1, maximum=4).looks() == (4,)
    assert list(SequentialSpec(every_count="yes").check()) == [("every_count", "must be true or false, got 'yes'")]
