"""Extractive QA: a start/end span head, windows with stride over long contexts, SQuAD scoring.

Encoding is tokenizer-agnostic: the question's tokens (at most half the window) then a window of
the context's tokens, as `[CLS] question [SEP] context window [SEP]` with the tokenizer's own
special tokens (a causal LM's BOS/EOS when it has no CLS/SEP; `question EOS context EOS` when it
has no BOS either, as Qwen's). Position 0 is the null answer, always before the context: a
window that does not hold the answer is trained to point there, and a SQuAD v2 question is
answered "" when the best null score over its windows beats its best span.
"""
from __future__ import annotations

import json

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from sweeper.contract.configs import FinetuneProtocol, TaskInfo
from trainables.tasks.adapters import qa_record
from trainables.tasks.metrics import squad_scores

MAX_ANSWER_TOKENS = 30
TOP_K = 20


class SpanHead(nn.Module):
    def __init__(self, backbone: nn.Module):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(backbone.config.hidden_size, 2)

    def forward(self, input_ids, attention_mask):
        hidden = self.backbone(input_ids, attention_mask=attention_mask, causal=False).last_hidden_state
        logits = self.head(hidden).float()
        logits = logits.masked_fill(~attention_mask.bool().unsqueeze(-1), torch.finfo(logits.dtype).min)
        return logits[..., 0], logits[..., 1]


def special_ids(tokenizer) -> tuple[int | None, int]:
    """(the token that opens a window, or None where the tokenizer has neither CLS nor BOS; the
    separator). The separator is required: it keeps position 0 out of the context even for an
    empty question."""
    first = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    sep = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    if sep is None:
        raise ValueError("extractive QA needs a tokenizer with a SEP or an EOS token")
    return first, sep


def window_starts(n_tokens: int, width: int, stride: int) -> list[int]:
    """Start offsets of windows of `width` tokens, consecutive windows sharing `stride` tokens,
    the last one ending at the context's end."""
    if n_tokens <= width:
        return [0]
    starts = list(range(0, n_tokens - width, width - stride))
    return starts + [n_tokens - width]


