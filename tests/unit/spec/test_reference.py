"""docs/spec.md is what sweeper.spec.reference generates from the spec's dataclasses today, and
it documents every key the spec may hold (sweeper.spec.reference, sweeper.spec.field_docs)."""
from __future__ import annotations

import dataclasses

from conftest import ROOT

from sweeper.spec.field_docs import field_docs
from sweeper.spec.reference import cell, reference_text, sections


def test_docs_spec_md_is_current():
    assert (ROOT / "docs" / "spec.md").read_text() == reference_text(), (
        "docs/spec.md is stale: python -m sweeper.spec.reference > docs/spec.md")


def test_every_field_of_every_section_has_its_docstring_on_the_page():
    page = (ROOT / "docs" / "spec.md").read_text()
    for _, cls in sections():
        docs = field_docs(cls)
        for field in dataclasses.fields(cls):
            assert docs.get(field.name), f"{cls.__name__}.{field.name} has no docstring"
            assert f"| `{field.name}` |" in page and cell(docs[field.name]) in page, field.name


def test_a_field_inherited_from_a_base_takes_the_base_docstring():
    from sweeper.contract.configs import AdamWConfig
    from sweeper.spec.finetuning import FinetuningSpec

    assert field_docs(FinetuningSpec)["weight_decay"] == field_docs(AdamWConfig)["weight_decay"] != ""
