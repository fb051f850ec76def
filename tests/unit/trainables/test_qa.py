"""Extractive QA under both conventions (trainables.tasks.qa): the authors' token-position F1,
their labelling of the answer tokens on offsets, both scores of one set of predictions and their
recomputation from the stored predictions, and the standard path's arrays as they were.

The authors' code is EncodEval's `QuestionAnsweringEval` (hgissbkh/EncodEval); `authors_labels`
below follows its `tokenize` step by step (the pair call, `sequence_ids`, the two index walks),
so the family's own labelling is checked against an independent reading of it.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score
from torch import nn
from transformers import AutoTokenizer

from sweeper.contract.configs import AdamWConfig, FinetuneProtocol
from trainables.model import LlamaEncoderConfig, LlamaEncoderModel
from trainables.tasks.family import Evaluation
from trainables.tasks.metrics import normalize_answer, position_f1, squad_scores, token_f1
from trainables.tasks.qa import ExtractiveQA, encode_tagging, tagged_text

from tiny_checkpoints import train_tokenizer


CONTEXT = ("The Zyxquorian mountains rise north of Quelvaria. Their highest summit, Mount Brennitz, "
           "was first climbed in 1921 by an expedition of four.")
RECORDS = [
    {"id": "a", "question": "Where do the Zyxquorian mountains rise?", "context": CONTEXT,
     "answers": ["north of Quelvaria", "Quelvaria"], "starts": [CONTEXT.index("north"), CONTEXT.index("Quelvaria")]},
    {"id": "b", "question": "When was Mount Brennitz first climbed?", "context": CONTEXT,
     "answers": ["1921"], "starts": [CONTEXT.index("1921")]},
    {"id": "c", "question": "Who named the range?", "context": CONTEXT, "answers": [], "starts": []},
]
DEVICE = torch.device("cpu")


def protocol(scoring: str) -> FinetuneProtocol:
    return FinetuneProtocol(learning_rate=1e-3, batch_size=4, max_steps=1, epochs=1.0, max_length=64,
                            warmup_ratio=0.1, optimizer=AdamWConfig(), family_settings={"doc_stride": 8},
                            scoring=scoring)


@pytest.fixture(scope="module")
def wordpiece(wordpiece_dir):
    return AutoTokenizer.from_pretrained(wordpiece_dir)


@pytest.fixture(scope="module")
def llama():
    """A Llama-3-shaped byte-level BPE tokenizer (EOS <|end_of_text|>, offsets with the space)."""
    return train_tokenizer("llama")


# --- the metric ---------------------------------------------------------------------------------

def test_token_f1_by_hand_with_the_empty_set_counted_as_position_0():
    cases = [  # (predicted, gold, F1 worked out by hand)
        ([5, 6, 7], [6, 7, 8, 9], 2 * (2 / 3) * (1 / 2) / (2 / 3 + 1 / 2)),  # 4/7
        ([], [], 1.0),            # "no answer" for an unanswerable question: {0} against {0}
        ([], [4, 5], 0.0),        # no answer given to an answerable question
        ([3], [], 0.0),           # an answer given to an unanswerable one
        ([0, 3], [], 2 / 3),      # a tag on position 0 counts as the null answer: P 1/2, R 1
        ([4, 5], [4, 5], 1.0),
    ]
    for predicted, gold, expected in cases:
        assert position_f1(predicted, gold) == pytest.approx(expected, abs=1e-15), (predicted, gold)
    assert token_f1([c[0] for c in cases], [c[1] for c in cases]) == pytest.approx(
        100 * (4 / 7 + 1 + 0 + 0 + 2 / 3 + 1) / 6)
    assert np.isnan(token_f1([], []))


def test_token_f1_is_sklearns_binary_f1_on_position_indicators_where_both_sets_are_given():
    rng = np.random.default_rng(0)
    for _ in range(200):
        length = int(rng.integers(2, 40))
        gold = rng.random(length) < rng.random()
        predicted = rng.random(length) < rng.random()
        gold[0] = predicted[0] = False  # position 0 is the question prefix: never an answer token
        if not gold.any() or not predicted.any():
            continue  # the {0} rule has no sklearn counterpart
        expected = f1_score(gold.astype(int), predicted.astype(int), zero_division=0)
        assert position_f1(np.flatnonzero(predicted), np.flatnonzero(gold)) == pytest.approx(expected, abs=1e-12)


# --- the labels ---------------------------------------------------------------------------------

def authors_labels(tokenizer, record: dict, max_length: int) -> tuple[list[int], list[int]]:
    """(input ids, labels) as EncodEval's QuestionAnsweringEval.tokenize makes them for one record
    (a padded batch adds -100 after them): the pair call, then the walk over `sequence_ids`."""
    end = tokenizer.eos_token or tokenizer.sep_token
    inputs = tokenizer([f"Question: {record['question']}\nContext: "], [record["context"] + end],
                       max_length=max_length, truncation="only_second", return_offsets_mapping=True,
                       add_special_tokens=False)
    ids, offset = inputs["input_ids"][0], inputs["offset_mapping"][0]
    if not record["answers"]:
        return ids, [0] * len(ids)
    start_char = record["starts"][0]
    end_char = start_char + len(record["answers"][0])
    sequence_ids = inputs.sequence_ids(0)
    idx = 0
    while sequence_ids[idx] != 1:
        idx += 1
    context_start = idx
    while idx < len(sequence_ids) and sequence_ids[idx] == 1:
        idx += 1
    context_end = idx - 1
    if offset[context_start][0] > end_char or offset[context_end][1] < start_char:
        return ids, [0] * len(ids)
    idx = context_start
    while idx <= context_end and offset[idx][0] <= start_char:
        idx += 1
    start = idx - 1
    idx = context_end
    while idx >= context_start and offset[idx][1] >= end_char:
        idx -= 1
    end = idx + 1
    return ids, [0] * start + [1] * (end - start + 1) + [0] * (len(ids) - end - 1)


def long_records() -> list[dict]:
    filler = " ".join(f"plain{i} words" for i in range(40))
    context = f"Early on the Brennitz glacier melts. {filler} Late in the text the Quelvaria pass opens."
    return [
        {"id": "early", "question": "What melts?", "context": context, "answers": ["the Brennitz glacier"],
         "starts": [context.index("the Brennitz")]},
        {"id": "late", "question": "What opens?", "context": context, "answers": ["the Quelvaria pass"],
         "starts": [context.index("the Quelvaria")]},
    ]


@pytest.mark.parametrize("kind", ["wordpiece", "llama"])
@pytest.mark.parametrize("max_length", [512, 40])
def test_tagging_labels_and_inputs_are_the_authors(kind, max_length, request):
    """Short contexts whole, long ones cut (an answer early kept, a late one cut away): the ids
    and labels the authors' tokenize step gives, -100 only on padding."""
    tokenizer = request.getfixturevalue(kind)
    records = RECORDS + long_records()
    arrays, cut = encode_tagging(records, tokenizer, max_length, with_text=True)
    for row, record in enumerate(records):
        ids, labels = authors_labels(tokenizer, record, max_length)
        length = int(arrays["attention_mask"][row].sum())
        assert arrays["input_ids"][row, :length].tolist() == ids
        assert arrays["labels"][row, :length].tolist() == labels
        assert (arrays["labels"][row, length:] == -100).all()
    late = len(records) - 1
    if max_length == 40:
        assert arrays["attention_mask"][late].all(), "the long context fills max_length"
        assert arrays["input_ids"][late, -1] != (tokenizer.eos_token_id or tokenizer.sep_token_id), "EOS cut with it"
        assert (arrays["labels"][late] == 0).all(), "an answer cut away: no token inside it"
    # Counted as cut: the answerable examples whose tagged tokens no longer give the answer back.
    lost = [r for row, r in enumerate(records) if r["answers"] and normalize_answer(tagged_text(
        arrays, row, np.flatnonzero(arrays["labels"][row] == 1).tolist())) != normalize_answer(r["answers"][0])]
    assert cut == len(lost) and (cut > 0) == (max_length == 40)


