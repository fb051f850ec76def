"""Sequence and token classification under both conventions (`finetuning.scoring`).

paper: EncodEval's inputs (text + EOS, no special tokens), every sub-token of a word labelled by
character offsets, each word's tag by majority vote, scikit-learn's per-sentence macro-F1;
standard: today's arrays, bit for bit. The tokenizers are built here from a fixed vocabulary
(a WordPiece like the one the project trains, and a byte-level BPE like Llama-3's), so every
token below is known in advance.
"""
from __future__ import annotations

import hashlib
import json
import string

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import f1_score

from sweeper.contract.configs import AdamWConfig, FinetuneProtocol, TaskInfo
from trainables.model import LlamaEncoderConfig, LlamaEncoderModel
from trainables.tasks.classification import SequenceClassification, TokenClassification, majority_vote, tag_scores
from trainables.tasks.data import load_task_splits
from trainables.tasks.metrics import entity_f1, macro_f1, sentence_macro_f1
from trainables.tasks.packing import PackedBackbone

from test_task_adapters import local


TAGS = ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")
TC = TaskInfo(name="toy-tags", family="token_classification", category="TC", source="toy", metric="f1",
              text_fields=("tokens",), label_field="tags", label_names=TAGS)
SC = TaskInfo(name="toy-pairs", family="sequence_classification", category="SC", source="toy", metric="accuracy",
              text_fields=("premise", "hypothesis"), field_prefixes=("Premise: ", "Hypothesis: "),
              label_names=("yes", "no"))


def protocol(scoring: str) -> FinetuneProtocol:
    return FinetuneProtocol(learning_rate=1e-3, batch_size=4, max_steps=1, epochs=1.0, max_length=16,
                            warmup_ratio=0.1, optimizer=AdamWConfig(), scoring=scoring)


def wordpiece(eos: str | None = None):
    """The project's WordPiece layout ([CLS] $A [SEP], lower case) on a fixed vocabulary: single
    characters and a few whole words and suffixes, so "Yorkers" is york + ##ers."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    characters = list(string.ascii_lowercase + string.digits + string.punctuation)
    vocab = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + ([eos] if eos else []) + characters
             + ["##" + c for c in characters] + ["the", "new", "york", "cricket", "over", "take", "cheer", "a",
                                                  "of", "to", "and", "in", "##ers", "##ing", "##ed"])
    tokenizer = Tokenizer(models.WordPiece(vocab={t: i for i, t in enumerate(dict.fromkeys(vocab))}, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", eos_token=eos)


def byte_level():
    """Llama-3's layout: byte-level BPE, a word's leading space inside its first token (offsets
    not trimmed), BOS added by the post-processor, EOS a special token of the vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    merges = [("Ġ", "n"), ("Ġn", "e"), ("Ġne", "w"), ("Ġ", "y"), ("o", "r"), ("Ġy", "or"), ("Ġyor", "k")]
    vocab = {t: i for i, t in enumerate(sorted(alphabet) + ["".join(m) for m in merges]
                                         + ["<|begin_of_text|>", "<|end_of_text|>"])}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    bos = vocab["<|begin_of_text|>"]
    tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<|begin_of_text|>",
                                   eos_token="<|end_of_text|>", pad_token="<|end_of_text|>")


def tokens(tokenizer, ids, mask) -> list[str]:
    return tokenizer.convert_ids_to_tokens(ids[mask.astype(bool)].tolist())


# --- the metric and the vote ---

