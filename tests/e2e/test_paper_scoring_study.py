"""A study scored the authors' way (`finetuning.scoring: paper`) that keeps its predictions
(`finetuning.keep_predictions: true`), through `sweeper run` on a real local Ray: every stored score
is recomputed from the stored predictions by its family's `rescore`: the trial's convention for
every family, and the other one too where the rows hold it (all but QA).

The tiny Llama-shaped checkpoint (tests/support/tiny_checkpoints.py: BOS added, an EOS token) is
fine-tuned on a token-classification task, an extractive-QA task and the retrieval task with its
evaluation-only set. Each family's `evaluate` / `rescore` is its own (trainables/tasks/)."""
from __future__ import annotations

import json

import pytest
from conftest import run_sweeper
from tiny_checkpoints import build_tiny_checkpoint

from sweeper.contract.registry import family_of, resolve
from sweeper.store.layout import StudyLayout
from sweeper.store.results import read_predictions, read_trials

pytestmark = pytest.mark.e2e

TASKS = ("wordnet-supersense-tag", "wordnet-supersense-qa", "wordnet-usage-retrieval", "wordnet-definition-retrieval")
"""TC, QA, IR and the IR set scored by the retrieval trial's model (a companion row)."""


def spec_text(checkpoint, tasks=TASKS) -> str:
    return ("study: paper-scoring\nfinetuning:\n  tasks: [" + ", ".join(tasks) + "]\n"
            "  scoring: paper\n  keep_predictions: true\n  learning_rates: [0.001]\n  seeds: [0]\n"
            "  max_steps: 3\n  batch_size: 8\n  micro_batch_size: 8\n  max_length: 48\n  doc_stride: 16\n"
            "  max_train_examples: 48\n  max_eval_examples: 24\n"
            f"  checkpoints:\n    - name: llama-tiny\n      source: {checkpoint}\n")


def stored(rows) -> list[dict]:
    """A split's predictions as `rescore` reads them: JSON decoded, in example order."""
    return [{"example": int(e), "prediction": json.loads(p), "gold": json.loads(g)}
            for e, p, g in rows.sort_values("example")[["example", "prediction", "gold"]].itertuples(index=False)]


def test_every_score_is_recomputed_from_the_stored_predictions(ray_head, tmp_path):
    checkpoint = build_tiny_checkpoint("llama", tmp_path / "llama-tiny")
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text(checkpoint))
    study = tmp_path / "study"
    result = run_sweeper("run", str(spec), "--storage", str(study), address=ray_head[0])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    layout = StudyLayout(str(study))
    trials, predictions = read_trials(layout).to_pandas(), read_predictions(layout)
    assert sorted(trials["task"]) == sorted(TASKS) and set(trials["status"]) == {"ok"}
    for trial in trials.itertuples(index=False):
        family = resolve(family_of(trial.task_family).implementation)
        assert trial.metric == family.METRICS["paper"], (trial.task, trial.metric)
        for split in ("validation", "test"):
            rows = predictions[(predictions["trial_key"] == trial.trial_key) & (predictions["split"] == split)]
            assert len(rows) and rows["example"].is_unique, (trial.task, split)
            kept = stored(rows)
            # QA's rows hold the paper convention's token positions, not answer text: its standard
            # score needs the prepared split (its rescore refuses); every other family gives both.
            conventions = ("paper",) if trial.task_family == "extractive_qa" else ("paper", "standard")
            for scoring in conventions:
                column = getattr(trial, f"{scoring}_{split}_score")
                assert family.rescore(kept, scoring) == column, (trial.task, split, scoring)
            assert getattr(trial, f"{split}_score") == getattr(trial, f"paper_{split}_score")
    # What keep_predictions costs, per trial (docs/results.md quotes these figures: pytest -s).
    files = sorted((study / "results" / "predictions").rglob("part-*.parquet"))
    print(json.dumps({"rows": len(predictions), "trials": len(trials), "bytes": sum(f.stat().st_size for f in files),
                      "rows_per_task": predictions.groupby("task").size().to_dict(),
                      "bytes_per_task": {f.parent.name: f.stat().st_size for f in files}}))