@pytest.mark.parametrize("kind", ["wordpiece", "llama"])
def test_every_sub_token_of_the_answer_is_tagged_and_gives_its_text_back(kind, request):
    tokenizer = request.getfixturevalue(kind)
    arrays, _ = encode_tagging(RECORDS, tokenizer, 128, with_text=True)
    first = np.flatnonzero(arrays["labels"][0] == 1)
    assert len(first) > len(RECORDS[0]["answers"][0].split()), "Quelvaria is cut into sub-words"
    assert (np.diff(first) == 1).all()
    for row, record in enumerate(RECORDS):
        text = tagged_text(arrays, row, np.flatnonzero(arrays["labels"][row] == 1).tolist())
        assert normalize_answer(text) == normalize_answer(record["answers"][0] if record["answers"] else "")
    eos = tokenizer.eos_token_id or tokenizer.sep_token_id
    end = int(arrays["attention_mask"][0].sum()) - 1
    assert arrays["input_ids"][0, end] == eos and arrays["labels"][0, end] == 0 and arrays["offsets"][0, end, 0] == -1
    # A tag on the question prefix or on EOS gives no text.
    assert tagged_text(arrays, 0, [0, 1, end]) == ""


def test_an_answer_cut_in_the_middle_is_tagged_up_to_the_last_kept_token(wordpiece):
    """Where the authors' end index runs past the input (their collator fails), the kept part is tagged."""
    record = long_records()[1]
    full, _ = encode_tagging([record], wordpiece, 512, with_text=True)
    tagged = np.flatnonzero(full["labels"][0] == 1)
    assert len(tagged) >= 3
    width = int(tagged[1]) + 1  # keeps the answer's first two tokens
    cut, n_cut = encode_tagging([record], wordpiece, width, with_text=True)
    assert np.flatnonzero(cut["labels"][0] == 1).tolist() == tagged[:2].tolist()
    assert n_cut == 1
    _, authors = authors_labels(wordpiece, record, width)
    assert len(authors) == width + 1, "the authors' label row is one longer than the input"