def test_sentence_macro_f1_is_the_mean_of_scikit_learns_macro_f1_per_sentence():
    gold = [["O", "B-PER", "O"], ["B-LOC", "I-LOC", "O", "O"], ["O", "O"]]
    predicted = [["O", "O", "B-LOC"], ["B-LOC", "I-LOC", "O", "B-PER"], ["O", "O"]]
    # Sentence 1 by hand: tags O, B-PER, B-LOC (gold or predicted); O: tp 1, fp 1, fn 1 -> 1/2; the others 0.
    by_hand = [f1_score(g, p, average="macro") for g, p in zip(gold, predicted)]
    assert by_hand[0] == pytest.approx(1 / 6)
    assert sentence_macro_f1(predicted, gold) == pytest.approx(100 * np.mean(by_hand))
    pooled = f1_score(sum(gold, []), sum(predicted, []), average="macro")  # one macro-F1 over the whole split
    assert not np.isclose(sentence_macro_f1(predicted, gold), 100 * pooled)
    assert sentence_macro_f1(gold, gold) == 100.0
    assert np.isnan(sentence_macro_f1([], []))


@settings(max_examples=100, deadline=None)  # hypothesis's default; each is ~10 ms of scikit-learn
@given(st.lists(st.tuples(st.sampled_from(TAGS), st.sampled_from(TAGS)), min_size=1, max_size=30))
def test_macro_f1_equals_scikit_learns_bit_for_bit(pairs):
    gold, predicted = [g for g, _ in pairs], [p for _, p in pairs]
    assert macro_f1(gold, predicted) == f1_score(gold, predicted, average="macro")


def test_the_majority_vote_and_its_ties_as_encodevals_expression():
    assert majority_vote([3, 1, 3]) == 3 and majority_vote([1, 1, 3]) == 1
    assert majority_vote([3, 1]) == 1 and majority_vote([1, 3]) == 1  # a tie: the smaller id, in either order
    # An id at or past the set's 8 slots sits at slot id % 8: 9 (slot 1) comes before 2 (slot 2).
    assert majority_vote([2, 9]) == 9 and majority_vote([9, 2]) == 9


def test_tag_scores_score_the_words_the_input_reached_under_paper_and_every_word_under_standard():
    gold = [["B-PER", "I-PER", "O", "B-LOC"]]
    predicted = [["B-PER", "I-PER", "O", None]]  # truncation cut the last word
    scores = tag_scores(predicted, gold)
    assert scores["paper"] == 100.0  # three words reached, all right
    assert scores["standard"] == entity_f1([["B-PER", "I-PER", "O", "O"]], gold) == pytest.approx(200 / 3)


# --- the paper's inputs and labels ---

def test_paper_token_labels_follow_the_character_offsets_of_every_sub_token():
    tokenizer = wordpiece()
    rows = [{"tokens": ["New", "Yorkers", "cheer"], "tags": [1, 0, 0]}]
    arrays, meta = TokenClassification.encode({"test": rows}, TC, tokenizer, 8, {"scoring": "paper"})
    split = arrays["test"]
    assert meta == {"labels": list(TAGS), "scoring": "paper"}
    # "new yorkers cheer" + EOS (the tokenizer has none: its separator), no [CLS], padded to 8.
    assert tokens(tokenizer, split["input_ids"][0], split["attention_mask"][0]) == [
        "new", "york", "##ers", "cheer", "[SEP]"]
    assert split["word_index"][0].tolist() == [0, 1, 1, 2, -1, -1, -1, -1]
    assert split["labels"][0].tolist() == [1, 0, 0, 0, -100, -100, -100, -100]
    assert json.loads(str(split["gold_tags"][0])) == ["B-LOC", "O", "O"]


def test_paper_token_labels_on_a_byte_level_tokenizer_give_the_leading_space_to_the_next_word():
    tokenizer = byte_level()
    rows = [{"tokens": ["new", "york", "ok"], "tags": [1, 2, 0]}]
    split = TokenClassification.encode({"test": rows}, TC, tokenizer, 10, {"scoring": "paper"})[0]["test"]
    assert tokens(tokenizer, split["input_ids"][0], split["attention_mask"][0]) == [
        "n", "e", "w", "Ġyork", "Ġ", "o", "k", "<|end_of_text|>"]
    assert split["word_index"][0].tolist() == [0, 0, 0, 1, 2, 2, 2, -1, -1, -1]
    assert split["labels"][0].tolist() == [1, 1, 1, 2, 0, 0, 0, -100, -100, -100]
    standard = TokenClassification.encode({"test": rows}, TC, tokenizer, 10, {})[0]["test"]
    assert tokens(tokenizer, standard["input_ids"][0], standard["attention_mask"][0])[0] == "<|begin_of_text|>"


