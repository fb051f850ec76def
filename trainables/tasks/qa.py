"""Extractive QA under two conventions, chosen by `finetuning.scoring` (`settings["scoring"]`).

standard (the literature's): a start/end span head over windows with stride, SQuAD word F1.
Encoding is tokenizer-agnostic: the question's tokens (at most half the window) then a window of
the context's tokens, as `[CLS] question [SEP] context window [SEP]` with the tokenizer's own
special tokens (a causal LM's BOS/EOS when it has no CLS/SEP; `question EOS context EOS` when it
has no BOS either, as Qwen's). Position 0 is the null answer, always before the context: a
window that does not hold the answer is trained to point there, and a SQuAD v2 question is
answered "" when the best null score over its windows beats its best span.

paper (the authors'): token tagging, as EncodEval's `QuestionAnsweringEval` (its `tokenize`,
`sanitize_predictions_labels` and `compute_f1s`; in `encodeval/eval_tasks/` of hgissbkh/EncodEval,
whose configs/QA/*.yaml load `AutoModelForTokenClassification` with `num_labels: 2`). One row per example:
`"Question: {q}\nContext: "` + context + EOS, without the tokenizer's special tokens, the
context cut at max_length (no windows, so `doc_stride` is not used). Every real token is
labelled: 1 inside the first gold answer, 0 elsewhere (question prefix and EOS included),
padding ignored; an unanswerable question, or one whose answer the cut removed, is all 0.
Training is token-level cross-entropy; a token is predicted inside the answer where its argmax
is 1; the score is the F1 of the predicted token positions against the gold ones per example
(positions in the whole input; an empty set counts as {0}: `metrics.position_f1`), averaged.

`evaluate` scores the same predictions both ways (`ExtractiveQA.evaluate`).
"""
from __future__ import annotations

import json

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from sweeper.contract.configs import FinetuneProtocol, TaskInfo
from trainables.tasks.adapters import qa_record
from trainables.tasks.classification import IGNORE, tensors
from trainables.tasks.family import Evaluation
from trainables.tasks.heads import LinearHead
from trainables.tasks.metrics import squad_scores, token_f1

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


def best_spans(start_logits: np.ndarray, end_logits: np.ndarray, split: dict,
               with_no_answer: bool) -> list[tuple[int, int, int] | None]:
    """Per example: (window, first token, last token) of the best span over its windows (start <=
    end, at most MAX_ANSWER_TOKENS, both in the context); None for no span, and with no-answer
    questions when the null score is higher."""
    n_examples = len(split["contexts"])
    best = [(-np.inf, None)] * n_examples
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
                    best[example] = (score, (feature, int(i), int(j)))
    return [(None if with_no_answer and null[k] > score else span) for k, (score, span) in enumerate(best)]


def span_text(split: dict, example: int, span: tuple[int, int, int] | None) -> str:
    if span is None:
        return ""
    feature, i, j = span
    return str(split["contexts"][example])[split["offsets"][feature, i, 0]:split["offsets"][feature, j, 1]]


def best_answers(start_logits: np.ndarray, end_logits: np.ndarray, split: dict, with_no_answer: bool) -> list[str]:
    """Per example: the text of `best_spans`' span, "" for none."""
    spans = best_spans(start_logits, end_logits, split, with_no_answer)
    return [span_text(split, k, span) for k, span in enumerate(spans)]


def span_tokens(split: dict, feature: int, first: int, last: int) -> list[tuple[int, int]]:
    """Tokens `first`..`last` of a window, named by their character span in the context, so that
    the same context token has the same name in every window."""
    return [tuple(int(c) for c in split["offsets"][feature, p]) for p in range(first, last + 1)]


def gold_tokens(split: dict) -> list[list[tuple[int, int]]]:
    """Per example: the context tokens of its first gold answer (the span a window holding it is
    trained towards), [] when no window holds it (unanswerable)."""
    golds = [[] for _ in split["contexts"]]
    for feature, (example, start, end) in enumerate(zip(split["example_index"], split["start_positions"],
                                                        split["end_positions"])):
        if start > 0 and not golds[example]:
            golds[example] = span_tokens(split, feature, int(start), int(end))
    return golds


