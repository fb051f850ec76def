"""Sequence and token classification: encoders, heads, losses and scores, under both conventions.

Sequence classification: mean pooling + linear head, cross-entropy, accuracy; sentence pairs are
joined as "Premise: ...\nHypothesis: ..." by the task's field prefixes. Token classification: a
per-token linear head, cross-entropy over the labelled sub-tokens.

`settings["scoring"]` picks the convention the task data is encoded for (`finetuning.scoring`):
- standard: the tokenizer's own special tokens (e.g. [CLS] ... [SEP], or Llama-3's BOS); token
  classification feeds the words pre-split, labels each word's first sub-token only, and scores
  seqeval's entity-level micro-F1 ("entity_f1").
- paper: the authors' evaluation code, EncodEval (hgissbkh/EncodEval, branch MLM_vs_CLM),
  `encodeval/eval_tasks/sequence_classification_eval.py` and `token_classification_eval.py`
  (`tokenize`, `get_token_predictions_labels`, `compute_f1s`): the text + the EOS token, tokenised
  with `add_special_tokens=False` (no BOS), truncated to max_length (a truncated input loses its
  EOS, as theirs). Token classification joins the words with single spaces, labels every
  sub-token with the tag of the word its character offset falls in (EOS and padding -100), takes
  a word's predicted tag by majority vote of its sub-tokens (`majority_vote`), scores only the
  words with a sub-token in the input (a word truncation cut off entirely is not scored), and
  averages scikit-learn's per-sentence macro-F1 ("sentence_macro_f1",
  `trainables.tasks.metrics.sentence_macro_f1`).
Both conventions' scores come from the same predictions (`evaluate`): accuracy is the same under
both; for token classification the word tags of the trial's convention are scored both ways.
"""
from __future__ import annotations

import json

import numpy as np
import torch
import torch.nn.functional as F

from sweeper.contract.configs import FinetuneProtocol, TaskInfo
from trainables.tasks.family import Evaluation
from trainables.tasks.heads import LinearHead
from trainables.tasks.metrics import accuracy, entity_f1, sentence_macro_f1

IGNORE = -100
OFFSET_ROWS = 512
"""Rows tokenised per call where character offsets are needed (`words_by_offsets`)."""


def scoring_of(settings: dict) -> str:
    """The convention the task data is encoded for; data prepared before the setting existed is standard."""
    return settings.get("scoring", "standard")


def end_of_text(tokenizer) -> str:
    """The token the paper's inputs end with: the tokenizer's EOS; a tokenizer without one (the
    WordPiece tokenizer trained here) ends them with its separator token, [SEP]."""
    token = tokenizer.eos_token or tokenizer.sep_token
    if token is None:
        raise ValueError(f"tokenizer {tokenizer.name_or_path!r} has neither an EOS nor a separator token "
                         "to end the inputs of `scoring: paper` with")
    return token


def label_of(value, label_names: tuple[str, ...]) -> str:
    """Hub sources store integer class ids; the label vocabulary maps them to names."""
    return label_names[value] if isinstance(value, int) and label_names else str(value)


def label_vocabulary(task: TaskInfo, splits: dict[str, list[dict]],
                     first: str | None = None) -> tuple[list[str], dict[str, int]]:
    """(labels in id order, label name -> id): the task's `label_names`, else every value of its
    label field (a list per row for token tags) in every split, sorted, `first` (if seen) first.
    Every split's labels: a capped training sample can miss a label the test split has."""
    if task.label_names:
        labels = list(task.label_names)
    else:
        values = set()
        for row in (row for rows in splits.values() for row in rows):
            value = row[task.label_field]
            values.update(value if isinstance(value, list) else [value])
        labels = sorted(map(str, values))
        if first in labels:
            labels.remove(first)
            labels.insert(0, first)
    return labels, {name: i for i, name in enumerate(labels)}


def batch_width(split: dict, rows) -> int:
    """Columns up to the batch's last real token: beyond it every row is padding, which the
    packed backbone skips anyway, but heads, losses and the scatter back would still pay for."""
    columns = np.flatnonzero(split["attention_mask"][rows].any(0))
    return int(columns[-1]) + 1 if len(columns) else 1


