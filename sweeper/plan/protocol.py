"""The paper's protocol as data: every item of arXiv 2507.00994's setup (Gisserot-Boukhlef et al.,
"Should We Still Pretrain Encoders with Masked Language Modeling?", v4) and of the authors'
evaluation code (EncodEval, hgissbkh/EncodEval), with the paper's value, where it comes from, how
to read the sweeper's value off a spec and its plan, and the setting that changes it.

One source of truth: docs/paper-protocol.md's table is rendered from `PAPER_PROTOCOL`
(sweeper.plan.departures.markdown_table; tests/unit/plan/test_departures.py holds the file to it), and
`sweeper plan` compares a `protocol: paper` spec with it (sweeper.plan.departures). An item whose
`read` is None is fixed in code (the module named): it cannot depart. An item with `deliberate`
departs on purpose, for the reason given.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sweeper.plan.branches import shared_prefixes
from sweeper.contract.catalog import MODEL_PRESETS
from sweeper.contract.registry import get_task
from sweeper.spec.parsing import values_of

ENCODEVAL = "EncodEval `encodeval/datasets.py`"
CONFIGS = "EncodEval `configs/{SC,TC,QA,IR}/*.yaml`"
PAPER = "paper, training setup"
OPTIMUS = "the authors' Optimus (Nicolas-BZRD/EuroBERT `optimus/`)"
PACKER = "Nicolas-BZRD/EuroBERT `optimus/dataprocess/pack_dataset.py`"


@dataclass(frozen=True, kw_only=True, slots=True)
class ProtocolItem:
    item: str
    """What is compared, in words."""
    paper: object
    """The paper's value, as `read` gives the sweeper's (compared with ==)."""
    source: str
    """Where the paper's value comes from."""
    setting: str
    """The spec setting that changes the sweeper's value (or the module that fixes it)."""
    read: Callable | None = None
    """(spec, plan) -> the sweeper's value; None: fixed in code, not a setting."""
    deliberate: str | None = None
    """Why the sweeper departs on purpose (None: a departure is a defect of the spec)."""


def paper_runs() -> set[str]:
    """The paper's pretraining runs by the authors' names (Fig. 11, Tables 10-13)."""
    base = {f"{size}-{objective}-42k" for size in ("210m", "610m", "1b")
            for objective in ("clm", "mlm20", "mlm30", "mlm40", "mlm50")}
    switches = {"12k": ("3k", "6k", "9k"), "22k": ("5k", "11k", "17k"), "42k": ("10k", "21k", "32k")}
    biphasic = {f"610m-clm-{s}-mlm40-{budget}" for budget, steps in switches.items() for s in steps}
    pure = {f"610m-{objective}-{budget}" for objective in ("clm", "mlm40") for budget in ("12k", "22k")}
    late = {f"610m-clm-40k-mlm{r}-42k" for r in (20, 30, 40, 50)}
    cpt = {f"610m-{source}-dec42k-mlm40-{total}" for source in ("clm", "mlm40") for total in ("44k", "54k", "64k")}
    return base | biphasic | pure | late | {"1b-clm-10k-mlm40-42k"} | cpt


PAPER_SOURCES = {
    "sst2": "nyu-mll/glue:sst2", "mnli": "nyu-mll/glue:mnli", "qqp": "nyu-mll/glue:qqp",
    "conll2003": "hgissbkh/conll2003-en", "ontonotes5": "hgissbkh/ontonotes5", "uner-en": "hgissbkh/uner_en",
    "squad": "rajpurkar/squad", "squad-v2": "rajpurkar/squad_v2", "record": "hgissbkh/record",
    "msmarco": "BeIR/msmarco + BeIR/msmarco-qrels, trained on hgissbkh/msmarco-pairs",
    "nq": "BeIR/nq + BeIR/nq-qrels", "mldr-en": "hgissbkh/mldr-en",
}
PAPER_TASKS = tuple(PAPER_SOURCES)


def task_values(spec, function) -> dict:
    """{task: function(TaskInfo)} over the spec's tasks that the paper has."""
    return {name: function(get_task(name)) for name in spec.finetuning.tasks if name in PAPER_SOURCES}


