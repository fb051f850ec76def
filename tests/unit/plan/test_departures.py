"""paper.yaml held to the paper's protocol table (sweeper/plan/protocol.py), docs/paper-protocol.md
held to the same table, and what `sweeper plan` prints about departures."""
from __future__ import annotations

import re
from dataclasses import replace

import pytest

from sweeper.plan.departures import departures, markdown_table, protocol_lines
from sweeper.plan.load import load_study
from sweeper.plan.protocol import PAPER_PROTOCOL, retrieval_negatives
from sweeper.plan.study_plan import plan_study
from sweeper.spec.reading import SpecError

from cli_process import sweeper_cli
from conftest import ROOT

PAPER = ROOT / "search_spaces" / "paper.yaml"


@pytest.fixture(scope="module")
def paper():
    spec = load_study(PAPER).spec
    return spec, plan_study(spec)


def test_the_doc_holds_the_table_rendered_from_the_protocol_data(paper):
    text = (ROOT / "docs" / "paper-protocol.md").read_text()
    table = re.search(r"<!-- protocol table:.*?-->\n(.*?)<!-- end of protocol table -->", text, re.S).group(1)
    assert table == markdown_table(*paper), "docs/paper-protocol.md is stale: python -m sweeper.plan.departures"


def test_paper_yaml_departs_only_where_the_table_says_deliberately(paper):
    spec, plan = paper
    assert spec.protocol == "paper"
    undeclared = {d.item.item for d in departures(spec, plan) if not d.item.deliberate}
    assert not undeclared, undeclared
    deliberate = {d.item.item for d in departures(spec, plan) if d.item.deliberate}
    assert {item.split(":")[0] for item in deliberate} == {
        "packer details", "tokens per step", "models / evaluated checkpoints", "NQ's 50/50 draw",
        "CPT schedule (re-warmup, decay)"}


def test_standard_scoring_and_another_length_are_departures_the_table_names(paper):
    """The scoring rows read `finetuning.scoring` off the spec: `standard` departs in each of the four
    categories, with what the standard convention does; max_length is the authors' 2,028."""
    spec, plan = paper
    standard = replace(spec, finetuning=replace(spec.finetuning, scoring="standard", max_length=2027))
    found = {d.item.item: d.value for d in departures(standard, plan) if not d.item.deliberate}
    assert set(found) == {f"{c}: labels; metric; input format" for c in ("SC", "TC", "QA", "IR")} | {
        "tokens per example (max_length)"}
    assert "seqeval entity micro-F1" in found["TC: labels; metric; input format"]
    assert found["tokens per example (max_length)"] == 2027


def test_every_item_names_its_source_and_setting_and_reads_or_is_fixed_in_code():
    assert len({item.item for item in PAPER_PROTOCOL}) == len(PAPER_PROTOCOL)
    for item in PAPER_PROTOCOL:
        assert item.source and item.setting, item.item
        assert item.read is not None or item.setting.startswith("fixed in code"), item.item


def test_a_changed_setting_is_named_with_both_values_and_the_source(paper, tmp_path):
    spec, _ = paper
    changed = replace(spec, pretraining=replace(spec.pretraining, optimizer=replace(spec.pretraining.optimizer,
                                                                                    peak_lr=1e-3)))
    lines = protocol_lines(changed, plan_study(changed))
    line = next(line for line in lines if "peak learning rate" in line)
    assert "0.001 here, 0.0005 in the paper (paper, training setup); set pretraining.optimizer.peak_lr" in line
    grid = next(item for item in PAPER_PROTOCOL if item.item == "pretraining runs (authors' names)")
    dropped = replace(spec, pretraining=replace(spec.pretraining, runs=spec.pretraining.runs[:-1]))
    departure = next(d for d in departures(dropped, plan_study(dropped)) if d.item is grid)
    assert departure.value < grid.paper


def test_replicated_runs_are_named_once_with_their_count(paper):
    spec, _ = paper
    plan = plan_study(spec, replicate_counts={"610m-clm-42k": 3, "1b-clm-42k": 2})
    line = next(line for line in protocol_lines(spec, plan) if "pretraining runs (authors' names)" in line)
    assert "extra 1b-clm-42k (x2 replicates), 610m-clm-42k (x3 replicates) here" in line
    assert "-rep" not in line and "missing" not in line
    assert not any("intermediate checkpoints" in line for line in protocol_lines(spec, plan))  # the same steps


def test_a_spec_that_claims_no_protocol_prints_no_departures(paper):
    spec, plan = paper
    assert protocol_lines(replace(spec, protocol=None), plan) == []


def test_retrieval_negatives_are_the_effective_batch_less_one(paper):
    spec, _ = paper
    whole = replace(spec, finetuning=replace(spec.finetuning, micro_batch_size=32))
    assert retrieval_negatives(whole) == 31
    assert retrieval_negatives(spec) == 31  # micro batch 4: gradient-cached
    no_retrieval = replace(spec, finetuning=replace(spec.finetuning, tasks=["sst2"]))
    assert retrieval_negatives(no_retrieval) is None


def test_sweeper_plan_prints_the_departures_and_the_negatives():
    result = sweeper_cli("plan", str(PAPER), "-v", cwd=ROOT)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "departures from the paper (docs/paper-protocol.md):" in out
    assert "tokens per step: 2,359,296 here, 2,373,120 in the paper (paper footnote 6" in out
    assert "  retrieval negatives per query: 31 (" in out
    assert "departures from the paper (docs/paper-protocol.md): none but 5 deliberate" in out


def test_an_unknown_protocol_is_a_spec_error(tmp_path):
    path = tmp_path / "paper.yaml"
    path.write_text(PAPER.read_text().replace("protocol: paper ", "protocol: papr "))
    with pytest.raises(SpecError) as error:
        load_study(path)
    assert "protocol" in str(error.value) and "'paper'" in str(error.value)
