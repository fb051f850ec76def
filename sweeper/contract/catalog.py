"""What a spec can name: fine-tuning tasks and model presets (pure data, no torch).

A task (`sweeper.contract.tasks.TaskInfo`) travels to the workers inside each trial's config; its family
(`sweeper.contract.registry`) names the worker-side implementation. The tasks listed here are the
shipped ones; the registry in use (`sweeper.contract.registry.current()`) holds them with the plugins'.

A task names where its rows come from and how their columns map onto the family's fields
(`schema` picks the adapter for QA and retrieval sources); the family (sequence_classification,
token_classification, extractive_qa, retrieval) owns tokenisation, the head, the loss and the
metric.

The paper's 12 tasks read the hub ids that the authors' evaluation code loads (EncodEval,
`encodeval/datasets.py` in hgissbkh/EncodEval), every one of them: `nyu-mll/glue` (SST-2, MNLI,
QQP), `hgissbkh/conll2003-en`, `hgissbkh/ontonotes5`, `hgissbkh/uner_en`, `rajpurkar/squad`,
`rajpurkar/squad_v2`, `hgissbkh/record`, `hgissbkh/msmarco-pairs` (retrieval training) with
`BeIR/msmarco` + `BeIR/msmarco-qrels`, `BeIR/nq` + `BeIR/nq-qrels`, and `hgissbkh/mldr-en`. Their
splits are the authors' too: GLUE, SQuAD and ReCoRD test on the official validation split with
5 % of train (seed 42) as validation; the TC copies and MS MARCO / MLDR carry their own
validation and test splits; NQ's test queries are split 50/50 (seed 42; the authors' draw follows each
run's fine-tuning seed). Each retrieval evaluation ranks the labelled documents of its validation and test
queries, not the corpus (trainables.tasks.pools). docs/paper-protocol.md says where each schema
detail comes from and which are assumed.
"""
from __future__ import annotations

import ast
import gzip
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from sweeper.contract.tasks import TaskInfo

ONTONOTES5_TAGS = (
    "O", "B-CARDINAL", "B-DATE", "I-DATE", "B-PERSON", "I-PERSON", "B-NORP", "B-GPE", "I-GPE", "B-LAW", "I-LAW",
    "B-ORG", "I-ORG", "B-PERCENT", "I-PERCENT", "B-ORDINAL", "B-MONEY", "I-MONEY", "B-WORK_OF_ART",
    "I-WORK_OF_ART", "B-FAC", "B-TIME", "I-CARDINAL", "B-LOC", "B-QUANTITY", "I-QUANTITY", "I-NORP", "I-LOC",
    "B-PRODUCT", "I-TIME", "B-EVENT", "I-EVENT", "I-FAC", "B-LANGUAGE", "I-PRODUCT", "I-ORDINAL", "I-LANGUAGE",
)


RETRIEVAL_PREFIXES = ("Query: ", "Document: ")
"""The authors' input prefixes of a retrieval query and document (EncodEval)."""
BEIR_FILES = {"queries": "queries.jsonl.gz", "corpus": "corpus.jsonl.gz"}
"""A BEIR hub data set's queries and corpus files (its builder is a script, which `datasets` 4+
does not run); the judgements are `<source>-qrels`, split by file name (dev -> validation)."""

AUTHORS_DRAW = "train_test_split"
"""Validation = the rows of `train_test_split(train_size=0.95, seed=42)` (EncodEval's call)."""

