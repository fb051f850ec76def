"""Report: checkpoints from elsewhere (`finetuning.checkpoints`) beside the study's own runs.

Synthetic trial rows in the store, as `sweeper.run.recording.checkpoint_columns` writes them: two
runs of the study, and three checkpoints from elsewhere (meta with objective, parameters and tokens
seen; objective only; none, and padded). Every checkpoint is in every table; the findings read
only those whose objective, size and budget are known, and the report names the others and why.
"""
from __future__ import annotations

from datetime import datetime, UTC

import numpy as np
import pandas as pd
import pytest

from sweeper.report import provenance
from sweeper.report.findings import check_findings
from sweeper.report.importance import sample_scores
from sweeper.report.statistics import CANNOT_TELL
from report_text import build_report
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, read_trials, write_rows

LRS = (1e-5, 3e-5)
SEEDS = range(5)
TASKS = {"sc1": "SC", "tc1": "TC", "qa1": "QA"}
PARAMETERS, TOKENS = 1_004_000, 100 * 2048  # the own runs' size and budget; "1M" and "200k" to two figures


def own(name: str, objective: str, mask_ratio: float | None, clm_fraction: float, **columns) -> dict:
    return {"checkpoint_id": name, "objective": objective, "mask_ratio": mask_ratio, "clm_fraction": clm_fraction,
            "checkpoint_step": 100, "total_steps": 100, "init_from": None, "steps_before": 0, "tokens_seen": TOKENS,
            "source": "study", "parameters": PARAMETERS, "packing": "packed", **columns}


def external(name: str, source: str, objective: str | None = None, parameters: int | None = None,
             tokens_seen: int | None = None, mask_ratio: float | None = None, packing: str = "packed") -> dict:
    return {"checkpoint_id": name, "objective": objective, "mask_ratio": mask_ratio, "clm_fraction": None,
            "checkpoint_step": 0, "total_steps": None, "init_from": None, "steps_before": None,
            "tokens_seen": tokens_seen, "source": source, "parameters": parameters, "packing": packing}


OWN_RUNS = [own("m-mlm40-100", "mlm", 0.4, 0.0), own("m-clm-100", "clm", None, 1.0)]
FULL = external("authors-clm", "hf:authors/clm-100", "clm", PARAMETERS + 1_000, TOKENS)  # the own runs' figures
OBJECTIVE_ONLY = external("qwen-tiny", "/models/qwen-tiny", "clm", parameters=5_000_000)  # sized by config.json
NO_META = external("ModernBERT-base", "hf:answerdotai/ModernBERT-base", parameters=149_000_000, packing="padded")
EXTERNALS = [FULL, OBJECTIVE_ONLY, NO_META]
NAMES = [c["checkpoint_id"] for c in OWN_RUNS + EXTERNALS]


def rows_of(checkpoints: list[dict], means: dict[str, float] | None = None, seed: int = 0) -> list[dict]:
    """Trial rows for every checkpoint x task x learning rate x seed: score = the checkpoint's mean
    (60 unless `means` says) + seed noise, 3 points lower away from 3e-5."""
    rng = np.random.default_rng(seed)
    rows = []
    for checkpoint in checkpoints:
        name = checkpoint["checkpoint_id"]
        for task, category in TASKS.items():
            for lr in LRS:
                for s in SEEDS:
                    score = (means or {}).get(name, 60.0) - (0 if lr == 3e-5 else 3) + rng.normal(0, 1)
                    rows.append({**checkpoint, "study": "mixed", "trial_key": f"{name}/{task}/{lr}/{s}",
                                 "run_name": name, "run_key": f"key-{name}", "task": task, "task_category": category,
                                 "metric": "accuracy", "search_mode": "grid", "learning_rate": lr, "seed": s,
                                 "status": "ok", "validation_score": score + rng.normal(0, 0.1), "test_score": score,
                                 "finished_at": datetime.now(UTC)})
    return rows


def stored(tmp_path, checkpoints: list[dict], **kwargs) -> StudyLayout:
    layout = StudyLayout(str(tmp_path))
    write_rows(layout, TRIALS, rows_of(checkpoints, **kwargs))
    return layout