def test_a_tokenizer_without_eos_or_sep_is_refused(llama):
    tokenizer = train_tokenizer("qwen3")
    tokenizer.eos_token = None
    with pytest.raises(ValueError, match="EOS or a SEP"):
        encode_tagging(RECORDS, tokenizer, 64, with_text=True)


# --- both scores of one set of predictions ------------------------------------------------------

class Oracle(nn.Module):
    """Answers every encoded row as its gold labels say: per-token tags (paper) or start/end logits
    on the window's gold span, position 0 where it holds none (standard). A model that reads its
    answers off the split, so that the scores of perfect predictions can be checked."""

    def __init__(self, split: dict, paper: bool):
        super().__init__()
        self.split, self.paper = split, paper

    def row_of(self, ids: list[int]) -> int:
        """The split's row these ids are (a batch may be cut to its longest real row)."""
        return next(row for row, full in enumerate(self.split["input_ids"].tolist()) if full[:len(ids)] == ids)

    def forward(self, input_ids, attention_mask):
        width = input_ids.shape[1]
        rows = [self.row_of(ids) for ids in input_ids.tolist()]
        if self.paper:
            tags = torch.as_tensor(self.split["labels"][rows][:, :width] == 1)
            return torch.stack([(~tags).float(), tags.float()], -1)
        starts, ends = (torch.full((len(rows), width), -5.0) for _ in range(2))
        for b, row in enumerate(rows):
            starts[b, self.split["start_positions"][row]] = ends[b, self.split["end_positions"][row]] = 5.0
        return starts, ends


def encoded(tokenizer, scoring: str | None, max_length: int = 48) -> tuple[dict, dict]:
    from sweeper.contract.registry import get_task

    task = get_task("squad-v2")
    rows = [{"id": r["id"], "question": r["question"], "context": r["context"],
             "answers": {"text": r["answers"], "answer_start": r["starts"]}} for r in RECORDS + long_records()]
    settings = {"doc_stride": 8} if scoring is None else {"doc_stride": 8, "scoring": scoring}
    arrays, meta = ExtractiveQA.encode({"validation": rows}, task, tokenizer, max_length, settings)
    return arrays["validation"], meta


@pytest.mark.parametrize("scoring", ["paper", "standard"])
def test_perfect_predictions_score_100_both_ways(wordpiece, scoring):
    split, meta = encoded(wordpiece, scoring)
    assert meta["scoring"] == scoring
    evaluation = ExtractiveQA.evaluate(Oracle(split, scoring == "paper"), split, meta, 2, DEVICE, protocol(scoring))
    assert isinstance(evaluation, Evaluation)
    if scoring == "paper":
        # Answers cut away at 48 tokens (the late one at least): perfect tags there are "no
        # answer", {0} = {0} for the token F1, while their SQuAD F1 against the real text is 0.
        assert meta["answers_cut"]["validation"] >= 1
        assert evaluation.scores["paper"] == 100.0
        texts = [tagged_text(split, k, p["prediction"]) for k, p in enumerate(evaluation.predictions)]
        golds = [json.loads(str(g)) for g in split["gold_answers"]]
        assert texts[-1] == "" and golds[-1], "the late answer is cut away"
        assert evaluation.scores["standard"] == squad_scores(texts, golds)["f1"] < 100.0
    else:
        assert evaluation.scores == {"standard": 100.0, "paper": 100.0}


