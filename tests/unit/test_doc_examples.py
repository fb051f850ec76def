"""Examples are code: every ```yaml block of README.md and docs/*.md is planned by `sweeper plan`.

A block plans with exit 0, unless a marker comment in it says otherwise:
- `# expect-error: <text>`: the plan exits 2 and its error holds <text>;
- `# fragment: <why>`: a section to add to a whole spec, not a spec: skipped, with the reason.
A relative local folder a block names as a checkpoint `source` is built first as a tiny checkpoint
(tests/tiny_checkpoints.py; the family is the first of its kinds the path names, else BERT), in
the folder the plan runs in.
"""
import os
import re
from pathlib import Path

import pytest
import yaml
from cli_process import sweeper_cli
from conftest import ROOT
from tiny_checkpoints import KINDS, build_tiny_checkpoint
from datetime import UTC

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```ya?ml[^\n]*\n(.*?)^```", re.M | re.S)


def blocks() -> list:
    found = []
    for document in DOCUMENTS:
        text = document.read_text()
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(pytest.param(match.group(1), id=f"{document.relative_to(ROOT)}:{line}"))
    return found


def marker(block: str, name: str) -> str | None:
    match = re.search(rf"#\s*{name}:\s*(.+)$", block, re.M)
    return match.group(1).strip() if match else None


def build_local_sources(block: str, where: Path) -> None:
    """A tiny checkpoint at each relative local folder the block names as a checkpoint source."""
    data = yaml.safe_load(block) or {}
    for entry in (data.get("finetuning") or {}).get("checkpoints") or []:
        source = str(entry.get("source", ""))
        if source and "://" not in source and not source.startswith(("hf:", "/")):
            kind = next((kind for kind in KINDS if kind in source.lower()), "bert")
            if not (where / source).exists():
                build_tiny_checkpoint(kind, where / source)


def test_the_documents_hold_examples():
    assert len(blocks()) >= 2, "README.md's worked specs were not found"


@pytest.mark.parametrize("block", blocks())
def test_every_yaml_block_of_the_docs_plans(block, tmp_path):
    if (why := marker(block, "fragment")) is not None:
        pytest.skip(f"a fragment, not a whole spec: {why}")
    build_local_sources(block, tmp_path)
    spec = tmp_path / "example.yaml"
    spec.write_text(block)
    result = sweeper_cli("plan", str(spec), cwd=tmp_path, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "Traceback" not in result.stderr, result.stderr
    if (expected := marker(block, "expect-error")) is not None:
        assert result.returncode == 2, (result.stdout, result.stderr)
        assert expected in result.stderr, result.stderr
    else:
        assert result.returncode == 0, result.stderr


def results_snippet(call: str = "rescore(") -> str:
    """The python block of docs/results.md that calls `call` (recomputes a trial's scores with
    `rescore`, by default)."""
    text = (ROOT / "docs" / "results.md").read_text()
    (block,) = [b for b in re.findall(r"^```python\n(.*?)^```", text, re.M | re.S) if call in b]
    return block


def test_the_results_page_recomputes_a_trials_scores_from_its_predictions(tmp_path, monkeypatch):
    """docs/results.md's `rescore` snippet, run as written against a store holding a retrieval
    trial's row and predictions, the predictions written twice (a trial run again after a killed
    driver wrote them): they read once, and each score of the trial's convention is recomputed
    exactly."""
    import numpy as np
    import torch

    from sweeper.store.layout import StudyLayout
    from sweeper.store.results import PREDICTIONS, TRIALS, read_predictions, write_rows
    from trainables.finetune_loop import prediction_rows, scored
    from trainables.tasks.retrieval import Retrieval

    rng = np.random.default_rng(0)
    table = torch.nn.functional.normalize(torch.from_numpy(rng.normal(size=(12 + 40, 8)).astype(np.float32)), dim=1)

    class Lookup(torch.nn.Module):
        def forward(self, input_ids, attention_mask):
            return table[input_ids[:, 0]]

    positives = [rng.choice(40, size=rng.integers(1, 4), replace=False) for _ in range(12)]
    split = {"query_input_ids": np.arange(12, dtype=np.int32)[:, None],
             "query_attention_mask": np.ones((12, 1), np.int8),
             "doc_input_ids": (12 + np.arange(40, dtype=np.int32))[:, None],
             "doc_attention_mask": np.ones((40, 1), np.int8),
             "positive_offsets": np.cumsum([0] + [len(p) for p in positives]).astype(np.int64),
             "positive_docs": np.concatenate(positives).astype(np.int64)}
    halves = {"validation": split, "test": split}
    evaluations = {name: Retrieval.evaluate(Lookup(), part, {}, 8, torch.device("cpu"), None)
                   for name, part in halves.items()}
    assert evaluations["test"].scores["paper"] != evaluations["test"].scores["standard"]  # several positives
    study = StudyLayout(str(tmp_path / "studies" / "paper"))
    rows = [{**p, "task": "wordnet-usage-retrieval"} for p in prediction_rows("k1", evaluations)]
    write_rows(study, PREDICTIONS, rows)
    write_rows(study, PREDICTIONS, rows)  # the retried trial's
    write_rows(study, TRIALS, [{"trial_key": "k1", "status": "ok", "task": "wordnet-usage-retrieval",
                                "task_family": "retrieval", "metric": Retrieval.METRICS["paper"],
                                **scored(evaluations, "paper")}])
    assert len(read_predictions(study)) == len(rows) == 24
    monkeypatch.chdir(tmp_path)
    exec(results_snippet(), {})


def test_the_results_page_reads_the_rows_the_report_used(tmp_path, monkeypatch):
    """docs/results.md's `sweeper.results` snippet, run as written against a study whose one cell
    was recomputed (its old row superseded) beside a cell it kept: the rows are the report's, the
    pandas-alone lines find the same current rows, and the snippet's assertion would catch a
    superseded row read as current."""
    import json
    from datetime import datetime

    from sweeper.plan.changes import cell_id, trial_cell
    from report_text import build_report
    from sweeper.store.layout import StudyLayout
    from sweeper.store.results import TRIALS, write_rows

    def row(key: str, seed: int) -> dict:
        return {"study": "micro", "trial_key": key, "run_name": "m", "run_key": "r", "checkpoint_id": "m",
                "objective": "mlm", "mask_ratio": 0.3, "checkpoint_step": 10, "total_steps": 10, "task": "sc1",
                "task_category": "SC", "search_mode": "grid", "learning_rate": 1e-4, "seed": seed, "params": "{}",
                "status": "ok", "validation_score": 50.0 + seed, "test_score": 50.0 + seed,
                "finished_at": datetime.now(UTC)}

    study = StudyLayout(str(tmp_path / "studies" / "micro"))
    write_rows(study, TRIALS, [row("old-0", 0), row("new-0", 0), row("new-1", 1)])
    cells = [cell_id(trial_cell("m", "sc1", 1e-4, "{}", seed)) for seed in (0, 1)]
    Path(study.plan).write_text(json.dumps({"trial_keys": ["new-0", "new-1"], "trial_cells": cells}))
    Path(study.spec).write_text("study: micro\n")
    assert "2 result rows recorded" in build_report(study)[0]
    monkeypatch.chdir(tmp_path)
    scope = {}
    exec(results_snippet("sweeper.results("), scope)
    assert sorted(scope["rows"]["trial_key"]) == ["new-0", "new-1"]
    assert dict(scope["every"].set_index("trial_key")["standing"]) == {
        "old-0": "superseded", "new-0": "current", "new-1": "current"}
