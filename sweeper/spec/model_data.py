"""The `model` and `data` sections of a spec: the architecture every run starts from (a preset and
its overrides) and the corpus with its tokenizer, as typed dataclasses.

Every field has a one-line docstring; the shipped YAML files repeat them as comments. Each
dataclass checks its own values in `check()`, returning (key, reason) pairs.
"""
from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field, fields
from typing import ClassVar, Literal

from sweeper.contract.catalog import MODEL_PRESETS
from sweeper.contract.configs import MIN_SAMPLE, non_blank, positive, seeds
from sweeper.spec.reading import shown, suggestion
from sweeper.spec.settings import override_items, override_problems


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpec:
    preset: str = "tiny"
    """Architecture preset: nano, tiny, mini (CPU) or 210m, 610m, 1b, 1b-authors (paper Table 1)."""
    overrides: dict = field(default_factory=dict)
    """LlamaEncoderConfig fields replacing the preset's (e.g. num_hidden_layers: 2); a grid
    (num_hidden_layers: [2, 4]) plans one run per value."""

    def check(self):
        if self.preset not in MODEL_PRESETS:
            yield "preset", f"unknown preset {shown(self.preset)}{suggestion(self.preset, list(MODEL_PRESETS))}"
        yield from override_problems(self.overrides)

    def override_grid(self) -> dict[str, tuple]:
        """Each override's values, in the order given (a plain value: one; a grid: its items)."""
        return {key: tuple(item for _, item in override_items(key, value)) for key, value in self.overrides.items()}

    def override_points(self) -> list[dict]:
        """Every combination of the overrides' values (one dict when nothing is swept)."""
        grid = self.override_grid()
        return [dict(zip(grid, values)) for values in itertools.product(*grid.values())]

    def architecture_problem(self, preset: str, overrides: dict | None = None) -> str | None:
        """Why the preset with these overrides (default: the section's, unswept) is not a model
        the encoder can build."""
        config = {**MODEL_PRESETS[preset], **(self.overrides if overrides is None else overrides)}
        hidden, heads, kv_heads = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
        if hidden % heads:
            return f"hidden_size {hidden} is not divisible by num_attention_heads {heads}"
        if heads % kv_heads:
            return f"num_attention_heads {heads} is not divisible by num_key_value_heads {kv_heads}"
        if hidden // heads % 2:
            return f"the head size (hidden_size / num_attention_heads = {hidden // heads}) must be even (rotary)"
        return None


@dataclass(frozen=True, kw_only=True, slots=True)
class DataSpec:
    corpus: str = "wordnet"
    """Pretraining text: built-in `wordnet`, a local .jsonl/.parquet/.txt path, or a hub dataset id."""
    text_column: str = "text"
    """Column holding the text in the corpus rows."""
    tokenizer: str = "train-wordpiece"
    """`train-wordpiece` (trained on the corpus) or a Hugging Face tokenizer name or path."""
    vocab_size: int = 2048
    """Vocabulary size when the tokenizer is trained here."""
    seq_len: int = 128
    """Tokens per packed pretraining row (the authors' packer block: 2,048, two samples a row under
    sample_lengths: variable); a grid plans one run per value."""
    max_documents: int | None = None
    """Read at most this many corpus documents (None: all)."""
    order_seed: int = 0
    """Seed of the sample order, shared by every run (the same data order for all objectives)."""
    max_tokens: int | None = None
    """Tokens of the prepared corpus, rounded up to whole order blocks (65,536 x seq_len tokens);
    None: what the longest run reads plus 5 %. Reading stops there."""
    tokenizer_sample_documents: int = 100_000
    """A tokenizer trained here (`train-wordpiece`) learns from the corpus's first this many documents."""
    sample_lengths: Literal["fixed", "variable"] = "fixed"
    """`fixed`: every sample is a seq_len-token window, positions and attention per document;
    `variable`: the authors' packer (12 to seq_len - 12 tokens, two samples per seq_len-token
    row, positions and attention per sample: trainables.corpus)."""
    mask_token: Literal["added", "reserved"] = "added"
    """MLM's mask token where the tokenizer has none: `added` (a [MASK] row) or `reserved` (its
    first reserved special token, vocabulary unchanged, as the authors do; `added` without one)."""

    GRID_FIELDS: ClassVar = ("seq_len",)
    """Fields that take a grid: one run per value (sweeper.plan.runs)."""

    def check(self):
        yield from non_blank(self, "corpus", "text_column", "tokenizer")
        yield from positive(self, "vocab_size", "seq_len", "max_documents", "max_tokens", "tokenizer_sample_documents")
        yield from seeds(self, "order_seed")
        if self.sample_lengths == "variable":
            for seq_len in (self.seq_len if isinstance(self.seq_len, (list, tuple)) else (self.seq_len,)):
                if isinstance(seq_len, int) and seq_len < 2 * MIN_SAMPLE:
                    yield "seq_len", (f"{seq_len} is below {2 * MIN_SAMPLE}: variable samples are {MIN_SAMPLE} "
                                      f"tokens or more, two per row")

    def identity(self) -> dict:
        """What enters run keys: every field, less those added later while at their defaults
        (so the keys of studies recorded before them stay the same)."""
        identity, defaults = asdict(self), {f.name: f.default for f in fields(self)}
        for added in ("max_tokens", "tokenizer_sample_documents", "sample_lengths", "mask_token"):
            if identity[added] == defaults[added]:
                del identity[added]
        return identity