SHIPPED_TASKS: dict[str, TaskInfo] = {
    info.name: info
    for info in (
        TaskInfo(
            name="wordnet-supersense-cls", family="sequence_classification", category="SC",
            source="wordnet-supersense-cls", metric="accuracy", split_column="split",
        ),
        TaskInfo(
            name="wordnet-supersense-tag", family="token_classification", category="TC",
            source="wordnet-supersense-tag", metric="f1", text_fields=("tokens",),
            label_field="ner_tags", split_column="split",
        ),
        # The paper's 12 data sets, by the Hugging Face ids of the authors' evaluation code (EncodEval).
        TaskInfo(name="sst2", family="sequence_classification", category="SC", source="nyu-mll/glue:sst2",
                 metric="accuracy", validation_draw=AUTHORS_DRAW, label_names=("negative", "positive")),
        TaskInfo(name="mnli", family="sequence_classification", category="SC", source="nyu-mll/glue:mnli",
                 metric="accuracy", validation_draw=AUTHORS_DRAW, text_fields=("premise", "hypothesis"),
                 field_prefixes=("Premise: ", "Hypothesis: "), test_split="validation_matched",
                 label_names=("entailment", "neutral", "contradiction")),
        TaskInfo(name="qqp", family="sequence_classification", category="SC", source="nyu-mll/glue:qqp",
                 metric="accuracy", validation_draw=AUTHORS_DRAW, text_fields=("question1", "question2"),
                 field_prefixes=("Question 1: ", "Question 2: "), label_names=("not_duplicate", "duplicate")),
        # EncodEval renames words -> tokens and ner -> tags; the 9 tags in the CoNLL-2003 order.
        TaskInfo(name="conll2003", family="token_classification", category="TC", source="hgissbkh/conll2003-en",
                 metric="f1", text_fields=("words",), label_field="ner", validation_split="validation",
                 test_split="test",
                 label_names=("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")),
        # Read as EncodEval reads it (tokens, tags); its 37 tags in tner's label2id order.
        TaskInfo(name="ontonotes5", family="token_classification", category="TC", source="hgissbkh/ontonotes5",
                 metric="f1", text_fields=("tokens",), label_field="tags", validation_split="validation",
                 test_split="test", label_names=ONTONOTES5_TAGS),
        TaskInfo(name="uner-en", family="token_classification", category="TC", source="hgissbkh/uner_en",
                 metric="f1", text_fields=("tokens",), label_field="ner_tags", validation_split="validation",
                 test_split="test", label_names=("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC")),
        TaskInfo(name="squad", family="extractive_qa", category="QA", source="rajpurkar/squad", metric="f1",
                 schema="squad", validation_draw=AUTHORS_DRAW),
        TaskInfo(name="squad-v2", family="extractive_qa", category="QA", source="rajpurkar/squad_v2", metric="f1",
                 schema="squad", with_no_answer=True, validation_draw=AUTHORS_DRAW),
        # The authors' ReCoRD copy goes through the same QA code as SQuAD (EncodEval maps no column).
        TaskInfo(name="record", family="extractive_qa", category="QA", source="hgissbkh/record", metric="f1",
                 schema="squad", validation_draw=AUTHORS_DRAW),
        # One bi-encoder trained on MS MARCO pairs, scored on MS MARCO, NQ and MLDR, each over the labelled
        # documents of its judged queries; "Query: " / "Document: " before every text (EncodEval).
        TaskInfo(name="msmarco", family="retrieval", category="IR", source="BeIR/msmarco", metric="ndcg@10",
                 schema="beir", train_source="hgissbkh/msmarco-pairs", validation_split="validation",
                 test_split="test", field_prefixes=RETRIEVAL_PREFIXES, data_files=BEIR_FILES),
        TaskInfo(name="nq", family="retrieval", category="IR", source="BeIR/nq", metric="ndcg@10", schema="beir",
                 test_split="test", validation_share=0.5, train_task="msmarco", field_prefixes=RETRIEVAL_PREFIXES,
                 data_files=BEIR_FILES),
        TaskInfo(name="mldr-en", family="retrieval", category="IR", source="hgissbkh/mldr-en", metric="ndcg@10",
                 schema="mldr-corpus", validation_split="dev", test_split="test", train_task="msmarco",
                 field_prefixes=RETRIEVAL_PREFIXES),
        # Offline QA and retrieval from WordNet usage examples, in SQuAD v2 / MS MARCO / NQ schemas.
        TaskInfo(name="wordnet-supersense-qa", family="extractive_qa", category="QA", source="wordnet-supersense-qa",
                 metric="f1", schema="squad", with_no_answer=True, split_column="split"),
        TaskInfo(name="wordnet-usage-retrieval", family="retrieval", category="IR",
                 source="wordnet-usage-retrieval", metric="ndcg@10", schema="msmarco", split_column="split"),
        TaskInfo(name="wordnet-definition-retrieval", family="retrieval", category="IR",
                 source="wordnet-definition-retrieval", metric="ndcg@10", schema="pairs", test_split="train",
                 train_task="wordnet-usage-retrieval"),
    )
}


# --- task statistics: sizes and lengths for the cost and memory estimates (sweeper.plan.cost) ------