def source_of(task) -> str:
    if task.schema == "beir":
        return f"{task.source} + {task.source}-qrels" + (
            f", trained on {task.train_source}" if task.train_source else ""
        )
    return task.source


def split_rule(task) -> str:
    if task.validation_split:
        return f"own {task.validation_split} / {task.test_split}"
    if task.train_task:
        return f"{task.test_split} split {round(100 * (task.validation_share or 0.05))} / rest"
    draw = "train_test_split(0.95, seed 42)" if task.validation_draw == "train_test_split" else "5 % shuffled (seed 42)"
    return f"test = {task.test_split}, validation = {draw}"


def pool_rule(task) -> str:
    return "labelled documents" if task.schema in ("beir", "mldr-corpus") else "every listed passage"


def budget_of(spec, task: str) -> str:
    from sweeper.plan.study_plan import finetune_protocol

    protocol = finetune_protocol(spec, task)
    return "one epoch" if protocol.max_steps >= 100_000 and protocol.epochs == 1 else \
        f"{protocol.max_steps:,} steps or {protocol.epochs:g} epoch"


def retrieval_negatives(spec) -> int | None:
    """Negatives each query is scored against in the retrieval loss: every other pair of the
    effective retrieval batch, the optimizer step's (the loss is gradient-cached:
    `FinetuneProtocol.in_batch_negatives`); None when the spec trains no retrieval task."""
    from sweeper.plan.study_plan import finetune_protocol

    tasks = [t for t in spec.finetuning.tasks if get_task(t).family == "retrieval" and not get_task(t).train_task]
    if not tasks:
        return None
    return finetune_protocol(spec, tasks[0]).in_batch_negatives


def samples_per_row(spec) -> int:
    """Samples a pretraining row holds (trainables.corpus)."""
    return 2 if spec.data.sample_lengths == "variable" else 1


def one_or_all(values: set):
    return next(iter(values)) if len(values) == 1 else sorted(values)


def first(value):
    values = values_of(value)
    return values[0] if len(values) == 1 else list(values)


def pre(name: str) -> Callable:
    return lambda spec, plan: first(getattr(spec.pretraining, name))


def opt(name: str) -> Callable:
    return lambda spec, plan: first(getattr(spec.pretraining.optimizer, name))


def ft(name: str, default=None) -> Callable:
    return lambda spec, plan: first(getattr(spec.finetuning.at({}), name, default))


TABLE_1 = {"210m": (12, 768, 3072, 12, 12), "610m": (26, 1152, 4096, 18, 6), "1b": (28, 1728, 5120, 18, 6)}
SHAPE = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads")
CODE = "fixed in code"


def presets_of(spec, plan) -> dict:
    used = {run.preset for run in plan.runs if run.preset in TABLE_1}
    return {
        preset: tuple({**MODEL_PRESETS[preset], **spec.model.overrides}[k] for k in SHAPE) for preset in sorted(used)
    }


EVAL_TASKS = "EncodEval `encodeval/eval_tasks/`"
"""Where the authors' task classes live (SequenceClassificationEval, TokenClassificationEval,
QuestionAnsweringEval, RetrievalEval), read through the code search; the file of each class is
not named where the search did not show it."""

CONVENTIONS = {
    "SC": {"paper": "class ids; accuracy; text + EOS, no BOS",
           "standard": "class ids; accuracy; the tokenizer's special tokens (Llama-3: BOS, no EOS)"},
    "TC": {"paper": "every sub-token its word's tag; per-sentence macro-F1 (scikit-learn, O included) of "
                    "majority-voted word tags, averaged; words joined by spaces + EOS, no BOS",
           "standard": "first sub-token of each word; seqeval entity micro-F1; the tokenizer's special tokens"},
    "QA": {"paper": "2-label token tagging of the first gold answer; per-example F1 of token positions (empty "
                    "= {0}), averaged; 'Question: {q}\\nContext: ' + context + EOS, no BOS, context truncated",
           "standard": "start/end pointer head; SQuAD word F1 (n-best spans); BOS q EOS c EOS windows with doc_stride"},
    "IR": {"paper": "binary relevance; NDCG@10 by sklearn ndcg_score over the ten retrieved (their own ideal "
                    "ranking); text + EOS, no BOS",
           "standard": "binary relevance; NDCG@10 normalised by every judged positive; the tokenizer's special tokens"},
}
"""Labels; metric; input format of each category under each `finetuning.scoring` convention."""

