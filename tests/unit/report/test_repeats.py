"""A point an Optuna search evaluated twice in one cell is flagged: one line naming the cell,
the point and the samples; other cells, grid rows and random draws are not."""
from __future__ import annotations

import pandas as pd

from sweeper.report.repeats import repeated_lines, repeated_points


def rows(mode: str, draws: list[tuple[int, float, str]], checkpoint: str = "m-mlm40-100") -> list[dict]:
    """Two seeds per sample: (sample, learning rate, params JSON) per draw."""
    return [{"checkpoint_id": checkpoint, "task": "sc1", "search_mode": mode, "learning_rate": lr, "params": params,
             "sample": sample if mode != "grid" else None, "seed": seed}
            for sample, lr, params in draws for seed in (0, 1)]


def test_a_repeated_point_is_named_once_with_its_samples():
    draws = [(0, 0.001062, '{"weight_decay": 0.0}'), (1, 0.001062, '{"weight_decay": 0.0}'),
             (2, 0.001062, '{"weight_decay": 0.1}'), (3, 0.0003, '{"weight_decay": 0.0}')]
    trials = pd.DataFrame(rows("optuna", draws) + rows("optuna", [(0, 0.0003, "{}"), (1, 0.0004, "{}")], "other"))
    repeats = repeated_points(trials)
    assert len(repeats) == 1 and repeats.iloc[0]["samples"] == [0, 1]
    (line, blank) = repeated_lines(trials)
    assert line.startswith("Repeated point: the Optuna search of m-mlm40-100 / sc1 evaluated learning rate 0.001062 "
                           'with {"weight_decay": 0.0} in samples 0, 1;'), line
    assert blank == ""


def test_grid_rows_random_draws_and_distinct_points_are_not_flagged():
    same = [(0, 0.001, "{}"), (1, 0.001, "{}")]
    assert repeated_lines(pd.DataFrame(rows("grid", same))) == []
    assert repeated_lines(pd.DataFrame(rows("random", same))) == []  # a random choice may repeat by design
    assert repeated_lines(pd.DataFrame(rows("optuna", [(0, 0.001, "{}"), (1, 0.002, "{}")]))) == []
    assert repeated_lines(pd.DataFrame()) == []


def test_the_report_flags_it(tmp_path):
    from report_text import build_report
    from sweeper.store.layout import StudyLayout
    from sweeper.store.results import TRIALS, write_rows

    from test_study_history import row

    layout = StudyLayout(str(tmp_path))
    write_rows(layout, TRIALS, [{**row("sc1", 0.001062, seed, f"s{sample}"), "search_mode": "optuna", "sample": sample}
                                for sample in (0, 1) for seed in (0, 1)])
    text, _ = build_report(layout)
    assert "Repeated point: the Optuna search of m-mlm40-100 / sc1 evaluated learning rate 0.001062 in samples 0, 1" \
        in text, text[:2000]