def test_a_word_cut_by_truncation_is_scored_on_what_is_left_and_a_word_cut_off_is_not_scored():
    tokenizer = wordpiece()
    rows = [{"tokens": ["cheer", "Yorkers", "cheer"], "tags": [0, 3, 4]}]
    arrays, meta = TokenClassification.encode({"test": rows}, TC, tokenizer, 2, {"scoring": "paper"})
    split = arrays["test"]
    # cheer | york ##ers | cheer | EOS, cut to 2 tokens: "Yorkers" keeps one sub-token, the last word and EOS go.
    assert tokens(tokenizer, split["input_ids"][0], split["attention_mask"][0]) == ["cheer", "york"]
    assert split["word_index"][0].tolist() == [0, 1] and split["labels"][0].tolist() == [0, 3]

    class FirstIsO(torch.nn.Module):  # "O" at the first position, B-PER after it
        def forward(self, ids, mask):
            return torch.nn.functional.one_hot(3 * (torch.arange(ids.shape[1]) > 0), len(TAGS)).float().expand(
                *ids.shape, len(TAGS))

    evaluation = TokenClassification.evaluate(FirstIsO(), split, meta, 4, torch.device("cpu"), protocol("paper"))
    assert evaluation.predictions == [{"example": 0, "prediction": ["O", "B-PER", None],
                                       "gold": ["O", "B-PER", "I-PER"]}]
    assert evaluation.scores["paper"] == 100.0  # the two words the input reached, both right
    assert evaluation.scores["standard"] == 0.0  # the word cut off counts as "O": B-PER alone is not the PER span


def test_paper_sequence_inputs_end_with_eos_and_have_no_bos():
    rows = [{"premise": "the cat", "hypothesis": "a cat", "label": 0}]
    text = "Premise: the cat\nHypothesis: a cat"
    for tokenizer, eos, bos in ((wordpiece(), "[SEP]", "[CLS]"), (wordpiece(eos="</s>"), "</s>", "[CLS]"),
                                (byte_level(), "<|end_of_text|>", "<|begin_of_text|>")):
        paper = SequenceClassification.encode({"test": rows}, SC, tokenizer, 64, {"scoring": "paper"})[0]["test"]
        fed = paper["input_ids"][0][paper["attention_mask"][0].astype(bool)].tolist()
        assert fed == tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.convert_tokens_to_ids(eos)]
        assert bos not in tokens(tokenizer, paper["input_ids"][0], paper["attention_mask"][0])
        standard = SequenceClassification.encode({"test": rows}, SC, tokenizer, 64, {})[0]["test"]
        assert tokens(tokenizer, standard["input_ids"][0], standard["attention_mask"][0])[0] == bos
    cut = SequenceClassification.encode({"test": rows}, SC, wordpiece(), 3, {"scoring": "paper"})[0]["test"]
    assert tokens(wordpiece(), cut["input_ids"][0], cut["attention_mask"][0]) == ["p", "##r", "##e"]  # EOS cut too


def test_a_tokenizer_without_eos_or_separator_is_refused_by_name():
    tokenizer = byte_level()
    tokenizer.eos_token = None
    with pytest.raises(ValueError, match="neither an EOS nor a separator"):
        SequenceClassification.encode({"test": [{"premise": "a", "hypothesis": "b", "label": 0}]}, SC, tokenizer, 8,
                                      {"scoring": "paper"})


# --- evaluate and rescore ---

