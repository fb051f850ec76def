"""What a fine-tuning task is (`TaskInfo`): where its rows come from, how their columns map onto
its family's fields, and how its splits are drawn. Pure data: it travels to the workers inside
each trial's config, and its fields enter every trial key of the task (`TaskInfo.identity`).
The shipped tasks are sweeper.contract.catalog's; `sweeper.contract.configs` imports this class
under its old name too.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import ClassVar


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskInfo:
    """A fine-tuning data set: where its rows come from and how they map onto its family's fields.

    Its fields are part of every trial key of the task (`identity`): a field added later enters
    the key only when it is set, so the tasks defined before it keep their keys."""

    name: str
    family: str
    """A registered task family (sweeper.contract.registry)."""
    category: str
    """Report category: SC, TC, QA, IR, or a plugin family's own."""
    source: str
    """Built-in file name, local path, or hub dataset id (`name:config`)."""
    metric: str
    text_fields: tuple[str, ...] = ("sentence",)
    """Columns joined into one input; with prefixes for sentence pairs."""
    field_prefixes: tuple[str, ...] = ("",)
    """Text put before each text field; retrieval with a `beir` or `mldr-corpus` schema: the
    query's and the document's prefixes (the authors': "Query: ", "Document: ")."""
    label_field: str = "label"
    label_names: tuple[str, ...] = ()
    """Label vocabulary when the source stores integer ids (hub datasets)."""
    train_split: str = "train"
    test_split: str = "validation"
    split_column: str | None = None
    """For single-file sources: the column that says which split a row belongs to."""
    schema: str = "columns"
    """Row layout: `columns` (text/label fields above), QA `squad` | `record`, retrieval
    `msmarco` | `pairs` (query, answer) | `mldr` (positive/negative passages) | `beir` (BEIR
    queries, corpus and `<source>-qrels`) | `mldr-corpus` (MLDR queries with a corpus config);
    trainables.tasks.adapters reads each."""
    data_files: dict = field(default_factory=dict)
    """Hub sources without a builder that `datasets` 5 runs (script datasets): split -> files in
    the hub repository, read with the `json` builder."""
    with_no_answer: bool = False
    """Extractive QA: questions may have no answer in the context (SQuAD v2 rules)."""
    train_task: str | None = None
    """Retrieval: an evaluation-only set scored with the model trained on this task."""
    validation_split: str | None = None
    """The source's own validation split, used as it is (the authors' TC copies; MS MARCO's and
    MLDR's qrels). None: validation is 5 % of train drawn with seed 42 (the GLUE / SQuAD rule), or
    for an evaluation-only set `validation_share` of its evaluation split."""
    validation_share: float | None = None
    """An evaluation-only set without a validation split: the share of its evaluation split (of its
    queries, for qrels) drawn with seed 42 for validation, the rest being test (None: 0.05; NQ: 0.5)."""
    validation_draw: str | None = None
    """How 5 % of train becomes validation: None, the sweeper's seeded shuffle (seed 42);
    `train_test_split`, the rows `datasets`' `train_test_split(train_size=0.95, seed=42)` picks
    (the authors' exact GLUE, SQuAD and ReCoRD validation sets)."""
    train_source: str | None = None
    """Where the training rows come from when not `source` (MS MARCO: the authors' query / positive
    pairs; the qrels source holds no training split)."""

    ADDED: ClassVar = ("validation_split", "validation_share", "validation_draw", "train_source")
    """Fields added after trial keys were pinned: hashed only when set (tests/unit/plan/test_pinned_keys.py)."""

    def identity(self) -> dict:
        """What trial keys and prepared-data keys hash: every field, less the ADDED ones left unset."""
        return {key: value for key, value in asdict(self).items() if key not in self.ADDED or value is not None}
