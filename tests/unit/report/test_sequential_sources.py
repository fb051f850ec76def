"""A sequential study never lets two replicates of one arm share a source (#53): a continued run's
count raises its source's at the same look (sweeper.report.sequential.with_sources), and the plan
of any look's counts continues replicate r from the source's own replicate r
(sweeper.plan.replicates.grown_sources). Simulated studies run through the report's own look code."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from sweeper.plan.load import load_study
from sweeper.report import sequential
from sweeper.report.statistics import VerdictConfig
from sweeper.spec.sequential import SequentialSpec

from verdict_simulation import CATEGORIES, GROUPS, Scenario, simulate

DESIGN = SequentialSpec(first=3, step=3, maximum=9, futility=0.0, every_count=True)
"""Short, never futile, and looking at every count (3, 6, 9): an open comparison grows to the maximum."""
SOURCES_DECIDE = Scenario(groups=GROUPS[:1], replicates=DESIGN.maximum, run_sd=0.5, effects={
    "clm": dict.fromkeys(CATEGORIES, -12.0), "clm-early": dict.fromkeys(CATEGORIES, -12.0),
    "split25": dict.fromkeys(CATEGORIES, 6.0), "split50": dict.fromkeys(CATEGORIES, 12.0),
    "mlm30": dict.fromkeys(CATEGORIES, -6.0), "mlm40-early": dict.fromkeys(CATEGORIES, -6.0)},
    depth={"clm": 0.2, "mlm40": 12.0})
"""Every comparison of the sources (CLM, MLM-40) decided early; the continued runs equal: only
finding 5's comparison stays open (CLM's flatter learning-rate curve decides finding 3's stability part), so its arms
grow past their sources' own needs."""


def looks_counts(seed: int) -> tuple[list[dict[str, int]], dict[str, str]]:
    grid, runs = simulate(np.random.default_rng(seed), SOURCES_DECIDE)
    # The plain t: with normal noise it decides the sources at an early look, which the default
    # skew-sign test cannot at 6 runs (its sign-flip's smallest p, 2^(1-6), is above those levels).
    outcome = sequential.run_looks(grid, runs, DESIGN, config=VerdictConfig(test="t"))
    base = sequential.base_runs(runs.reindex(grid.checkpoints))
    return outcome.counts, sequential.study_sources(runs.reindex(grid.checkpoints), base)


def test_no_look_has_a_continued_run_with_more_replicates_than_its_source(monkeypatch):
    counts, sources = looks_counts(0)
    assert sources == {"610m-clm-dec42k-mlm40-44k": "610m-clm-42k",
                       "610m-mlm40-dec42k-mlm40-44k": "610m-mlm40-42k"}
    assert len(counts) > 1 and any(counts[-1][run] > DESIGN.first for run in sources), counts
    for look in counts:
        assert all(look[source] >= look[run] for run, source in sources.items()), look

    # The check can fail: without raising the sources, the continued arms outgrow them.
    monkeypatch.setattr(sequential, "with_sources", lambda counts, sources: counts)
    broken, _ = looks_counts(0)
    assert any(look[source] < look[run] for look in broken for run, source in sources.items()), broken


def test_the_plan_of_a_look_continues_every_replicate_from_its_own_source_replicate():
    """micro.yaml made sequential, at a look that grew its continued runs to 9 and left their
    sources at 3 (as a report's counts without `with_sources` would): the plan trains the sources
    9 times anyway, each continued replicate from its own."""
    study = load_study(Path("search_spaces/micro.yaml"), [
        "pretraining.sequential={first: 3, step: 3, maximum: 9}", "pretraining.runs[0].replicates=null",
        "pretraining.runs[2].replicates=null"])
    first = {run.name: 3 for run in study.plan.runs if run.replicate == 0}
    cpt = ["nano-clm-dec600-mlm40-700", "nano-mlm40-dec600-mlm40-700"]
    runs = study.with_replicates({**first, **dict.fromkeys(cpt, 9)}).plan.runs
    for name in cpt:
        replicates = [run for run in runs if run.arm == name]
        origins = [run.init_from_run for run in replicates]
        assert len(replicates) == 9 and len(set(origins)) == 9, origins
        assert all(o == (r.init_from_run.split("-rep")[0] + (f"-rep{r.replicate}" if r.replicate else ""))
                   for o, r in zip(origins, replicates))