def tensors(split: dict, rows, device, *keys) -> list[torch.Tensor]:
    """The batch's arrays, per-token ones cut to `batch_width`."""
    width = batch_width(split, rows)
    return [torch.from_numpy(split[key][rows][:, :width] if split[key].ndim == 2 else split[key][rows])
            .to(device=device, dtype=torch.int64) for key in keys]


def token_arrays(enc, rows: int, max_length: int) -> dict[str, np.ndarray]:
    return {"input_ids": np.asarray(enc["input_ids"], dtype=np.int32).reshape(rows, max_length),
            "attention_mask": np.asarray(enc["attention_mask"], dtype=np.int8).reshape(rows, max_length)}


class SequenceClassification:
    """`trainables.tasks.family.TaskFamily` for one label per input (a sentence or a pair)."""

    METRICS = {"standard": "accuracy", "paper": "accuracy"}

    @staticmethod
    def encode(splits: dict[str, list[dict]], task: TaskInfo, tokenizer, max_length: int, settings: dict):
        labels, index = label_vocabulary(task, splits)
        scoring = scoring_of(settings)
        special = {"add_special_tokens": False} if scoring == "paper" else {}
        ending = end_of_text(tokenizer) if scoring == "paper" else ""
        arrays = {}
        for split, rows in splits.items():
            texts = ["\n".join(prefix + str(row[field])
                               for field, prefix in zip(task.text_fields, task.field_prefixes)) + ending
                     for row in rows]
            enc = tokenizer(texts, truncation=True, max_length=max_length, padding="max_length", **special)
            arrays[split] = {
                **token_arrays(enc, len(rows), max_length),
                "labels": np.asarray([index[label_of(r[task.label_field], task.label_names)] for r in rows],
                                     dtype=np.int64),
            }
        return arrays, {"labels": labels, "scoring": scoring}

    @staticmethod
    def describe(meta: dict) -> str:
        return f"{len(meta['labels'])} labels"

    pooled = True

    @classmethod
    def build(cls, backbone, meta: dict):
        return LinearHead(backbone, len(meta["labels"]), pooled=cls.pooled)

    @staticmethod
    def train_size(split: dict) -> int:
        return len(split["input_ids"])

    @staticmethod
    def loss(model, split: dict, rows: np.ndarray, device, protocol: FinetuneProtocol) -> torch.Tensor:
        """Cross-entropy over every labelled unit: the input's label, or each labelled sub-token
        (the first of each word under standard scoring, every word's sub-token under paper)."""
        ids, mask, target = tensors(split, rows, device, "input_ids", "attention_mask", "labels")
        logits = model(ids, mask)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=IGNORE)

    @staticmethod
    def predict(model, split: dict, batch_size: int, device) -> np.ndarray:
        predictions = []
        for start in range(0, len(split["input_ids"]), batch_size):
            ids, mask = tensors(split, slice(start, start + batch_size), device, "input_ids", "attention_mask")
            predicted = model(ids, mask).argmax(-1).cpu().numpy()
            if predicted.ndim == 2:  # per token: back to the split's width (cut columns are padding)
                predicted = np.pad(predicted, ((0, 0), (0, split["input_ids"].shape[1] - predicted.shape[1])))
            predictions.append(predicted)
        return np.concatenate(predictions) if predictions else np.zeros((0,), dtype=np.int64)

    @staticmethod
    def check_convention(meta: dict, protocol: FinetuneProtocol) -> None:
        """Data encoded for one convention scored as the other would score the wrong inputs in silence."""
        if scoring_of(meta) != protocol.scoring:
            raise ValueError(f"task data of {meta.get('task', 'this task')} was encoded for "
                             f"scoring: {scoring_of(meta)}, the trial scores {protocol.scoring}")

    @classmethod
    def evaluate(cls, model, split: dict, meta: dict, batch_size: int, device,
                 protocol: FinetuneProtocol) -> Evaluation:
        """Accuracy (the same under both conventions); predictions and gold are label ids."""
        cls.check_convention(meta, protocol)
        predicted = cls.predict(model, split, batch_size, device)
        predictions = [{"example": i, "prediction": int(p), "gold": int(g)}
                       for i, (p, g) in enumerate(zip(predicted, split["labels"]))]
        return Evaluation(scores={name: accuracy(predicted, split["labels"]) for name in cls.METRICS},
                          predictions=predictions)

    @staticmethod
    def rescore(predictions: list[dict], scoring: str) -> float:
        return accuracy(np.asarray([p["prediction"] for p in predictions], dtype=np.int64),
                        np.asarray([p["gold"] for p in predictions], dtype=np.int64))

    @classmethod
    def score(cls, model, split: dict, meta: dict, batch_size: int, device, protocol: FinetuneProtocol) -> float:
        return cls.evaluate(model, split, meta, batch_size, device, protocol).scores[protocol.scoring]