@pytest.mark.parametrize("scoring", ["paper", "standard"])
def test_rescoring_the_stored_predictions_gives_the_score(wordpiece, scoring):
    """A random head's predictions, through JSON and back: `rescore` gives exactly `evaluate`'s
    score of the trial's convention, and says it cannot give the other one."""
    split, meta = encoded(wordpiece, scoring)
    torch.manual_seed(0)
    backbone = LlamaEncoderModel(LlamaEncoderConfig(vocab_size=len(wordpiece), hidden_size=32, intermediate_size=64,
                                                    num_hidden_layers=1, num_attention_heads=4,
                                                    num_key_value_heads=2))
    model = ExtractiveQA.build(backbone, meta).eval()
    with torch.no_grad():
        evaluation = ExtractiveQA.evaluate(model, split, meta, 2, DEVICE, protocol(scoring))
        score = ExtractiveQA.score(model, split, meta, 3, DEVICE, protocol(scoring))
    stored = json.loads(json.dumps(evaluation.predictions))
    assert [p["example"] for p in stored] == list(range(len(split["contexts"])))
    assert ExtractiveQA.rescore(stored, scoring) == evaluation.scores[scoring] == score
    other = {"paper": "standard", "standard": "paper"}[scoring]
    with pytest.raises(ValueError, match="cannot give"):
        ExtractiveQA.rescore(stored, other)
    kind = list if scoring == "paper" else str
    assert all(isinstance(p["prediction"], kind) for p in stored)
    assert ExtractiveQA.METRICS[scoring] == {"paper": "token_f1", "standard": "squad_f1"}[scoring]


def test_the_paper_loss_is_token_cross_entropy_on_real_tokens(wordpiece):
    split, meta = encoded(wordpiece, "paper")
    torch.manual_seed(0)
    backbone = LlamaEncoderModel(LlamaEncoderConfig(vocab_size=len(wordpiece), hidden_size=32, intermediate_size=64,
                                                    num_hidden_layers=1, num_attention_heads=4,
                                                    num_key_value_heads=2))
    model = ExtractiveQA.build(backbone, meta)
    assert model.head.out_features == 2
    rows = np.arange(3)
    loss = ExtractiveQA.loss(model, split, rows, DEVICE, protocol("paper"))
    ids = torch.from_numpy(split["input_ids"][rows].astype(np.int64))
    mask = torch.from_numpy(split["attention_mask"][rows].astype(np.int64))
    logits = model(ids, mask).float()
    real = mask.bool()
    labels = torch.from_numpy(split["labels"][rows].astype(np.int64))
    expected = nn.functional.cross_entropy(logits[real], labels[real])
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    loss.backward()


# --- the standard path as it was ----------------------------------------------------------------

def digest(arrays: dict) -> str:
    hasher = hashlib.sha256()
    for name in sorted(arrays):
        value = np.ascontiguousarray(arrays[name])
        hasher.update(f"{name}:{value.dtype}:{value.shape}".encode())
        hasher.update(value.tobytes())
    return hasher.hexdigest()


STANDARD_DIGESTS = {  # the arrays of RECORDS + long_records() at 48 tokens, stride 8, by the code before
    "bert": "38d924b4d1d7dad1f181df1aea820a6ad0041e3a23bcce169f52cdeb00d0bb5c",  # the paper convention existed
    "llama": "813345e83fd8185bf64725d6b85e4e68a746ff6eba720c08d7ce967b1b620707",
    "qwen3": "a729b2a70e6911a0a953b4fda05c77fc474769d4e95ec6f55096be43e64ce272",
}


@pytest.mark.parametrize("kind", sorted(STANDARD_DIGESTS))
def test_the_standard_arrays_are_todays(kind):
    """The tiny checkpoints' tokenizers train deterministically (the corpus WordPiece does not
    quite: its token count moves between processes), so their arrays can be pinned."""
    tokenizer = train_tokenizer(kind)
    split, meta = encoded(tokenizer, "standard")
    assert digest(split) == STANDARD_DIGESTS[kind]
    unset, _ = encoded(tokenizer, None)
    assert digest(unset) == STANDARD_DIGESTS[kind]
    assert meta["scoring"] == "standard" and "answers_cut" not in meta


