"""A biphasic run's switch stated as steps (`switch_steps`): the paper's Tables 10-13 list
3k/6k/9k, 5k/11k/17k and 10k/21k/32k, which no share rule gives."""
from __future__ import annotations


import pytest
from conftest import ROOT

from sweeper.plan.load import load_study
from sweeper.spec.reading import SpecError

SPECS = ROOT / "search_spaces"


def with_runs(tmp_path, runs_yaml: str):
    text = (SPECS / "smoke.yaml").read_text()
    start, end = text.index("  runs:"), text.index("finetuning:")
    path = tmp_path / "switch.yaml"
    path.write_text(text[:start] + "  runs:\n" + runs_yaml + text[end:])
    return path


def test_a_stated_switch_is_the_switch_and_keys_like_the_share_that_gives_it(tmp_path):
    smoke = {r.name: r for r in load_study(SPECS / "smoke.yaml").plan.runs}
    by_share = smoke["nano-clm-20-mlm40-40"]  # clm_fraction 0.5 of 40 steps
    plan = load_study(with_runs(tmp_path, (
        "    - objective: clm-mlm\n"
        "      switch_steps: [20, 13]\n"
        "      clm_fraction: [0.5, 0.33]\n"))).plan
    first, second = plan.runs
    assert (first.name, first.run_key, first.clm_fraction) == (by_share.name, by_share.run_key, 0.5)
    assert second.name == "nano-clm-13-mlm40-40" and second.switch_step == 13 and second.clm_fraction == 0.33
    assert [(p.objective, p.start_step, p.end_step) for p in second.phases] == [("clm", 0, 13), ("mlm", 13, 40)]


def test_without_labels_the_share_is_switch_over_steps(tmp_path):
    plan = load_study(with_runs(tmp_path, "    - {objective: clm-mlm, switch_steps: [10], steps: [40]}\n")).plan
    assert [(r.switch_step, r.clm_fraction) for r in plan.runs] == [(10, 0.25)]


def test_the_papers_switch_steps_are_planned_as_its_tables_list_them():
    runs = {r.name: r for r in load_study(SPECS / "paper.yaml").plan.runs}
    tables = {12_000: (3000, 6000, 9000), 22_000: (5000, 11_000, 17_000), 42_000: (10_000, 21_000, 32_000)}
    for budget, switches in tables.items():
        planned = sorted((r.switch_step, r.clm_fraction) for r in runs.values()
                         if r.preset == "610m" and r.objective == "clm-mlm" and r.total_steps == budget
                         and r.switch_step < 40_000)
        assert planned == list(zip(switches, (0.25, 0.5, 0.75))), budget
    assert {"610m-clm-12k", "610m-clm-22k", "610m-mlm40-12k", "610m-mlm40-22k"} <= set(runs)
    assert [r.name for r in runs.values() if r.preset == "1b" and r.objective == "clm-mlm"] == ["1b-clm-10k-mlm40-42k"]


@pytest.mark.parametrize("runs_yaml, key, reason", [
    ("    - {objective: mlm, switch_steps: [10]}\n", "pretraining.runs[0].switch_steps",
     "goes with objective: clm-mlm"),
    ("    - {objective: clm-mlm, switch_steps: [10, 20], clm_fraction: [0.25]}\n", "pretraining.runs[0].clm_fraction",
     "one share per switch step"),
    ("    - {objective: clm-mlm, switch_steps: [50]}\n", "pretraining.runs[0].switch_steps[0]",
     "beyond the run's budget"),
    ("    - {objective: clm-mlm, switch_steps: [0]}\n", "pretraining.runs[0].switch_steps[0]", "must be positive"),
    ("    - {objective: clm-mlm, switch_steps: [10, 10]}\n", "pretraining.runs[0].switch_steps[1]", "listed twice"),
])
def test_a_bad_switch_step_names_its_key(tmp_path, runs_yaml, key, reason):
    with pytest.raises(SpecError) as error:
        load_study(with_runs(tmp_path, runs_yaml))
    assert key in str(error.value) and reason in str(error.value), str(error.value)
