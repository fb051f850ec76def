"""The spec's JSON Schema (sweeper.spec.schema) against the converter that parses specs: the
shipped specs and the docs' YAML blocks are valid, search_spaces/schema.json is current, and a
spec the converter refuses for its shape (an unknown key, a wrong type, a malformed sweep) is
invalid under the schema too, while the forms it accepts stay valid."""
from __future__ import annotations

import copy
import json
import re

import jsonschema
import pytest
import yaml
from conftest import ROOT

from sweeper import cli
from sweeper.spec.parsing import build_dataclass
from sweeper.spec.reading import Context, LineIndex, SpecError
from sweeper.spec.schema import schema_text, spec_schema
from sweeper.spec.study import StudySpec

SPECS = sorted((ROOT / "search_spaces").glob("*.yaml"))
VALIDATOR = jsonschema.Draft202012Validator(spec_schema())
MICRO = yaml.safe_load((ROOT / "search_spaces" / "micro.yaml").read_text())
BLOCK = re.compile(r"^```ya?ml[^\n]*\n(.*?)^```", re.M | re.S)


def test_the_schema_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(spec_schema())


def test_sweeper_schema_prints_the_committed_schema(capsys):
    assert cli.main(["schema"]) == 0
    printed = capsys.readouterr().out
    assert printed == schema_text() == (ROOT / "search_spaces" / "schema.json").read_text(), (
        "search_spaces/schema.json is stale: python -m sweeper schema > search_spaces/schema.json")
    assert json.loads(printed)["properties"]["finetuning"]["description"] == "The fine-tuning grid (Ray Tune)."


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_every_shipped_spec_points_to_the_schema_and_is_valid(path):
    text = path.read_text()
    assert text.splitlines()[0] == "# yaml-language-server: $schema=schema.json"
    assert (path.parent / "schema.json").is_file()
    assert not list(VALIDATOR.iter_errors(yaml.safe_load(text)))


def doc_blocks() -> list:
    found = []
    for document in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = document.read_text()
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(pytest.param(match.group(1), id=f"{document.relative_to(ROOT)}:{line}"))
    return found


def without_required(schema):
    """The schema with no key required: a fragment (a section to put in a whole spec) is checked
    for the keys and values it gives."""
    if isinstance(schema, dict):
        return {k: without_required(v) for k, v in schema.items() if k != "required"}
    return [without_required(v) for v in schema] if isinstance(schema, list) else schema


@pytest.mark.parametrize("block", doc_blocks())
def test_every_yaml_block_of_the_docs_is_valid(block):
    if re.search(r"#\s*expect-error:", block):
        pytest.skip("a block that shows a spec error (tests/unit/test_doc_examples.py checks its message)")
    fragment = re.search(r"#\s*fragment:", block) is not None
    validator = jsonschema.Draft202012Validator(without_required(spec_schema())) if fragment else VALIDATOR
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(yaml.safe_load(block))]
    assert not errors, errors


def converter_refuses(data: dict) -> bool:
    try:
        build_dataclass(StudySpec, data, "", Context("spec.yaml", LineIndex(None)))
    except SpecError:
        return True
    return False


def edited(path: str, value=None, delete: bool = False) -> dict:
    """micro.yaml's data with the key at `path` (dotted) set to `value`, or removed."""
    data = copy.deepcopy(MICRO)
    *parents, last = path.split(".")
    target = data
    for key in parents:
        target = target[int(key)] if key.isdigit() else target[key]
    if delete:
        del target[last]
    else:
        target[last] = value
    return data


def renamed(section: str, old: str, new: str) -> dict:
    data = copy.deepcopy(MICRO)
    data[section][new] = data[section].pop(old)
    return data


REFUSED = {
    "a misspelled key": renamed("finetuning", "learning_rates", "learning_ratess"),
    "seeds: zero": edited("finetuning.seeds", "zero"),
    "a scalar where a list goes": edited("finetuning.seeds", 3),
    "a required key missing": edited("finetuning", delete=True),
    "a value outside a Literal": edited("finetuning.search", "bayes"),
    "a string for an integer": edited("pretraining.steps", "many"),
    "a float for an integer": edited("pretraining.steps", 1.5),
    "a bool for a number": edited("finetuning.weight_decay", True),
    "a distribution where a grid goes": edited("pretraining.global_batch_size", {"choice": [8, 16]}),
    "randint over a real field": edited("finetuning.weight_decay", {"randint": [0, 1]}),
    "uniform over an integer field": edited("finetuning.batch_size", {"uniform": [8, 16]}),
    "a range with one end": edited("finetuning.weight_decay", {"uniform": [0.0]}),
    "two forms at once": edited("finetuning.weight_decay", {"uniform": [0.0, 0.1], "choice": [0.1]}),
    "an unknown form": edited("finetuning.weight_decay", {"normal": [0.0, 0.1]}),
    "an empty grid": edited("finetuning.max_length", {"grid_search": []}),
    "a mapping for a section": edited("resources", [1, 2]),
    "an integer beyond 64 bits": edited("pretraining.steps", 2**63),
    "betas with three values": edited("finetuning.betas", [0.9, 0.95, 0.99]),
    "an unknown key in a run entry": edited("pretraining.runs.0.objectiv", "mlm"),
}
ACCEPTED = {
    "the spec as shipped": MICRO,
    "a number YAML 1.1 reads as text": edited("finetuning.learning_rates", ["1e-5", 3.0e-4]),
    "a null section (its defaults)": edited("cost", None),
    "Tune's grid_search": edited("finetuning.max_length", {"grid_search": [48, 64]}),
    "a grid of betas pairs": edited("pretraining.optimizer.betas", [[0.9, 0.95], [0.9, 0.98]]),
    "a random search's choice of pairs": {**MICRO, "finetuning": {
        **{k: v for k, v in MICRO["finetuning"].items() if k != "learning_rates"}, "search": "random",
        "random": {"samples": 2}, "betas": {"choice": [[0.9, 0.95], [0.9, 0.98]]},
        "weight_decay": {"uniform": [0, 0.1]},
        "batch_size": {"randint": [8, 17]}}},
}


@pytest.mark.parametrize("name", REFUSED)
def test_what_the_converter_refuses_for_its_shape_the_schema_refuses(name):
    data = REFUSED[name]
    assert converter_refuses(data), f"{name}: the converter took it (the case is wrong)"
    assert list(VALIDATOR.iter_errors(data)), f"{name}: the schema took what the converter refuses"


@pytest.mark.parametrize("name", ACCEPTED)
def test_what_the_converter_accepts_the_schema_accepts(name):
    data = ACCEPTED[name]
    assert not converter_refuses(data), name
    assert not list(VALIDATOR.iter_errors(data)), name