def test_the_train_split_keeps_no_text_arrays(wordpiece):
    """Offsets, contexts and gold texts only serve scoring; train rows at 2,028 tokens would carry
    1.3 GB of offsets for SQuAD."""
    from sweeper.contract.registry import get_task

    rows = [{"id": r["id"], "question": r["question"], "context": r["context"],
             "answers": {"text": r["answers"], "answer_start": r["starts"]}} for r in RECORDS]
    arrays, meta = ExtractiveQA.encode({"train": rows, "test": rows}, get_task("squad-v2"), wordpiece, 64,
                                       {"doc_stride": 8, "scoring": "paper"})
    assert set(arrays["train"]) == {"input_ids", "attention_mask", "labels"}
    assert set(arrays["test"]) == {"input_ids", "attention_mask", "labels", "offsets", "contexts", "gold_answers"}
    assert (arrays["train"]["labels"] == arrays["test"]["labels"]).all()
    assert "doc_stride unused" in ExtractiveQA.describe(meta)
    with pytest.raises(ValueError, match="unknown scoring"):
        ExtractiveQA.encode({"test": rows}, get_task("squad-v2"), wordpiece, 64, {"doc_stride": 8, "scoring": "papr"})


def test_packed_and_padded_passes_tag_alike(wordpiece):
    """Packing returns zeros on padding (trainables.tasks.packing); tags are read on real tokens
    only, so the packed pass gives the padded pass's loss and predictions."""
    from trainables.tasks.packing import PackedBackbone

    split, meta = encoded(wordpiece, "paper", max_length=512)
    assert not split["attention_mask"][:3].all(1).any(), "short rows, padded"
    torch.manual_seed(0)
    backbone = PackedBackbone(LlamaEncoderModel(LlamaEncoderConfig(
        vocab_size=len(wordpiece), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2)))
    model = ExtractiveQA.build(backbone, meta)
    with torch.no_grad():  # a head that tags the zeros packing returns on padding, if it ever reads them
        model.head.bias.copy_(torch.tensor([0.0, 0.5]))
    outcomes = {}
    for packing in (False, True):
        model.backbone.packing = packing
        loss = ExtractiveQA.loss(model, split, np.arange(len(split["input_ids"])), DEVICE, protocol("paper")).item()
        with torch.no_grad():
            evaluation = ExtractiveQA.evaluate(model.eval(), split, meta, 2, DEVICE, protocol("paper"))
        outcomes[packing] = (loss, evaluation)
    assert outcomes[True][0] == pytest.approx(outcomes[False][0], rel=1e-5)
    assert outcomes[True][1].predictions == outcomes[False][1].predictions
    assert any(p["prediction"] for p in outcomes[True][1].predictions), "the random head tags some tokens"
    lengths = split["attention_mask"].sum(1)
    assert all(max(p["prediction"], default=0) < lengths[p["example"]] for p in outcomes[True][1].predictions)


def test_a_trial_trains_and_scores_the_paper_convention(tmp_path, wordpiece_dir):
    """Prepared through the task-data step with `scoring: paper`, a whole trial (packed) trains
    the tagging head and reports the token F1 as its scores."""
    from dataclasses import replace

    from sweeper.contract.configs import TrialConfig, TrialRuntime
    from sweeper.contract.registry import family_of, get_task
    from trainables.finetune_loop import run_trial
    from trainables.tasks import data as task_data

    task = get_task("wordnet-supersense-qa")
    family = family_of(task.family)
    task_data.prepare_task_data(task, family.implementation, wordpiece_dir, 96, str(tmp_path), 32, 24,
                                {"doc_stride": 8, "scoring": "paper"})
    meta, splits = task_data.load_prepared(str(tmp_path))
    assert meta["scoring"] == "paper" and set(splits["train"]) == {"input_ids", "attention_mask", "labels"}
    result = run_trial(TrialConfig(
        trial_key="paper-qa", task=task, family=family.implementation, seed=0, checkpoint_path=None,
        protocol=replace(protocol("paper"), max_length=96, max_steps=3), task_data_dir=str(tmp_path),
        runtime=TrialRuntime(micro_batch_size=4, eval_batch_size=8),
        random_init_config={"vocab_size": 512, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                            "num_attention_heads": 4, "num_key_value_heads": 2}))
    assert result["status"] == "ok" and result["train_steps"] == 3, result
    assert np.isfinite(result["train_loss"])
    assert 0.0 <= result["validation_score"] <= 100.0 and 0.0 <= result["test_score"] <= 100.0
