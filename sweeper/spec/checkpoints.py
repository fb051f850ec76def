"""Checkpoints the study did not train (`finetuning.checkpoints`), as typed dataclasses.

Each entry is fine-tuned like the study's own checkpoints: the same tasks, learning rates,
seeds, swept fields and search. Its source is a Hugging Face hub id (`hf:org/model`), a local
folder or an object-store prefix (`s3://bucket/path`, `gs://...`) holding a `config.json`, the
weights and (unless `tokenizer` says otherwise) the tokenizer. The values are checked here;
whether the source can be read is the plan's question (sweeper.plan.checkpoint_sources), asked when the
spec is loaded.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from sweeper.contract.configs import non_blank
from sweeper.spec.names import external_name_problem, location_problem
from sweeper.spec.reading import shown

HUB_PREFIX = "hf:"
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
"""A hub repository id: `name` or `org/name` (the hub's own character set)."""


def source_problem(source: str) -> str | None:
    """Why `source` cannot name a checkpoint (or a tokenizer), or None."""
    if source.startswith(HUB_PREFIX):
        repo = source[len(HUB_PREFIX):]
        if not HUB_ID.match(repo):
            return f"{shown(source)} is not hf:<org>/<name> (a Hugging Face hub model id)"
        return None
    return location_problem(source)


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointMeta:
    """What the report needs to place a checkpoint among the study's own in the findings; a
    checkpoint without an objective is reported in every table but left out of the findings."""

    objective: str | None = None
    """Its pretraining objective as the study names them: mlm, clm, clm-mlm (or another name)."""
    parameters: int | None = None
    """Parameters of the model (None: counted from its config.json)."""
    tokens_seen: int | None = None
    """Pretraining tokens behind it."""
    mask_ratio: float | None = None
    """MLM masking ratio of its (last) masking phase."""

    def check(self):
        yield from non_blank(self, "objective")
        for key in ("parameters", "tokens_seen"):
            value = getattr(self, key)
            if value is not None and value <= 0:
                yield key, f"must be positive, got {value}"
        if self.mask_ratio is not None and not 0 < self.mask_ratio < 1:
            yield "mask_ratio", f"must lie in (0, 1), got {self.mask_ratio}"


@dataclass(frozen=True, kw_only=True, slots=True)
class ExternalCheckpointSpec:
    """One checkpoint from elsewhere, fine-tuned on the study's grid under its `name`."""

    name: str
    """Its name in the results and the report (the `checkpoint_id` and `run_name` columns)."""
    source: str
    """hf:<org>/<model> (hub), a local folder, or an s3:// / gs:// prefix holding config.json,
    the weights and the tokenizer."""
    revision: str | None = None
    """Hub sources: a commit, tag or branch (default main), resolved to a commit when planned."""
    tokenizer: str | None = None
    """Where its tokenizer is, in the same forms as `source` (default: the source's own)."""
    meta: CheckpointMeta = field(default_factory=CheckpointMeta)
    """What the findings need to place it (objective, size, tokens seen)."""

    def check(self):
        if problem := external_name_problem(self.name):
            yield "name", problem
        for key in ("source", "tokenizer"):
            if getattr(self, key) is not None and (problem := source_problem(getattr(self, key))):
                yield key, problem
        if self.revision is not None:
            if not self.source.startswith(HUB_PREFIX):
                yield "revision", f"a revision goes with a hub source (hf:...); {shown(self.source)} is a folder"
            elif not self.revision.strip() or "\x00" in self.revision:
                yield "revision", f"must name a commit, tag or branch, got {shown(self.revision)}"

    @property
    def is_hub(self) -> bool:
        return self.source.startswith(HUB_PREFIX)
