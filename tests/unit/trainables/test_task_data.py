"""Task data: the paper's splits, and tokenisation once per (tokenizer, data set, max length)."""
from __future__ import annotations

import pytest

from dataclasses import replace

from sweeper.contract.configs import AdamWConfig, FinetuneProtocol, TrialConfig, TrialRuntime
from sweeper.contract.registry import family_of, get_task
from trainables.finetune_loop import run_trial
from trainables.tasks import data as task_data



FAMILY_SETTINGS = {"doc_stride": 8, "retrieval_temperature": 0.05}
PROTOCOL = FinetuneProtocol(learning_rate=None, batch_size=8, max_steps=3, epochs=1.0, max_length=32,
                            warmup_ratio=0.1, optimizer=AdamWConfig(betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1,
                                                                    grad_clip=1.0))
RUNTIME = TrialRuntime(micro_batch_size=4, eval_batch_size=16, threads=1)


def test_splits_follow_the_paper():
    task = get_task("wordnet-supersense-cls")
    splits = task_data.load_task_splits(task, None, None)
    rows = list(task_data.iter_rows(task.source))
    official_train = [r for r in rows if r["split"] == "train"]
    assert splits["test"] == [r for r in rows if r["split"] == "validation"], "test = the official validation split"
    assert len(splits["validation"]) == round(0.05 * len(official_train)), "validation = 5 % of train"
    assert len(splits["train"]) + len(splits["validation"]) == len(official_train)
    assert task_data.load_task_splits(task, None, None)["validation"] == splits["validation"], "seed 42, stable"


@pytest.mark.parametrize("name", ["wordnet-supersense-cls", "wordnet-supersense-tag", "wordnet-supersense-qa",
                                  "wordnet-usage-retrieval"])
def test_a_grid_of_trials_tokenises_each_data_set_once(tmp_path, monkeypatch, wordpiece_dir, name):
    task = get_task(name)
    family = family_of(task.family)
    out = tmp_path / "prepared"
    builds = []
    real_splits = task_data.load_task_splits
    monkeypatch.setattr(task_data, "load_task_splits", lambda *a: builds.append(1) or real_splits(*a))
    for _ in range(3):  # three prepare calls (say, three shards): one build
        meta = task_data.prepare_task_data(task, family.implementation, wordpiece_dir, 32, str(out), 48, 16,
                                           {"doc_stride": 8})
    assert builds == [1] and meta["sizes"] == {"train": 48, "validation": 16, "test": 16}
    assert meta["family"] == task.family and meta["summary"]  # the family's line for the prepare log

    # Trials read the prepared arrays and never load a tokenizer.
    import transformers

    def no_tokenizer(*args, **kwargs):
        raise AssertionError("a trial tokenised")
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", no_tokenizer)
    config = {"vocab_size": 512, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
              "num_attention_heads": 4, "num_key_value_heads": 2}
    settings = {key: FAMILY_SETTINGS[key] for key in family.settings}
    for lr, seed in [(1e-3, 0), (1e-3, 1), (3e-3, 0)]:
        result = run_trial(TrialConfig(
            trial_key=f"{lr}-{seed}", task=task, family=family.implementation, seed=seed, checkpoint_path=None,
            protocol=replace(PROTOCOL, learning_rate=lr, family_settings=settings), task_data_dir=str(out),
            runtime=RUNTIME, random_init_config=config))
        assert result["status"] == "ok" and 0 <= result["test_score"] <= 100
        assert result["trial_key"] == f"{lr}-{seed}" and result["learning_rate"] == lr
    assert builds == [1]


def test_trained_tokenizer_ids_do_not_depend_on_the_process(wordpiece_dir):
    """The WordPiece trainer numbers its tokens in hash-map order, which differs per process
    (the same tokens, other ids: other initial embeddings for the same study). The sweeper
    renumbers them: special tokens first, then the others sorted."""
    import json
    from pathlib import Path

    vocab = json.loads((Path(wordpiece_dir) / "tokenizer.json").read_text())["model"]["vocab"]
    by_id = sorted(vocab, key=vocab.get)
    assert by_id[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert by_id[5:] == sorted(by_id[5:]) and sorted(vocab.values()) == list(range(len(vocab)))