def section(text: str, title: str) -> str:
    """The report's section whose heading starts with `title`, up to the next `## ` heading."""
    start = text.index(f"\n## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> StudyLayout:
    return stored(tmp_path_factory.mktemp("mixed"), OWN_RUNS + EXTERNALS)


@pytest.fixture(scope="module")
def mixed_report(mixed) -> str:
    return build_report(mixed)[0]


def test_every_checkpoint_is_in_every_table_whatever_its_meta(mixed_report):
    text = mixed_report
    for title in ("Category averages", "Fine-tuning stability", "Learning-rate sensitivity", "Per task"):
        table = section(text, title)
        missing = [name for name in NAMES if f"| {name} |" not in table]
        assert not missing, (title, missing)
    per_task = section(text, "Per task")
    assert per_task.count("| ModernBERT-base | not stated | - |") == len(TASKS), "no objective, no step: said so"


def test_the_left_out_section_names_each_checkpoint_and_its_reason(mixed_report):
    left = section(mixed_report, "Left out of the findings")
    lines = [line for line in left.splitlines() if line.startswith("- ")]
    assert lines == ["- ModernBERT-base: objective not stated (meta.objective); tokens seen unknown (meta.tokens_seen)",
                     "- qwen-tiny: tokens seen unknown (meta.tokens_seen)"], lines


def test_the_report_names_sources_and_the_padded_checkpoints(mixed_report):
    text = mixed_report
    origins = section(text, "Checkpoints from elsewhere")
    for checkpoint in EXTERNALS:
        assert f"| {checkpoint['checkpoint_id']} | {checkpoint['source']} |" in origins, checkpoint
    assert "| m-clm-100 |" not in origins, "the study's own runs are not from elsewhere"
    padded = section(text, "Dynamic padding")
    assert "ModernBERT-base" in padded and "refused" in padded
    assert not any(name in padded for name in NAMES if name != "ModernBERT-base")


def test_the_findings_read_exactly_the_checkpoints_with_objective_size_and_budget(mixed):
    trials = read_trials(mixed).to_pandas()
    assert set(provenance.findings_trials(trials)["checkpoint_id"]) == {"m-mlm40-100", "m-clm-100", "authors-clm"}
    left = provenance.left_out(trials).set_index("checkpoint_id")["reason"].to_dict()
    assert left == {"ModernBERT-base": "objective not stated (meta.objective); tokens seen unknown (meta.tokens_seen)",
                    "qwen-tiny": "tokens seen unknown (meta.tokens_seen)"}
    # Rows written before `source` existed are the study's own; a size not known is a reason too.
    old = trials[trials["checkpoint_id"] == "m-mlm40-100"].assign(source=None, parameters=None)
    unsized = trials[trials["checkpoint_id"] == "authors-clm"].assign(parameters=None)
    assert provenance.left_out(pd.concat([old, unsized])).set_index("checkpoint_id")["reason"].to_dict() == {
        "authors-clm": "size unknown (meta.parameters, or sizes in its config.json)"}


def test_an_external_checkpoint_joins_the_objective_comparison_of_its_size_and_budget(tmp_path):
    """With the study's own CLM run gone, the checkpoint from elsewhere of the same figures stands
    for CLM against the study's MLM run; it never enters the masking-ratio comparison."""
    mlm20 = external("authors-mlm20", "hf:authors/mlm20", "mlm", PARAMETERS, TOKENS, mask_ratio=0.2)
    layout = stored(tmp_path, [OWN_RUNS[0], FULL, mlm20, NO_META], means={"m-mlm40-100": 70.0})
    first, second = check_findings(read_trials(layout).to_pandas())[:2]
    sc = next(p for p in first.parts if ", SC:" in p.comparison)
    assert sc.comparison.startswith("m @ 100, SC") and "m-mlm40-100" in sc.numbers and "authors-clm" in sc.numbers
    assert not sc.missing and sc.verdict != CANNOT_TELL, first.evidence
    assert second.verdict == CANNOT_TELL and "two or more masking ratios" in " ".join(second.evidence)
    text, _ = build_report(layout)
    assert "| authors-mlm20 | mlm |" in section(text, "Category averages") and "## Masking ratio" not in text
    with_own = check_findings(read_trials(stored(tmp_path / "own", OWN_RUNS + [FULL])).to_pandas())[0]
    assert all("authors-clm" not in p.numbers for p in with_own.parts), "the study's own CLM run stands first"


@pytest.mark.long  # a whole report: ~6 s
def test_a_study_of_checkpoints_from_elsewhere_only_is_reported(tmp_path):
    big = {"parameters": 149_000_000, "tokens_seen": 2 * 10**12}
    mlm = external("authors-mlm", "hf:authors/mlm", "mlm", **big, mask_ratio=0.3)
    clm = external("authors-clm-big", "hf:authors/clm", "clm", **big)
    layout = stored(tmp_path, [mlm, clm, NO_META], means={"authors-mlm": 70.0})
    text, _ = build_report(layout)
    for name in ("authors-mlm", "authors-clm-big", "ModernBERT-base"):
        assert f"| {name} |" in section(text, "Category averages"), name
    first = check_findings(read_trials(layout).to_pandas())[0]
    parts = [p for p in first.parts if p.comparison.startswith("150M-param @ 2T tokens, ")]
    assert len(parts) == 3 and all(not p.missing for p in parts), first.evidence
    alone = build_report(stored(tmp_path / "alone", [NO_META]))[0]
    assert "| ModernBERT-base | not stated |" in section(alone, "Category averages")
    assert "- ModernBERT-base: objective not stated" in section(alone, "Left out of the findings")


def test_importances_keep_checkpoints_without_an_objective():
    rows = pd.DataFrame(rows_of([NO_META, OWN_RUNS[0]])).assign(sample=lambda f: f["seed"] % 2, params="{}")
    assert set(sample_scores(rows)["checkpoint_id"]) == {"ModernBERT-base", "m-mlm40-100"}