CONVENTION_SOURCES = {"SC": "SequenceClassificationEval", "TC": "TokenClassificationEval",
                      "QA": "QuestionAnsweringEval; paper section 3 ('TC and QA are trained using token-level "
                            "cross-entropy')",
                      "IR": "RetrievalEval (get_predictions_labels_at_k, compute_ndcgs, tokenize)"}


def convention(category: str) -> Callable:
    """What the spec's `finetuning.scoring` gives the category's labels, metric and inputs."""
    return lambda spec, plan: CONVENTIONS[category][spec.finetuning.scoring]


def cpt_start(spec, plan) -> str | None:
    """Where the spec's continued-pretraining runs start (None: it has none)."""
    if not any(run.init_from for run in plan.runs):
        return None
    branches = shared_prefixes(spec, plan.runs)
    if any(branches.get(run.name) for run in plan.runs if run.init_from):  # sweeper.plan.branches
        return "resumed from shared checkpoints whenever possible"
    return "each run from the decayed final checkpoint of its init_from run, trained on its own"


def intermediate(spec, plan) -> dict:
    """Each configuration's intermediate checkpoint steps (its replicates evaluate the same steps;
    the runs row counts them)."""
    return {run.name: sorted(run.checkpoint_steps) for run in plan.runs if run.checkpoint_steps and run.replicate == 0}