@dataclass(frozen=True, kw_only=True, slots=True)
class TaskStatistics:
    """How big one task's source is, for `sweeper plan`'s estimates only. Kept apart from
    `TaskInfo` on purpose: TaskInfo's fields enter every trial key, these never do.

    Lengths are means in model tokens (Llama-3 tokenizer for the hub sets) per row, special
    tokens and field prefixes included; the cost model caps them at `finetuning.max_length`."""

    train_rows: int
    """Rows of the source's train split (0: an evaluation-only set)."""
    test_rows: int
    """Rows of the source's `test_split` (the study's test set; for an evaluation-only set, the
    split that validation and test are both drawn from)."""
    mean_tokens: float = 0.0
    """Sequence and token classification: one input."""
    context_tokens: float = 0.0
    """Extractive QA: the context (cut into windows of max_length with doc_stride overlap)."""
    question_tokens: float = 0.0
    """Extractive QA: the question (every window repeats it)."""
    query_tokens: float = 0.0
    """Retrieval: one query."""
    document_tokens: float = 0.0
    """Retrieval: one document of the labelled pool."""
    documents_per_query: float = 0.0
    """Retrieval: labelled documents each query brings to its split's pool (the study embeds the
    pool, not the full corpus)."""

    validation_rows: int = 0
    """Rows (retrieval: queries) of the source's own validation split (0: carved as below)."""
    validation_share: float = 0.0
    """An evaluation-only set: the share of its evaluation split drawn for validation (0: 5 %)."""

    def split_rows(self, max_train: int | None = None, max_eval: int | None = None) -> tuple[int, int, int]:
        """(train, validation, test) rows as the study uses them (trainables.tasks.data): test is
        the source's test split and validation its own validation split or 5 % of train, or, for
        an evaluation-only set without one, `validation_share` (5 %) of its evaluation split with
        the rest as test; the example caps cut after that."""
        def carve(rows: int, share: float = VALIDATION_SHARE) -> tuple[int, int]:
            validation = max(1, round(share * rows)) if rows else 0
            return rows - validation, validation

        if self.validation_rows:
            train, validation, test = self.train_rows, self.validation_rows, self.test_rows
        elif self.train_rows:
            (train, validation), test = carve(self.train_rows), self.test_rows
        else:
            train, (test, validation) = 0, carve(self.test_rows, self.validation_share or VALIDATION_SHARE)
        return (min(train, max_train or train), min(validation, max_eval or validation),
                min(test, max_eval or test))


VALIDATION_SHARE = 0.05
"""Validation = 5 % of train (seed 42), as trainables.tasks.data carves it (the paper's split)."""
LLAMA3_TOKENS_PER_WORD = 1.3
"""ESTIMATE: Llama-3 tokens per English whitespace word (a 128k BPE vocabulary splits running
text at ~1.2-1.4; names and numbers at more). Used where a source publishes words, not tokens."""

