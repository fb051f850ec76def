"""External checkpoints through moto's S3 server and a study on a real local Ray head: split from
tests/unit/plan/test_external_checkpoints.py."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import nano_study, run_sweeper

from sweeper.plan.load import load_study

from tiny_checkpoints import KINDS

from test_external_checkpoints import entry, external_spec


def test_an_object_store_source_is_planned_and_imported(tmp_path, tiny, object_store):
    from sweeper.plan.study_plan import plan_study as plan_of
    from sweeper.run.checkpoint_import import import_external_checkpoints
    from sweeper.store import storage
    from sweeper.store.folders import publish_tree
    from sweeper.store.layout import CHECKPOINT_MARKER, StudyLayout

    remote = object_store("models/bert")
    staged = tmp_path / "staged"
    shutil.copytree(tiny["bert"], staged)
    (staged / "uploaded").write_text("marker of this upload")
    publish_tree(staged, remote, "uploaded")
    # A spec names no credentials (sweeper.spec.names): the source as a spec gives it, keys in the environment.
    plan = plan_of(load_study(external_spec(tmp_path, entry("bert-s3", storage.strip_credentials(remote)))).spec)
    (checkpoint,) = plan.checkpoints
    assert set(checkpoint.external.identity["weights"]["files"]) == {"config.json", "model.safetensors",
                                                                     "tokenizer.json", "tokenizer_config.json"}
    layout = StudyLayout(str(tmp_path / "study"))
    (folder,) = import_external_checkpoints(list(plan.checkpoints), layout).values()
    assert storage.exists(storage.join(folder, CHECKPOINT_MARKER))
    assert sorted(os.listdir(Path(folder, "tokenizer"))) == ["tokenizer.json", "tokenizer_config.json"]
    assert Path(folder, "model.safetensors").read_bytes() == (tiny["bert"] / "model.safetensors").read_bytes()


E2E_TASKS = ("wordnet-supersense-cls", "wordnet-supersense-tag", "wordnet-supersense-qa", "wordnet-usage-retrieval",
             "wordnet-definition-retrieval")


@pytest.mark.e2e
def test_five_architectures_beside_a_study_run_are_fine_tuned_and_reported(ray_head, tmp_path, tiny):
    """The acceptance study: BERT, ModernBERT, EuroBERT, Llama and Qwen3 tiny checkpoints as
    `finetuning.checkpoints` beside one nano MLM run, on a task of every family (SC, TC, QA, IR and
    an evaluation-only IR set), through `sweeper run` on a real local Ray; every checkpoint has
    its rows, ran packed (its probe passed), and is in report.md; a rerun does nothing."""
    import pyarrow.dataset as ds

    entries = "".join(entry(f"{kind}-tiny", tiny[kind], "      meta: {objective: mlm}\n" if kind == "bert" else "")
                      for kind in KINDS)
    finetuning = ("  tasks: [" + ", ".join(E2E_TASKS) + "]\n  learning_rates: [0.001]\n  seeds: [0]\n"
                  "  max_steps: 3\n  batch_size: 8\n  micro_batch_size: 8\n  max_length: 48\n  doc_stride: 16\n"
                  "  max_train_examples: 48\n  max_eval_examples: 24\n  checkpoints:\n" + entries)
    spec = tmp_path / "spec.yaml"
    spec.write_text(nano_study("external-e2e", "    - objective: mlm\n      mask_ratio: [0.4]\n", finetuning))
    study = tmp_path / "study"
    result = run_sweeper("run", str(spec), "--storage", str(study), address=ray_head[0])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = ds.dataset(study / "results" / "trials", format="parquet", partitioning="hive").to_table().to_pandas()
    names = ["nano-mlm40-12", *(f"{kind}-tiny" for kind in KINDS)]
    assert sorted(rows["checkpoint_id"].unique()) == sorted(names)
    assert len(rows) == len(names) * len(E2E_TASKS) and set(rows["status"]) == {"ok"}
    assert rows.groupby("checkpoint_id")["task"].nunique().eq(len(E2E_TASKS)).all()
    external = rows[rows["source"] != "study"]
    assert set(external["packing"]) == {"packed"}, external[["checkpoint_id", "packing"]]
    assert rows["test_score"].notna().all()
    assert (external.loc[external["checkpoint_id"] == "bert-tiny", "objective"] == "mlm").all()
    report = (study / "report.md").read_text()
    for name in names:
        assert name in report
    rerun = run_sweeper("run", str(spec), "--storage", str(study), address=ray_head[0])
    trials = int((rows["task"] != "wordnet-definition-retrieval").sum())  # its rows are the retrieval trials'
    assert rerun.returncode == 0 and f"{trials} already recorded" in rerun.stdout, rerun.stdout[-2000:]