PAPER_PROTOCOL: tuple[ProtocolItem, ...] = (
    # --- backbone ------------------------------------------------------------------------------
    ProtocolItem(item="sizes (layers, hidden, FFN, heads, KV heads)", paper={k: TABLE_1[k] for k in TABLE_1},
                 source="paper Table 1", setting="pretraining.runs[].preset, model.overrides", read=presets_of),
    ProtocolItem(item="encoder: pre-norm RMSNorm 1e-5, SwiGLU, RoPE 10,000, GQA, no biases, untied head, init 0.02",
                 paper="Llama-style", source=PAPER, setting=f"{CODE}: trainables/model.py (model.overrides)"),
    ProtocolItem(item="tokenizer", paper="meta-llama/Meta-Llama-3-8B", source=PAPER, setting="data.tokenizer",
                 read=lambda spec, plan: spec.data.tokenizer),
    ProtocolItem(item="vocabulary", paper=128_256, source="Llama-3 tokenizer", setting="data.vocab_size",
                 read=lambda spec, plan: spec.data.vocab_size),
    ProtocolItem(item="[MASK]: a reserved special token of the tokenizer, no added row", paper="reserved",
                 source=f"{OPTIMUS} `trainer/configuration/model.py` (mask_token_id 128,002, Llama-3's "
                        "<|reserved_special_token_0|>), `trainer/model/load.py`",
                 setting="data.mask_token", read=lambda spec, plan: spec.data.mask_token),
    ProtocolItem(item="pretraining samples: lengths, block (two samples of 12 to block - 12 tokens per block)",
                 paper=("variable", 2048), source=f"paper section 2, footnote 6; {PACKER} (`random_size`)",
                 setting="data.sample_lengths, data.seq_len",
                 read=lambda spec, plan: (spec.data.sample_lengths, first(spec.data.seq_len))),
    ProtocolItem(item="packer details: sample ends, shuffle",
                 paper="a sample may end up to 11 tokens short at a document end; samples shuffled one by one",
                 source=f"{PACKER} `_pack`, {OPTIMUS} `trainer/data.py`", setting=f"{CODE}: trainables/corpus.py",
                 read=lambda spec, plan: "every sample its drawn length; a block's two samples in one step",
                 deliberate="a sample's cut is then a function of its block alone, so the sample order stays a "
                            "pure function of the step (exact resume, no sample index)"),
    ProtocolItem(item="samples per step", paper=2304, source=PAPER,
                 setting="pretraining.global_batch_size (rows; x 2 under data.sample_lengths: variable)",
                 read=lambda spec, plan: first(spec.pretraining.global_batch_size) * samples_per_row(spec)),
    ProtocolItem(item="tokens per step", paper=2_373_120, source="paper footnote 6 (2,304 x 1,030)",
                 setting="pretraining.global_batch_size x data.seq_len",
                 read=lambda spec, plan: one_or_all({run.tokens_per_step for run in plan.runs}),
                 deliberate="1,030 is the mean of a uniform from 12 to 2,048; the authors' packer cuts every "
                            "2,048 tokens into two samples (mean 1,024): 2,304 samples hold 2,359,296 tokens"),
    ProtocolItem(item="attention: causal for CLM, bidirectional for MLM and fine-tuning",
                 paper="as stated", source=PAPER, setting=f"{CODE}: trainables/objectives.py, trainables/model.py"),
    ProtocolItem(item="pretraining attention and positions (the paper does not say)", paper="within a sample",
                 source=f"{OPTIMUS} `trainer/data.py` (cu_seq_lens per sample), `trainer/model/model.py` (RoPE "
                        "positions from cu_seq_lens)", setting="data.sample_lengths (fixed: within a document)",
                 read=lambda spec, plan: "within a sample" if spec.data.sample_lengths == "variable"
                 else "within a document"),
    # --- objectives ------------------------------------------------------------------------------
    ProtocolItem(item="MLM masking ratios", paper=[0.2, 0.3, 0.4, 0.5], source="paper, masking-ratio study",
                 setting="pretraining.runs[].mask_ratio",
                 read=lambda spec, plan: sorted({r.mask_ratio for r in plan.runs if r.mask_ratio is not None})),
    ProtocolItem(item="MLM replacement (no 80/10/10)", paper=(0.0, 0.0), source=PAPER,
                 setting="pretraining.random_replace, pretraining.keep_original",
                 read=lambda spec, plan: (spec.pretraining.random_replace, spec.pretraining.keep_original)),
    # --- pretraining recipe ----------------------------------------------------------------------
    ProtocolItem(item="corpus", paper="HuggingFaceFW/fineweb-edu", source=PAPER, setting="data.corpus",
                 read=lambda spec, plan: spec.data.corpus),
    ProtocolItem(item="one sample order for every run", paper="shared", source=PAPER,
                 setting=f"{CODE}: data.order_seed (one per study)"),
    ProtocolItem(item="steps of a base run", paper=42_000, source=PAPER, setting="pretraining.steps",
                 read=pre("steps")),
    ProtocolItem(item="peak learning rate", paper=5e-4, source=PAPER, setting="pretraining.optimizer.peak_lr",
                 read=opt("peak_lr")),
    ProtocolItem(item="AdamW betas / eps / weight decay / grad clip", paper=((0.9, 0.95), 1e-5, 0.1, 1.0),
                 source=PAPER, setting="pretraining.optimizer.*",
                 read=lambda spec, plan: tuple(first(getattr(spec.pretraining.optimizer, k))
                                               for k in ("betas", "eps", "weight_decay", "grad_clip"))),
    ProtocolItem(item="warmup-stable-decay: warmup / linear decay to 0", paper=(2000, 2000), source=PAPER,
                 setting="pretraining.warmup_steps, pretraining.decay_steps",
                 read=lambda spec, plan: (first(spec.pretraining.warmup_steps), first(spec.pretraining.decay_steps))),
    ProtocolItem(item="pretraining precision", paper="bf16", source=PAPER,
                 setting=f"{CODE}: bf16 autocast on GPUs (trainables/train_step.py)"),
    ProtocolItem(item="intermediate checkpoints (610m MLM-40 and CLM)",
                 paper={name: [1000, 2000, 5000, 10_000, 20_000, 40_000]
                        for name in ("610m-clm-42k", "610m-mlm40-42k")},
                 source="paper, data-efficiency curves", setting="pretraining.runs[].checkpoint_steps",
                 read=intermediate),
    # --- the grid --------------------------------------------------------------------------------
    ProtocolItem(item="pretraining runs (authors' names)", paper=paper_runs(),
                 source="paper Fig. 11, Tables 10-13", setting="pretraining.runs (switch_steps, steps, ...)",
                 read=lambda spec, plan: {r.name for r in plan.runs}),
    ProtocolItem(item="models / evaluated checkpoints", paper=(38, 50), source="paper text",
                 setting="pretraining.runs", read=lambda spec, plan: (len(plan.runs), len(plan.checkpoints)),
                 deliberate="the grid the paper's Fig. 11 and Tables 10-13 list (row above: pure CLM and MLM at "
                            "12k and 22k, one 1b split) has 39 models and 51 checkpoints; the text's 38 / 50 "
                            "leave one of its runs uncounted"),
    ProtocolItem(item="CPT schedule (re-warmup, decay)", paper="not stated", source="paper (unstated)",
                 setting="pretraining.runs[].warmup_steps / decay_steps of the init_from entry",
                 read=lambda spec, plan: sorted({(r.warmup_steps, r.decay_steps) for r in plan.runs if r.init_from}),
                 deliberate="the paper does not give it: a short re-warmup, then warmup-stable-decay (a setting)"),
    ProtocolItem(item="CPT runs' starting checkpoints", paper="resumed from shared checkpoints whenever possible",
                 source=PAPER, setting="pretraining.runs[].init_from", read=cpt_start,
                 deliberate="pretraining.share_prefixes: false trains each CPT run from the decayed checkpoint "
                            "its init_from names (610m-clm-dec42k-...), none branched from another's (for "
                            "comparison and debugging; the default shares them: sweeper.plan.branches)"),
    # --- fine-tuning -----------------------------------------------------------------------------
    ProtocolItem(item="data sets (hub ids)", paper=PAPER_SOURCES, source=ENCODEVAL,
                 setting="finetuning.tasks (sweeper/contract/catalog.py)",
                 read=lambda spec, plan: task_values(spec, source_of)),
    ProtocolItem(item="splits", source=ENCODEVAL, setting="the catalog's validation_split / validation_draw / "
                 "validation_share", read=lambda spec, plan: task_values(spec, split_rule),
                 paper={**{t: "test = validation, validation = train_test_split(0.95, seed 42)"
                           for t in ("sst2", "qqp", "squad", "squad-v2", "record")},
                        "mnli": "test = validation_matched, validation = train_test_split(0.95, seed 42)",
                        **{t: "own validation / test" for t in ("conll2003", "ontonotes5", "uner-en", "msmarco")},
                        "nq": "test split 50 / rest", "mldr-en": "own dev / test"}),
    ProtocolItem(item="NQ's 50/50 draw", paper="Python's random.sample after set_seed(fine-tuning seed)",
                 source=ENCODEVAL + " `nq()`, `encodeval/eval_tasks/abstract_eval.py` `EvalConfig.__post_init__`",
                 setting="trainables/tasks/adapters.py split_queries",
                 read=lambda spec, plan: "seed 42, the same halves for every trial",
                 deliberate="nq() draws with Python's global random, which EvalConfig seeds with the run's "
                            "fine-tuning seed (transformers.set_seed) before it loads the data: their halves "
                            "follow the fine-tuning seed (as far as nothing else draws from random in between), "
                            "so a seed's scores mix the model and the split; seed 42 gives every trial the same "
                            "halves, so seeds vary the model alone"),
    ProtocolItem(item="retrieval pool", source=ENCODEVAL, setting="the catalog's schema (beir, mldr-corpus)",
                 paper={t: "labelled documents" for t in ("msmarco", "nq", "mldr-en")},
                 read=lambda spec, plan: {k: v for k, v in task_values(spec, pool_rule).items()
                                          if get_task(k).family == "retrieval"}),
    ProtocolItem(item="input prefixes", source=ENCODEVAL, setting="the catalog's field_prefixes",
                 paper={"mnli": ("Premise: ", "Hypothesis: "), "qqp": ("Question 1: ", "Question 2: "),
                        **{t: ("Query: ", "Document: ") for t in ("msmarco", "nq", "mldr-en")}},
                 read=lambda spec, plan: {k: v for k, v in task_values(spec, lambda t: tuple(t.field_prefixes)).items()
                                          if k in ("mnli", "qqp", "msmarco", "nq", "mldr-en")}),
    ProtocolItem(item="step limit per task", source=CONFIGS, setting="finetuning.max_steps, epochs, task_budgets",
                 paper={t: ("one epoch" if t in ("conll2003", "uner-en") else "1,000 steps or 1 epoch")
                        for t in PAPER_TASKS if t not in ("nq", "mldr-en")},
                 read=lambda spec, plan: {t: budget_of(spec, t) for t in spec.finetuning.tasks
                                          if t in PAPER_SOURCES and not get_task(t).train_task}),
    ProtocolItem(item="learning rates x seeds", paper=([1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4], [0, 1, 2, 3, 4]),
                 source=CONFIGS, setting="finetuning.learning_rates, finetuning.seeds",
                 read=lambda spec, plan: (list(spec.finetuning.learning_rates), list(spec.finetuning.seeds))),
    ProtocolItem(item="effective batch", paper=32, source=CONFIGS, setting="finetuning.batch_size",
                 read=ft("batch_size")),
    ProtocolItem(item="retrieval negatives per query", paper=31,
                 source="EncodEval `configs/IR/msmarco_pairs_*.yaml`: CachedMultipleNegativesRankingLoss, batch 32",
                 setting="finetuning.batch_size - 1 with the gradient-cached loss (without it: micro_batch_size - 1)",
                 read=lambda spec, plan: retrieval_negatives(spec)),
    ProtocolItem(item="retrieval temperature (scale 20)", paper=0.05, source="sentence-transformers' default scale",
                 setting="finetuning.retrieval_temperature", read=ft("retrieval_temperature")),
    ProtocolItem(item="fine-tuning AdamW betas / eps / weight decay", paper=((0.9, 0.95), 1e-5, 0.1), source=CONFIGS,
                 setting="finetuning.betas, eps, weight_decay",
                 read=lambda spec, plan: tuple(first(getattr(spec.finetuning, k))
                                               for k in ("betas", "eps", "weight_decay"))),
    ProtocolItem(item="warmup then linear decay", paper=0.1, source=CONFIGS, setting="finetuning.warmup_ratio",
                 read=ft("warmup_ratio")),
    ProtocolItem(item="parameters without weight decay", paper="bias_and_norm", source="HF Trainer's AdamW grouping",
                 setting="finetuning.weight_decay_exempt", read=ft("weight_decay_exempt", "none")),
    ProtocolItem(item="fine-tuning weights", paper="bf16", source="EncodEval `abstract_eval.py` (model.to(bfloat16))",
                 setting="finetuning.precision", read=ft("precision", "fp32")),
    ProtocolItem(item="final weights scored (no best-checkpoint pick)", paper="final", source=CONFIGS,
                 setting=f"{CODE}: trainables/finetune_loop.py"),
    ProtocolItem(item="mean pooling (SC, IR)", paper="as stated", source=CONFIGS,
                 setting=f"{CODE}: trainables/tasks/heads.py"),
    ProtocolItem(item="tokens per example (max_length)", paper=2028,
                 source="EncodEval `encodeval/eval_tasks/abstract_eval.py` (EvalConfig: round(0.99 x 2,048); "
                        "the configs leave max_length empty)", setting="finetuning.max_length", read=ft("max_length")),
    *(ProtocolItem(item=f"{category}: labels; metric; input format", paper=CONVENTIONS[category]["paper"],
                   source=f"{EVAL_TASKS} {CONVENTION_SOURCES[category]}",
                   setting=f"finetuning.scoring (trainables/tasks/{module})", read=convention(category))
      for category, module in (("SC", "classification.py"), ("TC", "classification.py"), ("QA", "qa.py"),
                               ("IR", "retrieval.py, metrics.py"))),
)