class TokenClassification(SequenceClassification):
    """`trainables.tasks.family.TaskFamily` for one BIO tag per word (NER)."""

    METRICS = {"standard": "entity_f1", "paper": "sentence_macro_f1"}
    pooled = False

    @staticmethod
    def encode(splits: dict[str, list[dict]], task: TaskInfo, tokenizer, max_length: int, settings: dict):
        """`labels` per token (IGNORE where unlabelled) and `word_index` (the word a labelled token
        belongs to, -1 elsewhere); `gold_tags` keeps the gold tags of every word (also those cut by
        truncation). Standard: the first sub-token of each word; paper: every sub-token."""
        labels, index = label_vocabulary(task, splits, first="O")
        scoring = scoring_of(settings)
        arrays = {}
        for split, rows in splits.items():
            words = [list(row[task.text_fields[0]]) for row in rows]
            gold = [[label_of(t, task.label_names) for t in row[task.label_field]] for row in rows]
            if scoring == "paper":
                token_ids, word_index = words_by_offsets(words, tokenizer, max_length)
            else:
                token_ids, word_index = first_subtokens(words, tokenizer, max_length)
            token_labels = np.full((len(rows), max_length), IGNORE, dtype=np.int64)
            for i, positions in enumerate(word_index >= 0):
                token_labels[i, positions] = [index[gold[i][w]] for w in word_index[i, positions]]
            arrays[split] = {**token_ids, "labels": token_labels,
                             "word_index": word_index, "gold_tags": np.asarray([json.dumps(g) for g in gold])}
        return arrays, {"labels": labels, "scoring": scoring}

    @classmethod
    def evaluate(cls, model, split: dict, meta: dict, batch_size: int, device,
                 protocol: FinetuneProtocol) -> Evaluation:
        """Each word's predicted tag (the vote of its labelled sub-tokens: under standard scoring
        its first one alone), scored both ways; predictions and gold are per-word tags, None for a
        word with no sub-token in the input."""
        cls.check_convention(meta, protocol)
        predicted, gold = word_level_tags(cls.predict(model, split, batch_size, device), split, meta["labels"])
        predictions = [{"example": i, "prediction": p, "gold": g} for i, (p, g) in enumerate(zip(predicted, gold))]
        return Evaluation(scores=tag_scores(predicted, gold), predictions=predictions)

    @staticmethod
    def rescore(predictions: list[dict], scoring: str) -> float:
        return tag_scores([p["prediction"] for p in predictions], [p["gold"] for p in predictions])[scoring]


def first_subtokens(words: list[list[str]], tokenizer, max_length: int):
    """The standard encoding: words fed pre-split with the tokenizer's special tokens; each word's
    first sub-token carries its index."""
    enc = tokenizer(words, is_split_into_words=True, truncation=True, max_length=max_length, padding="max_length")
    word_index = np.full((len(words), max_length), -1, dtype=np.int32)
    for i in range(len(words)):
        previous = None
        for position, word in enumerate(enc.word_ids(i)):
            if word is not None and word != previous:
                word_index[i, position] = word
            previous = word
    return token_arrays(enc, len(words), max_length), word_index


