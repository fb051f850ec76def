"""What a spec can name: fine-tuning tasks and model presets (pure data, no torch).

A task (`sweeper.configs.TaskInfo`) travels to the workers inside each trial's config; its family
(`sweeper.registry.FAMILIES`) names the worker-side implementation.

A task names where its rows come from and how their columns map onto the family's fields
(`schema` picks the adapter for QA and retrieval sources); the family (sequence_classification,
token_classification, extractive_qa, retrieval) owns tokenisation, the head, the loss and the
metric. Splits follow the paper: the source's official validation split is the test set, and
validation is 5 % of train drawn with seed 42. An evaluation-only retrieval set (`train_task`
set) is never trained on: the model trained on `train_task` is scored on it, and its validation
set is 5 % of its evaluation split, the rest being its test set.
"""
from __future__ import annotations

from sweeper.configs import TaskInfo


ONTONOTES5_TAGS = (
    "O", "B-CARDINAL", "B-DATE", "I-DATE", "B-PERSON", "I-PERSON", "B-NORP", "B-GPE", "I-GPE", "B-LAW", "I-LAW",
    "B-ORG", "I-ORG", "B-PERCENT", "I-PERCENT", "B-ORDINAL", "B-MONEY", "I-MONEY", "B-WORK_OF_ART",
    "I-WORK_OF_ART", "B-FAC", "B-TIME", "I-CARDINAL", "B-LOC", "B-QUANTITY", "I-QUANTITY", "I-NORP", "I-LOC",
    "B-PRODUCT", "I-TIME", "B-EVENT", "I-EVENT", "I-FAC", "B-LANGUAGE", "I-PRODUCT", "I-ORDINAL", "I-LANGUAGE",
)


TASKS: dict[str, TaskInfo] = {
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
        # The paper's 12 data sets, by the Hugging Face ids of the authors' evaluation code.
        TaskInfo(name="sst2", family="sequence_classification", category="SC", source="nyu-mll/glue:sst2",
                 metric="accuracy", label_names=("negative", "positive")),
        TaskInfo(name="mnli", family="sequence_classification", category="SC", source="nyu-mll/glue:mnli",
                 metric="accuracy", text_fields=("premise", "hypothesis"),
                 field_prefixes=("Premise: ", "Hypothesis: "), test_split="validation_matched",
                 label_names=("entailment", "neutral", "contradiction")),
        TaskInfo(name="qqp", family="sequence_classification", category="SC", source="nyu-mll/glue:qqp",
                 metric="accuracy", text_fields=("question1", "question2"),
                 field_prefixes=("Question 1: ", "Question 2: "), label_names=("not_duplicate", "duplicate")),
        TaskInfo(name="conll2003", family="token_classification", category="TC", source="eriktks/conll2003",
                 metric="f1", text_fields=("tokens",), label_field="ner_tags",
                 label_names=("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")),
        # tner's integer tags, in its label2id order (dataset/label.json).
        TaskInfo(name="ontonotes5", family="token_classification", category="TC", source="tner/ontonotes5",
                 metric="f1", text_fields=("tokens",), label_field="tags",
                 data_files={"train": [f"dataset/train{i:02d}.json" for i in range(4)],
                             "validation": "dataset/valid.json"},
                 label_names=ONTONOTES5_TAGS),
        TaskInfo(name="uner-en", family="token_classification", category="TC",
                 source="universalner/universal_ner:en_ewt", metric="f1", text_fields=("tokens",),
                 label_field="ner_tags", label_names=("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC")),
        TaskInfo(name="squad", family="extractive_qa", category="QA", source="rajpurkar/squad", metric="f1",
                 schema="squad"),
        TaskInfo(name="squad-v2", family="extractive_qa", category="QA", source="rajpurkar/squad_v2", metric="f1",
                 schema="squad", with_no_answer=True),
        TaskInfo(name="record", family="extractive_qa", category="QA", source="aps/super_glue:record", metric="f1",
                 schema="record"),
        # One bi-encoder trained on MS MARCO pairs, scored on MS MARCO, NQ and MLDR.
        TaskInfo(name="msmarco", family="retrieval", category="IR", source="microsoft/ms_marco:v1.1",
                 metric="ndcg@10", schema="msmarco"),
        TaskInfo(name="nq", family="retrieval", category="IR", source="sentence-transformers/natural-questions",
                 metric="ndcg@10", schema="pairs", test_split="train", train_task="msmarco"),
        TaskInfo(name="mldr-en", family="retrieval", category="IR", source="Shitao/MLDR", metric="ndcg@10",
                 schema="mldr", test_split="dev", train_task="msmarco",
                 data_files={"train": "mldr-v1.0-en/train.jsonl.gz", "dev": "mldr-v1.0-en/dev.jsonl.gz"}),
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


def get_task(name: str) -> TaskInfo:
    try:
        return TASKS[name]
    except KeyError:
        raise KeyError(f"unknown task {name!r}; known: {', '.join(sorted(TASKS))}") from None




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


# The LlamaEncoderConfig fields `model.overrides` may set, with their types: kept here so the
# driver checks overrides without importing torch (tests/test_spec.py compares this table with
# trainables.model.LlamaEncoderConfig's constructor, so the two cannot drift apart).
MODEL_FIELDS: dict[str, type] = {
    "vocab_size": int, "hidden_size": int, "intermediate_size": int, "num_hidden_layers": int,
    "num_attention_heads": int, "num_key_value_heads": int, "max_position_embeddings": int,
    "rms_norm_eps": float, "rope_theta": float, "initializer_range": float,
    "pad_token_id": int, "mask_token_id": int,
}


def register_task(info: TaskInfo) -> TaskInfo:
    """Make a data set nameable in specs (a plugin's tasks; the shipped ones are listed above)."""
    TASKS[info.name] = info
    return info
