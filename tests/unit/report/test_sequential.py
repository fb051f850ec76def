"""The looks of a sequential plan replayed from the store (sweeper.report.sequential: what the
driver does after every stage, and after a restart): rows of a look not yet complete (a driver
killed while it trained them) change no look computed before and start no new one; once they are
all recorded, the next look is computed and the earlier ones are the same. So a killed driver
neither loses nor repeats a look. No Ray: the rows are written with the store's own writer."""
from __future__ import annotations

from datetime import datetime, UTC

from sweeper.report.sequential import recorded_replicates, study_looks
from sweeper.spec.sequential import SequentialSpec
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, read_trials, write_rows

DESIGN = SequentialSpec(first=3, step=1, maximum=4, every_count=True)
ARMS = {"nano-mlm40-12": ("mlm", 0.4, 0.0), "nano-clm-12": ("clm", None, 1.0)}
RUN_SCORES = {"nano-mlm40-12": [50.1, 49.8, 50.3, 49.9], "nano-clm-12": [50.0, 50.2, 49.7, 50.1]}
"""Equal arms: no boundary is reached at the first look, so it asks for a fourth replicate."""


def trial_rows(arm: str, replicate: int, seeds=(0, 1)) -> list[dict]:
    """The trial rows of one replicate of one arm, as a study records them (one SC task)."""
    objective, ratio, clm_fraction = ARMS[arm]
    name = arm if replicate == 0 else f"{arm}-rep{replicate}"
    score = RUN_SCORES[arm][replicate]
    return [{"study": "resume", "trial_key": f"{name}/{seed}", "run_name": name, "run_key": f"key-{name}",
             "checkpoint_id": name, "replicate": replicate, "arm": arm, "objective": objective,
             "clm_fraction": clm_fraction, "mask_ratio": ratio, "checkpoint_step": 12, "total_steps": 12,
             "steps_before": 0, "tokens_seen": 3072, "source": "study", "parameters": 188736,
             "task": "planted-sc", "task_family": "planted_score", "task_category": "SC", "metric": "pearson",
             "search_mode": "grid", "learning_rate": 0.001, "seed": seed, "status": "ok",
             "validation_score": score + 0.05 * seed, "test_score": score - 0.05 * seed,
             "finished_at": datetime.now(UTC)} for seed in seeds]


def looks_of(layout: StudyLayout):
    trials = read_trials(layout).to_pandas()
    return recorded_replicates(trials), study_looks(trials, DESIGN)


def test_rows_of_an_unfinished_look_neither_change_nor_repeat_the_looks_before_it(tmp_path):
    layout = StudyLayout(str(tmp_path))
    write_rows(layout, TRIALS, [row for arm in ARMS for r in range(3) for row in trial_rows(arm, r)])
    recorded, first = looks_of(layout)
    assert recorded == {arm: 3 for arm in ARMS}
    assert first.counts == [{arm: 3 for arm in ARMS}] and first.pending == {arm: 4 for arm in ARMS}
    assert [row.decision for row in first.rows] == ["continue"], first.rows

    # A killed driver: the MLM arm's fourth replicate has one of its two trials, the CLM arm's none.
    write_rows(layout, TRIALS, trial_rows("nano-mlm40-12", 3, seeds=(0,)))
    recorded, partial = looks_of(layout)
    assert recorded == {arm: 3 for arm in ARMS}, "a replicate counts once every trial of it is recorded"
    assert (partial.counts, partial.pending, partial.rows) == (first.counts, first.pending, first.rows)
    # Its other trial, still without the CLM arm's: the look is pending still, and the same.
    write_rows(layout, TRIALS, trial_rows("nano-mlm40-12", 3, seeds=(1,)))
    recorded, partial = looks_of(layout)
    assert recorded == {"nano-mlm40-12": 4, "nano-clm-12": 3}
    assert (partial.counts, partial.pending, partial.rows) == (first.counts, first.pending, first.rows)

    # The rerun records the rest: the second look is computed once, on top of the same first.
    write_rows(layout, TRIALS, trial_rows("nano-clm-12", 3))
    _, done = looks_of(layout)
    assert done.finished and done.counts == [{arm: 3 for arm in ARMS}, {arm: 4 for arm in ARMS}]
    assert done.rows[:1] == first.rows and [row.look for row in done.rows] == [0, 1]
    assert [row.units for row in done.rows] == [3, 4] and done.rows[1].decision == "cannot tell"
    assert done.runs_trained() == done.runs_fixed() == 8
    assert "look 2 of 2" in done.verdicts[0].parts[0].test and done.verdicts[0].parts[0].verdict == "cannot tell"
