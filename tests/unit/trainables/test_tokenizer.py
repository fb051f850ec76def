"""`data.mask_token` (trainables.tokenizer): a Llama-3-shaped tokenizer's first reserved special
token as the mask, the vocabulary unchanged, as the authors' code does; an added [MASK] row by
default or where there is no reserved token; the corpus keyed by the setting only away from it."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from tokenizers import AddedToken

from sweeper.contract.configs import CorpusConfig
from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study
from sweeper.run.corpora import corpus_config, corpus_dir
from sweeper.store.layout import StudyLayout
from trainables.corpus_prep import prepare_corpus
from trainables.tokenizer import load_or_train_tokenizer

from conftest import ROOT
from tiny_checkpoints import train_tokenizer

RESERVED = [f"<|reserved_special_token_{i}|>" for i in (0, 1, 2)]


def llama_tokenizer(folder: Path, reserved: bool) -> str:
    """A tiny Llama-3-shaped tokenizer (BOS, EOS, no mask, no pad), with Llama-3's reserved
    special tokens when `reserved` (added after the vocabulary, numbered up, as in Llama-3)."""
    tokenizer = train_tokenizer("llama")
    if reserved:
        tokenizer.add_tokens([AddedToken(token, special=True) for token in RESERVED], special_tokens=True)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> dict[bool, str]:
    root = tmp_path_factory.mktemp("tokenizers")
    return {reserved: llama_tokenizer(root / str(reserved), reserved) for reserved in (True, False)}


def test_reserved_takes_the_first_reserved_token_and_keeps_the_vocabulary(tokenizers):
    from transformers import AutoTokenizer

    plain = AutoTokenizer.from_pretrained(tokenizers[True])
    assert plain.mask_token is None
    reserved = load_or_train_tokenizer(tokenizers[True], [], 0, mask_token="reserved")
    assert reserved.mask_token == RESERVED[0] and len(reserved) == len(plain)
    assert reserved.mask_token_id == plain.convert_tokens_to_ids(RESERVED[0])
    assert reserved.mask_token_id in reserved.all_special_ids
    added = load_or_train_tokenizer(tokenizers[True], [], 0)
    assert added.mask_token == "[MASK]" and len(added) == len(plain) + 1 and added.mask_token_id == len(plain)


def test_reserved_without_a_reserved_token_adds_the_row_and_says_so(tokenizers, capsys):
    tokenizer = load_or_train_tokenizer(tokenizers[False], [], 0, mask_token="reserved")
    assert tokenizer.mask_token == "[MASK]"
    assert "has no reserved special token: [MASK] is added as a new row" in capsys.readouterr().out


def test_a_corpus_prepared_with_the_reserved_mask(tokenizers, tmp_path):
    (tmp_path / "docs.txt").write_text("".join(f"the cat sat {i % 31}\n" for i in range(300)))
    meta = {}
    for mask in ("added", "reserved"):
        config = CorpusConfig(source=str(tmp_path / "docs.txt"), tokenizer=tokenizers[True], mask_token=mask)
        meta[mask] = prepare_corpus(config, str(tmp_path / mask), workers=0)
    assert meta["reserved"]["vocab_size"] == meta["added"]["vocab_size"] - 1
    assert meta["reserved"]["mask_token_id"] < meta["reserved"]["vocab_size"]
    assert meta["reserved"]["mask_token_id"] in meta["reserved"]["special_ids"]
    assert meta["reserved"]["tokens"] == meta["added"]["tokens"]  # the text encodes the same


def test_the_corpus_key_follows_the_mask_only_away_from_its_default():
    spec = load_study(ROOT / "tests" / "specs" / "pipeline.yaml").spec
    plan, layout = plan_study(spec), StudyLayout("/study")
    reserved = replace(spec, data=replace(spec.data, mask_token="reserved"))
    assert "mask_token" not in spec.data.identity() and reserved.data.identity()["mask_token"] == "reserved"
    # A trained WordPiece has its own [MASK]: the setting does not reach it.
    assert corpus_dir(layout, corpus_config(reserved, plan, None)) == corpus_dir(
        layout, corpus_config(spec, plan, None)
    )
    hub = corpus_dir(layout, corpus_config(spec, plan, "some/tokenizer"))
    assert corpus_dir(layout, corpus_config(reserved, plan, "some/tokenizer")) != hub
    # Sample lengths are cut from the stream as it is read: the same corpus serves both.
    variable = replace(spec, data=replace(spec.data, sample_lengths="variable"))
    assert variable.data.identity()["sample_lengths"] == "variable" and "sample_lengths" not in spec.data.identity()
    assert corpus_dir(layout, corpus_config(variable, plan, None)) == corpus_dir(
        layout, corpus_config(spec, plan, None)
    )