@pytest.mark.parametrize("name", ["conll2003", "uner-en", "mnli"])
@pytest.mark.parametrize("scoring", ["paper", "standard"])
def test_evaluate_and_rescore_agree_after_a_json_round_trip(name, scoring):
    tokenizer = wordpiece()
    task = local(name)
    family = TokenClassification if task.family == "token_classification" else SequenceClassification
    arrays, meta = family.encode(load_task_splits(task, None, None), task, tokenizer, 8, {"scoring": scoring})
    torch.manual_seed(0)
    backbone = LlamaEncoderModel(LlamaEncoderConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2))
    model = family.build(PackedBackbone(backbone), meta).eval()
    reached, words = 0, 0
    for split in ("validation", "test"):
        with torch.no_grad():
            evaluation = family.evaluate(model, arrays[split], meta, 2, torch.device("cpu"), protocol(scoring))
        assert set(evaluation.scores) == set(family.METRICS) == {"paper", "standard"}
        assert [p["example"] for p in evaluation.predictions] == list(range(len(arrays[split]["input_ids"])))
        stored = json.loads(json.dumps(evaluation.predictions))
        for convention in ("paper", "standard"):
            assert family.rescore(stored, convention) == evaluation.scores[convention]
        with torch.no_grad():
            assert family.score(model, arrays[split], meta, 2, torch.device("cpu"), protocol(scoring)) == \
                evaluation.scores[scoring]
        if family is TokenClassification:
            assert [len(p["prediction"]) for p in stored] == [len(p["gold"]) for p in stored]
            reached += sum(p is not None for row in stored for p in row["prediction"])
            words += sum(len(p["gold"]) for p in stored)
        else:
            assert all(isinstance(p["prediction"], int) and isinstance(p["gold"], int) for p in stored)
    if family is TokenClassification:
        assert 0 < reached < words, "max_length 8 reaches some words, not all"


def test_token_predictions_are_the_vote_of_every_sub_token_under_paper_and_the_first_under_standard():
    """A head that predicts each token's position parity: "Yorkers" (york ##ers) splits its vote."""
    tokenizer = wordpiece()
    rows = [{"tokens": ["cheer", "Yorkers", "new", "Yorkers"], "tags": [0, 3, 0, 1]}]

    class Parity(torch.nn.Module):
        def forward(self, ids, mask):
            positions = torch.arange(ids.shape[1]).expand_as(ids)
            return torch.nn.functional.one_hot(1 + positions % 2, len(TAGS)).float()  # B-LOC even, I-LOC odd

    for scoring, expected in (("paper", ["B-LOC", "B-LOC", "I-LOC", "B-LOC"]),   # ties: B-LOC (id 1)
                              ("standard", ["I-LOC", "B-LOC", "B-LOC", "I-LOC"])):  # [CLS] at 0
        arrays, meta = TokenClassification.encode({"test": rows}, TC, tokenizer, 16, {"scoring": scoring})
        evaluation = TokenClassification.evaluate(Parity(), arrays["test"], meta, 4, torch.device("cpu"),
                                                  protocol(scoring))
        assert evaluation.predictions[0]["prediction"] == expected, scoring


def test_data_encoded_for_one_convention_is_not_scored_as_the_other():
    arrays, meta = TokenClassification.encode({"test": [{"tokens": ["new"], "tags": [1]}]}, TC, wordpiece(), 4,
                                              {"scoring": "paper"})
    with pytest.raises(ValueError, match="encoded for scoring: paper"):
        TokenClassification.evaluate(None, arrays["test"], meta, 4, torch.device("cpu"), protocol("standard"))


# --- the standard path, bit for bit ---