# The paper's 12 data sets. Row counts: the Hugging Face dataset cards' `dataset_info.splits`
# (num_examples) of the ids in SHIPPED_TASKS, unless a comment says otherwise. Mean lengths: word counts
# from the data sets' papers or cards x LLAMA3_TOKENS_PER_WORD, plus prefixes and special tokens;
# every length marked ESTIMATE is one (no source publishes Llama-3 token counts).
PAPER_TASK_STATISTICS: dict[str, TaskStatistics] = {
    # nyu-mll/glue sst2 card: train 67,349, validation 872 (test 1,821 is unlabelled, unused).
    # ESTIMATE: train rows are phrases (~9 words), validation sentences ~19 words: ~14 tokens.
    "sst2": TaskStatistics(train_rows=67_349, test_rows=872, mean_tokens=14),
    # nyu-mll/glue mnli card: train 392,702, validation_matched 9,815. ESTIMATE: premise ~22 +
    # hypothesis ~11 words, "Premise: " / "Hypothesis: " prefixes and 3 special tokens: ~50.
    "mnli": TaskStatistics(train_rows=392_702, test_rows=9_815, mean_tokens=50),
    # nyu-mll/glue qqp card: train 363,846, validation 40,430 (the card's 795k rows include the
    # 390,965 unlabelled test rows, unused). ESTIMATE: two questions of ~11 words + prefixes: ~38.
    "qqp": TaskStatistics(train_rows=363_846, test_rows=40_430, mean_tokens=38),
    # hgissbkh/conll2003-en: ASSUMED the CoNLL-2003 English splits (its card gives no counts here):
    # train 14,041, validation 3,250, test 3,453. The CoNLL-2003 paper's table gives 203,621
    # training words over 14,041 sentences (14.5 words). ESTIMATE: x ~1.4 sub-words + 2 special: ~22.
    "conll2003": TaskStatistics(train_rows=14_041, validation_rows=3_250, test_rows=3_453, mean_tokens=22),
    # hgissbkh/ontonotes5: ASSUMED tner/ontonotes5's splits (train 59,924, valid 8,528, test 8,262).
    # ESTIMATE: ~18 words per sentence (OntoNotes 5 English newswire/broadcast) -> ~26 tokens.
    "ontonotes5": TaskStatistics(train_rows=59_924, validation_rows=8_528, test_rows=8_262, mean_tokens=26),
    # hgissbkh/uner_en: ASSUMED UNER's en_ewt (UD English-EWT) splits: train 12,543, dev 2,001, test
    # 2,077 (UD EWT's README). ESTIMATE: ~15 words per sentence -> ~22 tokens.
    "uner-en": TaskStatistics(train_rows=12_543, validation_rows=2_001, test_rows=2_077, mean_tokens=22),
    # rajpurkar/squad card: train 87,599, validation 10,570. ESTIMATE: contexts ~120 words
    # (~155 tokens), questions ~10 words (~13 tokens).
    "squad": TaskStatistics(train_rows=87_599, test_rows=10_570, context_tokens=155, question_tokens=13),
    # rajpurkar/squad_v2 card: train 130,319, validation 11,873; same Wikipedia paragraphs as SQuAD.
    "squad-v2": TaskStatistics(train_rows=130_319, test_rows=11_873, context_tokens=155, question_tokens=13),
    # hgissbkh/record: ASSUMED super_glue record's splits (train 100,730, validation 10,000). ESTIMATE:
    # CNN/Daily Mail passages ~170 words (~220 tokens), cloze queries ~25 words (~30 tokens).
    "record": TaskStatistics(train_rows=100_730, test_rows=10_000, context_tokens=220, question_tokens=30),
    # MS MARCO: trained on hgissbkh/msmarco-pairs (ESTIMATE: the 532,751 (query, positive) pairs of MS
    # MARCO's train qrels; only 1,000 x 32 are read), scored on BeIR/msmarco-qrels validation (the dev
    # set: 6,980 queries, 7,437 judgements) and test (TREC DL 2019: 43 queries, 9,260 judgements),
    # one pool of their 16,697 labelled passages: ~2.4 per query. ESTIMATE: queries ~6 words (~9 tokens
    # with "Query: "), passages ~60 words (~82 tokens with "Document: ").
    "msmarco": TaskStatistics(train_rows=532_751, validation_rows=6_980, test_rows=43, query_tokens=9,
                              document_tokens=82, documents_per_query=2.4),
    # BeIR/nq-qrels test: 3,452 queries, 4,201 judged Wikipedia passages (the BEIR paper's table), halved
    # into validation and test; the pool is those 4,201 (~1.2 per query). ESTIMATE: queries ~9 words
    # (~15 tokens), "title. passage" ~100 words (~140 tokens).
    "nq": TaskStatistics(train_rows=0, test_rows=3_452, validation_share=0.5, query_tokens=15,
                         document_tokens=140, documents_per_query=1.2),
    # hgissbkh/mldr-en (MLDR's English rows): dev 200 and test 800 queries, one positive each, the pool
    # their 1,000 positives. Documents average 3,308 tokens (Shitao/MLDR's card, "Avg. Length of Docs";
    # its tokenizer is not named: taken as ours), so max_length truncates nearly all of them.
    # ESTIMATE: GPT-3.5-written questions ~15 words (~22 tokens with "Query: ").
    "mldr-en": TaskStatistics(train_rows=0, validation_rows=200, test_rows=800, query_tokens=22,
                              document_tokens=3_308, documents_per_query=1),
}

# The WordNet tasks of the default study: counted from the shipped files (a few tenths of a
# second, once per process), in whitespace words x WORDNET_TOKENS_PER_WORD.
WORDNET_DIR = Path(__file__).resolve().parents[2] / "trainables" / "data_files" / "wordnet"
WORDNET_TOKENS_PER_WORD = 1.3
"""ESTIMATE: tokens per word of the study's trained WordPiece vocabulary (2,048 entries in
micro.yaml split rarer words into a few pieces); no tokenizer is loaded by the driver."""
WORDNET_FILES = {"wordnet-supersense-cls": "supersense_cls", "wordnet-supersense-tag": "supersense_tag",
                 "wordnet-supersense-qa": "supersense_qa", "wordnet-usage-retrieval": "usage_retrieval",
                 "wordnet-definition-retrieval": "definition_retrieval"}


def words(text) -> int:
    return len(str(text).split())