def encode_examples(records: list[dict], tokenizer, max_length: int, stride: int) -> dict[str, np.ndarray]:
    first, sep = special_ids(tokenizer)
    opening = [first] if first is not None else []
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else sep
    ids, masks, starts, ends, example_of, offsets = [], [], [], [], [], []
    for number, record in enumerate(records):
        question = tokenizer(record["question"], add_special_tokens=False)["input_ids"][: max_length // 2]
        context = tokenizer(record["context"], add_special_tokens=False, return_offsets_mapping=True)
        context_ids, context_offsets = context["input_ids"], context["offset_mapping"]
        prefix = [*opening, *question, sep]
        width = max_length - len(prefix) - 1
        spans = [(s, s + len(a)) for a, s in zip(record["answers"], record["starts"])]
        for start in window_starts(len(context_ids), width, min(stride, width - 1)):
            window = range(start, min(start + width, len(context_ids)))
            tokens = prefix + [context_ids[i] for i in window] + [sep]
            token_offsets = [(-1, -1)] * len(prefix) + [tuple(context_offsets[i]) for i in window] + [(-1, -1)]
            start_position = end_position = 0
            if spans:  # train towards the first gold span inside this window, else the null position
                char_start, char_end = spans[0]
                inside = [p for p, (a, b) in enumerate(token_offsets) if a >= 0 and a < char_end and b > char_start]
                if inside and token_offsets[inside[0]][0] <= char_start and token_offsets[inside[-1]][1] >= char_end:
                    start_position, end_position = inside[0], inside[-1]
            padding = max_length - len(tokens)
            ids.append(tokens + [pad] * padding)
            masks.append([1] * len(tokens) + [0] * padding)
            offsets.append(token_offsets + [(-1, -1)] * padding)
            starts.append(start_position)
            ends.append(end_position)
            example_of.append(number)
    n = len(ids)
    return {
        "input_ids": np.asarray(ids, dtype=np.int32).reshape(n, max_length),
        "attention_mask": np.asarray(masks, dtype=np.int8).reshape(n, max_length),
        "start_positions": np.asarray(starts, dtype=np.int64), "end_positions": np.asarray(ends, dtype=np.int64),
        "example_index": np.asarray(example_of, dtype=np.int32),
        "offsets": np.asarray(offsets, dtype=np.int32).reshape(n, max_length, 2),
        "contexts": np.asarray([r["context"] for r in records]),
        "gold_answers": np.asarray([json.dumps(r["answers"]) for r in records]),
    }


def best_answers(start_logits: np.ndarray, end_logits: np.ndarray, split: dict, with_no_answer: bool) -> list[str]:
    """Per example: the best span over its windows (start <= end, at most MAX_ANSWER_TOKENS, both
    in the context); with no-answer questions, "" when the null score is higher."""
    n_examples = len(split["contexts"])
    best = [(-np.inf, "")] * n_examples
    null = [np.inf] * n_examples
    for feature, example in enumerate(split["example_index"]):
        s, e, offsets = start_logits[feature], end_logits[feature], split["offsets"][feature]
        null[example] = min(null[example], s[0] + e[0])
        for i in np.argsort(s)[::-1][:TOP_K]:
            if offsets[i, 0] < 0:
                continue
            for j in np.argsort(e)[::-1][:TOP_K]:
                if offsets[j, 0] < 0 or j < i or j - i + 1 > MAX_ANSWER_TOKENS:
                    continue
                score = s[i] + e[j]
                if score > best[example][0]:
                    best[example] = (score, str(split["contexts"][example])[offsets[i, 0]:offsets[j, 1]])
    return [("" if with_no_answer and null[k] > score else text) for k, (score, text) in enumerate(best)]


class ExtractiveQA:
    """`trainables.tasks.family.TaskFamily` for answer spans in a context (SQuAD F1).
    Encoding setting: `doc_stride`, tokens shared by consecutive windows of a long context."""

    @staticmethod
    def encode(splits: dict[str, list[dict]], task: TaskInfo, tokenizer, max_length: int, settings: dict):
        arrays = {split: encode_examples([qa_record(row, task.schema) for row in rows], tokenizer, max_length,
                                         settings["doc_stride"])
                  for split, rows in splits.items()}
        return arrays, {"labels": [], "with_no_answer": task.with_no_answer,
                        "windows": {split: len(a["input_ids"]) for split, a in arrays.items()}}

    @staticmethod
    def describe(meta: dict) -> str:
        return f"{meta['windows']} windows"

    @staticmethod
    def build(backbone, meta: dict):
        return SpanHead(backbone)

    @staticmethod
    def train_size(split: dict) -> int:
        return len(split["input_ids"])  # windows: a long context trains on each of its windows

    @staticmethod
    def loss(model, split: dict, rows: np.ndarray, device, protocol: FinetuneProtocol) -> torch.Tensor:
        ids, mask, start, end = (torch.from_numpy(split[key][rows].astype(np.int64)).to(device) for key in (
            "input_ids", "attention_mask", "start_positions", "end_positions"))
        start_logits, end_logits = model(ids, mask)
        return (F.cross_entropy(start_logits, start) + F.cross_entropy(end_logits, end)) / 2

    @staticmethod
    def score(model, split: dict, meta: dict, batch_size: int, device, protocol: FinetuneProtocol) -> float:
        starts, ends = [], []
        for first in range(0, len(split["input_ids"]), batch_size):
            ids, mask = (torch.from_numpy(split[key][first:first + batch_size].astype(np.int64)).to(device)
                         for key in ("input_ids", "attention_mask"))
            start_logits, end_logits = model(ids, mask)
            starts.append(start_logits.cpu().numpy())
            ends.append(end_logits.cpu().numpy())
        if not starts:
            return float("nan")
        answers = best_answers(np.concatenate(starts), np.concatenate(ends), split, meta["with_no_answer"])
        golds = [json.loads(str(g)) for g in split["gold_answers"]]
        return squad_scores(answers, golds)["f1"]