STANDARD_DIGESTS = {  # sha256 of every array, as TokenClassification/SequenceClassification.encode gave them at 5368251
    ("mnli", 48): "c55c6b207e47e7fcd20df335f99d31d1b1b3fa398f77377b34eb448d4b932ab1",
    ("mnli", 8): "bfcb612af6db408f7538e7db26cdc91d5bad291b7bc1173f1327bc6db5bb2a01",
    ("sst2", 48): "58e74bc982a0ae1078e0c01a5387ca2b3faa5f7af29f2957101f91abe0e1acf6",
    ("sst2", 8): "f26625db41928a13f295b4d1ac1ce43647022ad974cae1a9e80e924d00d61ece",
    ("conll2003", 48): "cdd4fe01d55b32cc629312efdf8ee907bbf47fd918b989397b0e8de13fb11ea7",
    ("conll2003", 8): "7df534bf83b55fd85480f0ce9dd1d21f55edf5e375d7ffd8792e1a35357594ab",
    ("ontonotes5", 48): "f55e6d1d64c7a7e40a5e494cd6a2aa2c0233f1e939ee98ac8132914683f67fa1",
    ("ontonotes5", 8): "5229dbe2fc339e27208042ad225e3010a99e07ba79668139c90fe9bee719c4e5",
}


@pytest.mark.parametrize("name, max_length", sorted(STANDARD_DIGESTS))
def test_the_standard_encoding_is_todays_bit_for_bit(name, max_length):
    task = local(name)
    family = TokenClassification if task.family == "token_classification" else SequenceClassification
    splits = load_task_splits(task, None, None)
    for options in ({}, {"scoring": "standard"}):
        arrays, meta = family.encode(splits, task, wordpiece(), max_length, options)
        digest = hashlib.sha256()
        for split in sorted(arrays):
            for key in sorted(arrays[split]):
                array = arrays[split][key]
                digest.update(f"{split}/{key}/{array.dtype}/{array.shape}".encode())
                digest.update(array.tobytes())
        assert digest.hexdigest() == STANDARD_DIGESTS[name, max_length]
        assert meta["scoring"] == "standard"


def test_offsets_tokenised_a_few_rows_at_a_time_give_the_same_arrays(monkeypatch):
    from trainables.tasks import classification

    task = local("conll2003")
    splits = load_task_splits(task, None, None)
    whole = TokenClassification.encode(splits, task, wordpiece(), 16, {"scoring": "paper"})[0]
    assert len(splits["train"]) == 5
    monkeypatch.setattr(classification, "OFFSET_ROWS", 2)  # the train split in calls of 2, 2 and 1 rows
    for split, arrays in TokenClassification.encode(splits, task, wordpiece(), 16, {"scoring": "paper"})[0].items():
        for key, array in arrays.items():
            assert np.array_equal(array, whole[split][key]), (split, key)


def test_a_trial_trains_and_scores_token_classification_on_the_papers_encoding(tmp_path, wordpiece_dir):
    from dataclasses import replace

    from sweeper.contract.configs import TrialConfig, TrialRuntime
    from sweeper.contract.registry import family_of, get_task
    from trainables.finetune_loop import run_trial
    from trainables.tasks import data as task_data

    task = get_task("wordnet-supersense-tag")
    family = family_of(task.family).implementation
    task_data.prepare_task_data(task, family, wordpiece_dir, 32, str(tmp_path), 64, 32, {"scoring": "paper"})
    meta, splits = task_data.load_prepared(str(tmp_path))
    assert meta["scoring"] == "paper"
    word_index = splits["train"]["word_index"]
    assert ((np.diff(word_index, axis=1) == 0) & (word_index[:, 1:] >= 0)).any(), "words of several sub-tokens"
    def trial(scoring: str) -> dict:
        return run_trial(TrialConfig(
            trial_key=scoring, task=task, family=family, seed=0, checkpoint_path=None,
            protocol=replace(protocol(scoring), max_length=32, max_steps=2), task_data_dir=str(tmp_path),
            runtime=TrialRuntime(micro_batch_size=4, eval_batch_size=16),
            random_init_config={"vocab_size": 512, "hidden_size": 32, "intermediate_size": 64,
                                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}))

    result = trial("paper")
    assert result["status"] == "ok" and 0 <= result["test_score"] <= 100, result
    with pytest.raises(ValueError, match="encoded for scoring: paper, the trial scores standard"):
        trial("standard")  # refused, not scored on the other convention's inputs