@cache
def wordnet_statistics(task: str) -> TaskStatistics:
    """Rows per split and mean lengths of a shipped WordNet task file (see its README)."""
    with gzip.open(WORDNET_DIR / f"{WORDNET_FILES[task]}.jsonl.gz", "rt") as lines:
        rows = [json.loads(line) for line in lines]
    info = SHIPPED_TASKS[task]
    in_split = {split: [r for r in rows if r.get("split", info.test_split) == split]
                for split in (info.train_split, info.test_split)} if info.split_column else {info.test_split: rows}
    train = [] if info.train_task else in_split.get(info.train_split, [])
    test = in_split[info.test_split]

    def mean(values) -> float:
        values = list(values)
        return WORDNET_TOKENS_PER_WORD * sum(values) / max(1, len(values))

    sizes = dict(train_rows=len(train), test_rows=len(test))
    if info.family == "extractive_qa":
        return TaskStatistics(**sizes, context_tokens=mean(words(r["context"]) for r in rows),
                              question_tokens=mean(words(r["question"]) for r in rows))
    if info.family == "retrieval":
        if info.schema == "msmarco":
            passages = [json_field(r["passages"])["passage_text"] for r in rows]
            return TaskStatistics(**sizes, query_tokens=2 + mean(words(r["query"]) for r in rows),
                                  document_tokens=2 + mean(words(p) for group in passages for p in group),
                                  documents_per_query=sum(map(len, passages)) / len(passages))
        return TaskStatistics(**sizes, query_tokens=2 + mean(words(r["query"]) for r in rows),
                              document_tokens=2 + mean(words(r["answer"]) for r in rows), documents_per_query=1)
    field = info.text_fields[0]
    return TaskStatistics(**sizes, mean_tokens=2 + mean(
        len(json_field(r[field])) if field == "tokens" else words(r[field]) for r in rows))


def json_field(value):
    """The shipped files store nested fields as Python literals (single quotes)."""
    return value if isinstance(value, (dict, list)) else ast.literal_eval(value)


def shipped_task_statistics(task: str) -> TaskStatistics | None:
    """The statistics of a shipped task, or None for any other (a plugin's family may count its
    own: sweeper.contract.registry.task_statistics)."""
    if task in PAPER_TASK_STATISTICS:
        return PAPER_TASK_STATISTICS[task]
    if task in WORDNET_FILES:
        return wordnet_statistics(task)
    return None


# Model presets: LlamaEncoderConfig fields. Paper Table 1 sizes plus tiny CPU presets. The
# authors' code used 26 layers and FFN 4,096 for "1b"; that variant is `1b-authors`.
MODEL_PRESETS: dict[str, dict] = {
    "nano": dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2),
    "tiny": dict(hidden_size=128, intermediate_size=512, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2),
    "mini": dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=6,
                 num_attention_heads=8, num_key_value_heads=4),
    "210m": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                 num_attention_heads=12, num_key_value_heads=12),
    "610m": dict(hidden_size=1152, intermediate_size=4096, num_hidden_layers=26,
                 num_attention_heads=18, num_key_value_heads=6),
    "1b": dict(hidden_size=1728, intermediate_size=5120, num_hidden_layers=28,
               num_attention_heads=18, num_key_value_heads=6),
    "1b-authors": dict(hidden_size=1728, intermediate_size=4096, num_hidden_layers=26,
                       num_attention_heads=18, num_key_value_heads=6),
}


CPU_PRESETS = ("nano", "tiny", "mini")
"""Presets sized for a CPU (a study in minutes); the others are the paper's (Table 1)."""

SCALE_DEFAULTS: dict[str, dict] = {
    "cpu": dict(steps=600, global_batch_size=16),
    "paper": dict(steps=42_000, global_batch_size=2304),
}
"""`pretraining.steps` and `global_batch_size` when a spec leaves them out, by the scale of its
runs' presets: a CPU study's (search_spaces/micro.yaml: 600 steps of 16 x 128 tokens) or the
paper's (42,000 steps of 2,304 x 1,024 tokens, ~100B tokens)."""


def scale_of(presets) -> str:
    """'cpu' when every preset named is a CPU preset (none named: cpu), else 'paper'."""
    return "cpu" if all(preset in CPU_PRESETS for preset in presets) else "paper"


# The LlamaEncoderConfig fields `model.overrides` may set, with their types: kept here so the
# driver checks overrides without importing torch (tests/unit/spec/test_parsing.py compares this table with
# trainables.model.LlamaEncoderConfig's constructor, so the two cannot drift apart).
MODEL_FIELDS: dict[str, type] = {
    "vocab_size": int, "hidden_size": int, "intermediate_size": int, "num_hidden_layers": int,
    "num_attention_heads": int, "num_key_value_heads": int, "max_position_embeddings": int,
    "rms_norm_eps": float, "rope_theta": float, "initializer_range": float,
    "pad_token_id": int, "mask_token_id": int,
}
