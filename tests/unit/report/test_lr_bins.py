"""A search's sampled learning rates in log-spaced bins, not a column each (sweeper.report.lr_bins)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from sweeper.report import analysis, figures
from sweeper.report.lr_bins import BINS, binned, lr_section, rate_text
from datetime import UTC


def sampled(rates) -> pd.DataFrame:
    rows = []
    for checkpoint in ("a", "b"):
        for rate in rates:
            for seed in (0, 1):
                rows.append({"checkpoint_id": checkpoint, "run_name": checkpoint, "objective": "mlm",
                             "task_category": "SC", "task": "t", "learning_rate": rate, "seed": seed,
                             "status": "ok", "validation_score": 50 + 10 * np.log10(rate) + seed,
                             "checkpoint_step": 10, "total_steps": 10, "source": "study"})
    return pd.DataFrame(rows)


def test_sixteen_sampled_rates_make_five_labelled_bins():
    rates = np.geomspace(1e-5, 1e-3, 16) * np.random.default_rng(0).uniform(0.9, 1.1, 16)
    table, labels = binned(sampled(rates))
    assert table["learning_rate"].nunique() == BINS
    text = "\n".join(lr_section(analysis.lr_sensitivity(table), labels))
    header = next(line for line in text.splitlines() if line.startswith("| checkpoint"))
    assert header.count("LR ") == BINS and "–" in header  # 'LR 9.5e-6–2.4e-5', never 'LR 0.000318455'
    assert "log-spaced bins" in text
    # every sample lands in the bin whose edges hold it
    for rate, centre in zip(sampled(rates)["learning_rate"], table["learning_rate"]):
        low, high = (float(x) for x in labels[centre].removeprefix("LR ").split("–"))
        assert low * 0.95 <= rate <= high * 1.05


def test_a_grid_keeps_its_rates():
    table, labels = binned(sampled([1e-5, 3e-5, 1e-4]))
    assert sorted(table["learning_rate"].unique()) == [1e-5, 3e-5, 1e-4]
    assert labels[3e-5] == "LR 3e-05"


def test_rate_text_is_short():
    assert rate_text(3e-4) == "3e-4" and rate_text(1.5e-5) == "1.5e-5"


def test_the_figure_labels_few_ticks_that_do_not_overlap():
    rates = np.geomspace(1e-5, 1e-3, 16)
    table, _ = binned(sampled(rates))
    fig = figures.lr_sensitivity(table, {"a": "MLM", "b": "MLM"})
    fig.canvas.draw()
    ax = fig.axes[0]
    low, high = ax.get_xlim()
    shown = [t for t in ax.get_xticklabels() if t.get_text() and low <= t.get_position()[0] <= high]
    assert 2 <= len(shown) <= 8
    assert not [t for t in ax.xaxis.get_minorticklabels() if t.get_text()]
    boxes = [t.get_window_extent() for t in shown]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_an_optuna_studys_report_has_binned_lr_columns(tmp_path):
    from datetime import datetime

    from report_text import build_report
    from sweeper.store.layout import StudyLayout
    from sweeper.store.results import TRIALS, write_rows

    rng = np.random.default_rng(1)
    rows = []
    for checkpoint in ("nano-mlm30-40", "nano-mlm40-40"):
        for sample, rate in enumerate(np.exp(rng.uniform(np.log(1e-5), np.log(1e-3), 8))):
            for seed in (0, 1):
                score = 50 + 5 * np.log10(rate) + rng.normal(0, 1)
                rows.append({"study": "optuna", "trial_key": f"{checkpoint}/{sample}/{seed}", "run_name": checkpoint,
                             "run_key": checkpoint, "checkpoint_id": checkpoint, "objective": "mlm",
                             "clm_fraction": 0.0, "mask_ratio": 0.3 if "30" in checkpoint else 0.4,
                             "checkpoint_step": 40, "total_steps": 40, "source": "study",
                             "task": "wordnet-supersense-cls", "task_family": "sequence_classification",
                             "task_category": "SC", "metric": "accuracy", "search_mode": "optuna",
                             "learning_rate": float(rate), "seed": seed, "sample": sample, "params": "{}",
                             "status": "ok", "validation_score": score, "test_score": score,
                             "finished_at": datetime.now(UTC)})
    layout = StudyLayout(str(tmp_path / "optuna"))
    write_rows(layout, TRIALS, rows)
    text, _ = build_report(layout)
    section = text.split("## Learning-rate sensitivity")[1].split("\n## ")[0]
    header = next(line for line in section.splitlines() if line.startswith("| checkpoint"))
    assert header.count("| LR ") == BINS  # 16 sampled rates, 5 columns (the issue saw one column per rate)
    assert not any(f"LR {r['learning_rate']:g} |" in header for r in rows)