def end_of_text(tokenizer) -> tuple[str, int]:
    """The token the authors append to the context: EOS; a tokenizer without one (BERT-like
    WordPiece) ends a text with SEP instead."""
    for token, token_id in ((tokenizer.eos_token, tokenizer.eos_token_id),
                            (tokenizer.sep_token, tokenizer.sep_token_id)):
        if token_id is not None:
            return token, token_id
    raise ValueError(f"scoring: paper QA needs a tokenizer with an EOS or a SEP token; "
                     f"{tokenizer.name_or_path!r} has neither")


def answer_tags(offsets: list, first_char: int, end_char: int) -> list[int]:
    """1 for each token inside the answer [first_char, end_char), 0 elsewhere, over the kept
    tokens of context + EOS (`offsets`: their character spans), by EncodEval's rule: none when the
    kept tokens end before the answer starts (or start after it ends); else from the last token
    starting at or before `first_char` to the first token ending at or after `end_char`. Where the
    cut falls inside the answer, the authors' end index runs one past the kept tokens (their
    collator then fails on the over-long label row): the tags stop at the last kept token instead;
    and they start at the first context token where the authors' walk would step back onto the
    question (an answer starting before the first token's span: never in SQuAD's offsets)."""
    tags = [0] * len(offsets)
    if not offsets or offsets[0][0] > end_char or offsets[-1][1] < first_char:
        return tags
    start = 0
    while start < len(offsets) and offsets[start][0] <= first_char:
        start += 1
    end = len(offsets) - 1
    while end >= 0 and offsets[end][1] >= end_char:
        end -= 1
    for position in range(max(start - 1, 0), min(end + 1, len(offsets) - 1) + 1):
        tags[position] = 1
    return tags