def words_by_offsets(words: list[list[str]], tokenizer, max_length: int):
    """The paper's encoding: " ".join(words) + EOS without special tokens; every sub-token carries
    the index of the word its start offset falls in. As EncodEval's walk along the words, a token
    belongs to the first word whose end lies past its start (a token that starts on the space
    before a word belongs to that word); tokens at offset (0, 0) (padding) and past the last word
    (the EOS) carry -1."""
    ending = end_of_text(tokenizer)
    token_ids = {"input_ids": np.zeros((len(words), max_length), dtype=np.int32),
                 "attention_mask": np.zeros((len(words), max_length), dtype=np.int8)}
    word_index = np.full((len(words), max_length), -1, dtype=np.int32)
    # A few hundred rows a call: offsets come back as one Python tuple per position, padding
    # included (14k CoNLL rows x 2,028 positions would hold gigabytes of them at once).
    for start in range(0, len(words), OFFSET_ROWS):
        rows = words[start:start + OFFSET_ROWS]
        enc = tokenizer([" ".join(w) + ending for w in rows], truncation=True, max_length=max_length,
                        padding="max_length", add_special_tokens=False, return_offsets_mapping=True)
        for key, array in token_arrays(enc, len(rows), max_length).items():
            token_ids[key][start:start + len(rows)] = array
        for i, sentence in enumerate(rows, start):
            lengths = np.asarray([len(word) for word in sentence], dtype=np.int64)
            ends = np.cumsum(lengths + 1) - 1  # each word's end: its start plus its length, one space between
            offsets = np.asarray(enc["offset_mapping"][i - start], dtype=np.int64).reshape(-1, 2)
            word = np.searchsorted(ends, offsets[:, 0], side="right")
            real = (offsets != 0).any(1) & (word < len(sentence))
            word_index[i, real] = word[real]
    return token_ids, word_index


def majority_vote(votes: list[int]) -> int:
    """The most frequent label id among a word's sub-tokens. A tie goes to the id that iterating
    `set(votes)` meets first, as in EncodEval's `max(set(votes), key=votes.count)`: in CPython, for
    ids below the set's table size (8 for up to 4 distinct ids), the smallest."""
    return max(set(votes), key=votes.count)


def word_tags(predicted: np.ndarray, word_index: np.ndarray, lengths: list[int],
              labels: list[str]) -> list[list[str | None]]:
    """Per sentence, each word's predicted tag: the majority vote of the per-token predictions at
    the positions `word_index` gives it, None for a word with none (cut by truncation)."""
    tags = []
    for row, length in enumerate(lengths):
        votes = [[] for _ in range(length)]
        for position in np.flatnonzero(word_index[row] >= 0):
            votes[word_index[row, position]].append(int(predicted[row, position]))
        tags.append([labels[majority_vote(v)] if v else None for v in votes])
    return tags


def word_level_tags(predicted: np.ndarray, split: dict, labels: list[str]):
    """(predicted, gold) tags per word of a split, from its per-token predictions (`word_tags`)."""
    gold = [json.loads(str(tags)) for tags in split["gold_tags"]]
    return word_tags(predicted, split["word_index"], [len(g) for g in gold], labels), gold


def tag_scores(predicted: list[list[str | None]], gold: list[list[str]]) -> dict[str, float]:
    """Both conventions' scores of per-word tags. paper: the per-sentence macro-F1 over the words
    the input reached (EncodEval scores no other); standard: seqeval's entity F1 over every word,
    a word the input did not reach counting as predicted "O"."""
    reached = [[(p, g) for p, g in zip(tags, gold_tags, strict=True) if p is not None]
               for tags, gold_tags in zip(predicted, gold, strict=True)]
    return {"paper": sentence_macro_f1([[p for p, _ in pairs] for pairs in reached],
                                       [[g for _, g in pairs] for pairs in reached]),
            "standard": entity_f1([["O" if p is None else p for p in tags] for tags in predicted], gold)}
