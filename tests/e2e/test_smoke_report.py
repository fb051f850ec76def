"""The smoke study's report checked against its Parquet rows: split from
tests/unit/report/test_statistics.py."""
from __future__ import annotations


import pytest

from sweeper.report.writer import build_report
from sweeper.store.layout import StudyLayout


@pytest.mark.e2e
def test_smoke_report_figures_and_values_match_the_parquet_rows(smoke_study):
    import pyarrow.dataset as ds
    from matplotlib.image import imread

    study_dir, _ = smoke_study
    text, made = build_report(StudyLayout(str(study_dir)))
    expected = {"category_scores.png", "stability.png", "data_efficiency.png", "biphasic.png"}
    assert {p.name for p in made} == expected  # one LR: no LR-sensitivity plot; no CPT runs
    for path in made:
        image = imread(path)
        assert path.stat().st_size > 10_000 and image.shape[0] > 200 and image.std() > 0.01, path
        assert f"(figures/{path.name})" in text
    assert "learning-rate sensitivity: fewer than two learning rates" in text
    # Recompute the per-task table from the raw Parquet rows with pandas alone.
    rows = ds.dataset(study_dir / "results" / "trials", format="parquet", partitioning="hive").to_table().to_pandas()
    rows = rows[rows["status"] == "ok"]
    for (checkpoint, task), cell in rows.groupby(["checkpoint_id", "task"]):
        by_lr = cell.groupby("learning_rate").agg(val=("validation_score", "mean"), test=("test_score", "mean"))
        best_lr = by_lr["val"].idxmax()
        line = next(l for l in text.splitlines() if l.startswith(f"| {checkpoint} |") and f"{best_lr:.1e}" in l
                    and task in text.split(l)[0].rsplit("### ", 1)[1])
        assert f"| {by_lr.loc[best_lr, 'test']:.2f} |" in line, line
