"""The results store's four tables: their names, Parquet schemas, partition columns and row keys
(docs/results.md documents each column). `sweeper.store.results` reads and writes them."""
from __future__ import annotations

import pyarrow as pa

TRIALS = "trials"
EVAL_CURVES = "eval_curves"
PRETRAINING = "pretraining"
PREDICTIONS = "predictions"

PROTOCOL_COLUMNS = [
    ("batch_size", pa.int64()),
    ("max_steps", pa.int64()),
    ("epochs", pa.float64()),
    ("max_length", pa.int64()),
    ("doc_stride", pa.int64()),
    ("retrieval_temperature", pa.float64()),
    ("warmup_ratio", pa.float64()),
    ("betas", pa.list_(pa.float64())),
    ("eps", pa.float64()),
    ("weight_decay", pa.float64()),
    ("grad_clip", pa.float64()),
    ("params", pa.string()),
]
"""The fine-tuning settings a trial ran with, one column per field a spec can sweep
(`FinetuningSpec.SEARCH_FIELDS`, named as there; null where the field does not reach the task's
protocol, e.g. doc_stride outside QA), and `params`: the swept ones of its point as JSON ('{}':
only the learning rate is swept). Parts written before these columns read them as null."""

SCORE_COLUMNS = [
    ("paper_validation_score", pa.float64()),
    ("paper_test_score", pa.float64()),
    ("standard_validation_score", pa.float64()),
    ("standard_test_score", pa.float64()),
]
"""Both conventions' scores of a trial (`finetuning.scoring`: `validation_score` / `test_score` are
its own convention's), from the same predictions. Parts written before these columns read them
as null."""

TRIAL_SCHEMA = pa.schema([
    ("study", pa.string()),
    ("trial_key", pa.string()),
    ("run_name", pa.string()),
    ("run_key", pa.string()),
    ("checkpoint_id", pa.string()),
    ("replicate", pa.int64()),
    ("arm", pa.string()),
    ("objective", pa.string()),
    ("clm_fraction", pa.float64()),
    ("mask_ratio", pa.float64()),
    ("checkpoint_step", pa.int64()),
    ("total_steps", pa.int64()),
    ("init_from", pa.string()),
    ("steps_before", pa.int64()),
    ("tokens_seen", pa.int64()),
    ("source", pa.string()),
    ("parameters", pa.int64()),
    ("task", pa.string()),
    ("task_family", pa.string()),
    ("task_category", pa.string()),
    ("metric", pa.string()),
    ("search_mode", pa.string()),
    ("learning_rate", pa.float64()),
    ("seed", pa.int64()),
    ("sample", pa.int64()),
    *PROTOCOL_COLUMNS,
    ("status", pa.string()),
    ("validation_score", pa.float64()),
    ("test_score", pa.float64()),
    *SCORE_COLUMNS,
    ("train_loss", pa.float64()),
    ("train_steps", pa.int64()),
    ("error", pa.string()),
    ("wall_time_s", pa.float64()),
    ("packing", pa.string()),
    ("cpus", pa.float64()),
    ("gpus", pa.float64()),
    ("code_version", pa.string()),
    ("finished_at", pa.timestamp("ms", tz="UTC")),
])

EVAL_CURVE_SCHEMA = pa.schema([
    ("study", pa.string()),
    ("trial_key", pa.string()),
    ("checkpoint_id", pa.string()),
    ("task", pa.string()),
    ("learning_rate", pa.float64()),
    ("seed", pa.int64()),
    *PROTOCOL_COLUMNS,
    ("step", pa.int64()),
    ("train_loss", pa.float64()),
    ("validation_score", pa.float64()),
    ("test_score", pa.float64()),
])

PRETRAINING_SCHEMA = pa.schema([
    ("study", pa.string()),
    ("run_name", pa.string()),
    ("run_key", pa.string()),
    ("objective", pa.string()),
    ("replicate", pa.int64()),
    ("step", pa.int64()),
    ("phase", pa.string()),
    ("loss", pa.float64()),
    ("lr", pa.float64()),
    ("tokens_seen", pa.int64()),
    ("tokens_per_s", pa.float64()),
])

PREDICTION_SCHEMA = pa.schema([
    ("task", pa.string()),
    ("trial_key", pa.string()),
    ("split", pa.string()),
    ("example", pa.int64()),
    ("prediction", pa.string()),
    ("gold", pa.string()),
    ("finished_at", pa.timestamp("ms", tz="UTC")),
])
"""One row per evaluated example of a trial (`finetuning.keep_predictions`): its split
(validation, test), row index in the split, prediction and gold as JSON (docs/results.md), and
its trial row's `finished_at` (which attempt wrote it: the latest is kept)."""

SCHEMAS = {TRIALS: TRIAL_SCHEMA, EVAL_CURVES: EVAL_CURVE_SCHEMA, PRETRAINING: PRETRAINING_SCHEMA,
           PREDICTIONS: PREDICTION_SCHEMA}
PARTITION = {TRIALS: "task", EVAL_CURVES: "task", PRETRAINING: "run_name", PREDICTIONS: "task"}
ROW_KEY = {TRIALS: ["trial_key"], EVAL_CURVES: ["trial_key", "step"], PRETRAINING: ["run_key", "step"],
           PREDICTIONS: ["trial_key", "split", "example"]}