def encode_tagging(records: list[dict], tokenizer, max_length: int, with_text: bool) -> tuple[dict, int]:
    """The paper convention's arrays (module docstring), and how many answerable examples lost all
    or part of their first answer to the cut. `with_text`: also each context token's character
    span in its context (`offsets`, -1 for the question prefix, EOS and padding), the contexts and
    the gold answers, which `evaluate` turns predictions into answer text with."""
    end_token, end_id = end_of_text(tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else end_id
    n = len(records)
    ids = np.full((n, max_length), pad, dtype=np.int32)
    masks = np.zeros((n, max_length), dtype=np.int8)
    labels = np.full((n, max_length), IGNORE, dtype=np.int8)
    offsets = np.full((n, max_length, 2), -1, dtype=np.int32) if with_text else None
    cut = 0
    for k, record in enumerate(records):
        # As the authors' pair call (`truncation="only_second"`, no special tokens): the two texts
        # tokenised apart and joined, the second cut. Where the question alone would not leave a
        # context token (their call raises), it keeps half of max_length, as standard's does.
        prefix = tokenizer(f"Question: {record['question']}\nContext: ", add_special_tokens=False)["input_ids"]
        prefix = prefix if len(prefix) < max_length else prefix[: max_length // 2]
        context = tokenizer(record["context"] + end_token, add_special_tokens=False, return_offsets_mapping=True)
        n_context = len(context["input_ids"])  # the context's own tokens, without the EOS after them
        if context["input_ids"][-1:] == [end_id]:
            n_context -= 1
        kept = max_length - len(prefix)
        context_ids, context_offsets = context["input_ids"][:kept], context["offset_mapping"][:kept]
        tags = [0] * len(context_ids)
        if record["answers"]:
            first_char = record["starts"][0]
            end_char = first_char + len(record["answers"][0])
            tags = answer_tags(context_offsets, first_char, end_char)
            kept_end = max((b for _, b in context_offsets[:n_context]), default=0)
            cut += end_char > kept_end
        length = len(prefix) + len(context_ids)
        ids[k, :length] = prefix + context_ids
        masks[k, :length] = 1
        labels[k, :length] = [0] * len(prefix) + tags
        if with_text:
            for position, span in enumerate(context_offsets[:n_context]):
                offsets[k, len(prefix) + position] = span
    arrays = {"input_ids": ids, "attention_mask": masks, "labels": labels}
    if with_text:
        arrays.update(offsets=offsets, contexts=np.asarray([r["context"] for r in records]),
                      gold_answers=np.asarray([json.dumps(r["answers"]) for r in records]))
    return arrays, cut


def tagged_text(split: dict, example: int, positions: list[int]) -> str:
    """The answer text tagged positions give: the context from the first to the last tagged
    context token's characters (tags on the question prefix or EOS ignored), "" when none."""
    spans = [split["offsets"][example, p] for p in positions if split["offsets"][example, p, 0] >= 0]
    if not spans:
        return ""
    return str(split["contexts"][example])[min(a for a, _ in spans):max(b for _, b in spans)]


class ExtractiveQA:
    """`trainables.tasks.family.TaskFamily` for answer spans in a context, under either convention
    (module docstring). Encoding setting: `doc_stride`, tokens shared by consecutive windows of a
    long context (standard only: the paper convention cuts the context instead)."""

    METRICS: dict[str, str] = {"standard": "squad_f1", "paper": "token_f1"}

    @staticmethod
    def encode(splits: dict[str, list[dict]], task: TaskInfo, tokenizer, max_length: int, settings: dict):
        scoring = settings.get("scoring", "standard")
        records = {split: [qa_record(row, task.schema) for row in rows] for split, rows in splits.items()}
        if scoring == "paper":
            # No text arrays for training: the loop never scores the train split, and at the paper's
            # 2,028 tokens SQuAD's offsets alone would take 1.3 GB.
            encoded = {split: encode_tagging(r, tokenizer, max_length, with_text=split != "train")
                       for split, r in records.items()}
            arrays = {split: a for split, (a, _) in encoded.items()}
            extra = {"answers_cut": {split: cut for split, (_, cut) in encoded.items()}}
        elif scoring == "standard":
            arrays = {split: encode_examples(r, tokenizer, max_length, settings["doc_stride"])
                      for split, r in records.items()}
            extra = {}
        else:
            raise ValueError(f"unknown scoring {scoring!r}: standard or paper")
        return arrays, {"labels": [], "with_no_answer": task.with_no_answer, "scoring": scoring,
                        "windows": {split: len(a["input_ids"]) for split, a in arrays.items()}, **extra}

    @staticmethod
    def describe(meta: dict) -> str:
        if meta.get("scoring") == "paper":
            return (f"{meta['windows']} examples tagged, contexts cut at max_length, doc_stride unused "
                    f"(answers cut: {meta['answers_cut']})")
        return f"{meta['windows']} windows"

    @staticmethod
    def build(backbone, meta: dict):
        if meta.get("scoring") == "paper":
            return LinearHead(backbone, 2, pooled=False)  # per token: outside (0) or inside (1) the answer
        return SpanHead(backbone)

    @staticmethod
    def train_size(split: dict) -> int:
        return len(split["input_ids"])  # windows (standard: a long context trains on each), or examples

    @staticmethod
    def loss(model, split: dict, rows: np.ndarray, device, protocol: FinetuneProtocol) -> torch.Tensor:
        if protocol.scoring == "paper":  # mean over the micro-batch's real tokens, as a token classifier's
            ids, mask, labels = tensors(split, rows, device, "input_ids", "attention_mask", "labels")
            logits = model(ids, mask)
            return F.cross_entropy(logits.float().reshape(-1, 2), labels.reshape(-1), ignore_index=IGNORE)
        ids, mask, start, end = (torch.from_numpy(split[key][rows].astype(np.int64)).to(device) for key in (
            "input_ids", "attention_mask", "start_positions", "end_positions"))
        start_logits, end_logits = model(ids, mask)
        return (F.cross_entropy(start_logits, start) + F.cross_entropy(end_logits, end)) / 2

    @staticmethod
    def evaluate(model, split: dict, meta: dict, batch_size: int, device, protocol: FinetuneProtocol) -> Evaluation:
        """Both conventions' scores of one set of predictions.

        paper data: predictions are the tagged positions (`prediction`, `gold`: lists of token
        positions in the input). paper = `token_f1` of them; standard = SQuAD F1 of the answer
        text they give (`tagged_text`) against every gold answer.
        standard data: predictions are the best span's text (`prediction`; `gold`: every gold
        answer's text). standard = SQuAD F1; paper = `token_f1` of the span's context tokens
        against the first gold answer's, a token named by its character span in the context (so
        positions are those of the context's own tokenisation, one name for the tokens of a
        character split into several), no span = the empty set, hence {0}."""
        if meta.get("scoring") == "paper":
            return evaluate_tagging(model, split, batch_size, device)
        return evaluate_spans(model, split, meta, batch_size, device)

    @staticmethod
    def score(model, split: dict, meta: dict, batch_size: int, device, protocol: FinetuneProtocol) -> float:
        return ExtractiveQA.evaluate(model, split, meta, batch_size, device, protocol).scores[protocol.scoring]

    @staticmethod
    def rescore(predictions: list[dict], scoring: str) -> float:
        """A split's score recomputed from its stored predictions (after a JSON round trip), equal
        to `evaluate`'s: token positions give the paper score, answer texts the standard one; the
        other convention needs the encoded split, so asking for it is an error."""
        if not predictions:
            return float("nan")
        positions = isinstance(predictions[0]["prediction"], list)
        if scoring == "paper" and positions:
            return token_f1([p["prediction"] for p in predictions], [p["gold"] for p in predictions])
        if scoring == "standard" and not positions:
            return squad_scores([p["prediction"] for p in predictions], [p["gold"] for p in predictions])["f1"]
        raise ValueError(f"QA predictions of {'token positions' if positions else 'answer text'} "
                         f"cannot give the {scoring!r} score")


def evaluate_tagging(model, split: dict, batch_size: int, device) -> Evaluation:
    positions = []
    for first in range(0, len(split["input_ids"]), batch_size):
        ids, mask = tensors(split, slice(first, first + batch_size), device, "input_ids", "attention_mask")
        # Padding is left out: the authors' argmax also ran over their eval batches' padding, which
        # depends on how examples were batched (and packing returns zeros there).
        tagged = ((model(ids, mask).argmax(-1) == 1) & mask.bool()).cpu().numpy()
        positions += [np.flatnonzero(row).tolist() for row in tagged]
    golds = [np.flatnonzero(row == 1).tolist() for row in split["labels"]]
    if not golds:
        return Evaluation(scores={"paper": float("nan"), "standard": float("nan")}, predictions=[])
    texts = [tagged_text(split, k, p) for k, p in enumerate(positions)]
    answers = [json.loads(str(g)) for g in split["gold_answers"]]
    return Evaluation(scores={"paper": token_f1(positions, golds), "standard": squad_scores(texts, answers)["f1"]},
                      predictions=[{"example": k, "prediction": p, "gold": g}
                                   for k, (p, g) in enumerate(zip(positions, golds))])


def evaluate_spans(model, split: dict, meta: dict, batch_size: int, device) -> Evaluation:
    starts, ends = [], []
    for first in range(0, len(split["input_ids"]), batch_size):
        ids, mask = (torch.from_numpy(split[key][first:first + batch_size].astype(np.int64)).to(device)
                     for key in ("input_ids", "attention_mask"))
        start_logits, end_logits = model(ids, mask)
        starts.append(start_logits.cpu().numpy())
        ends.append(end_logits.cpu().numpy())
    if not starts:
        return Evaluation(scores={"paper": float("nan"), "standard": float("nan")}, predictions=[])
    spans = best_spans(np.concatenate(starts), np.concatenate(ends), split, meta["with_no_answer"])
    answers = [span_text(split, k, span) for k, span in enumerate(spans)]
    golds = [json.loads(str(g)) for g in split["gold_answers"]]
    predicted_tokens = [span_tokens(split, *span) if span else [] for span in spans]
    return Evaluation(scores={"standard": squad_scores(answers, golds)["f1"],
                              "paper": token_f1(predicted_tokens, gold_tokens(split))},
                      predictions=[{"example": k, "prediction": a, "gold": g}
                                   for k, (a, g) in enumerate(zip(answers, golds))])
