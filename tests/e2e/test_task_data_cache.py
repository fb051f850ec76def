"""Task data prepared on a real local Ray head: split from tests/unit/store/test_cache_keys.py."""
from __future__ import annotations

import json

import pytest

from conftest import nano_study, run_sweeper
from sweeper.store.cache_keys import tokenizer_digest
from sweeper.store.layout import StudyLayout
from sweeper.store.results import read_trials


@pytest.mark.e2e
def test_a_retrained_tokenizer_of_the_same_size_prepares_new_task_data(ray_head, tmp_path):
    """A nano study (one 12-step run, one task) rerun with `--recompute-changed` after
    `data.tokenizer_sample_documents` changed: a new corpus trains a tokenizer of the same
    vocabulary size, and the task is prepared again with it (before #29 the rerun reused the task
    data of the old tokenizer: other token ids, no error); the retrained run's trials read it."""
    finetuning = ("  tasks: [wordnet-supersense-cls]\n  learning_rates: [0.001]\n  seeds: [0]\n  max_steps: 4\n"
                  "  max_train_examples: 64\n  max_eval_examples: 32\n")
    text = nano_study("retokenized", "    - objective: mlm\n      mask_ratio: [0.4]\n", finetuning)
    text = text.replace("vocab_size: 1024,", "vocab_size: 256, tokenizer_sample_documents: 300,")
    spec, study, tasks = tmp_path / "spec.yaml", tmp_path / "study", tmp_path / "study" / "cache" / "tasks"
    spec.write_text(text)
    first = run_sweeper("run", str(spec), "--storage", str(study), address=ray_head[0])
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-3000:]
    prepared = {p.name: json.loads((p / "meta.json").read_text()) for p in tasks.iterdir()}
    (old_corpus,) = (study / "cache").glob("corpus-*")
    old_tokenizer = tokenizer_digest(str(old_corpus / "tokenizer"))
    assert {meta.get("tokenizer_digest") for meta in prepared.values()} == {old_tokenizer}

    spec.write_text(text.replace("tokenizer_sample_documents: 300", "tokenizer_sample_documents: 200"))
    second = run_sweeper("run", str(spec), "--recompute-changed", "--storage", str(study), address=ray_head[0])
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-3000:]
    (new_corpus,) = set((study / "cache").glob("corpus-*")) - {old_corpus}
    sizes = {json.loads((c / "corpus_meta.json").read_text())["vocab_size"] for c in (old_corpus, new_corpus)}
    assert sizes == {256}, "the tokenizer keeps its vocabulary size"
    new_tokenizer = tokenizer_digest(str(new_corpus / "tokenizer"))
    assert new_tokenizer != old_tokenizer
    new = {p.name: json.loads((p / "meta.json").read_text()) for p in tasks.iterdir() if p.name not in prepared}
    assert len(new) == len(prepared), "the task is prepared again"
    assert {meta.get("tokenizer_digest") for meta in new.values()} == {new_tokenizer}
    rows = read_trials(StudyLayout(str(study))).to_pandas()
    assert set(rows["status"]) == {"ok"}
