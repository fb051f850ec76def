"""Report: selection, intervals, stability and findings on synthetic results with known effects,
and the real report (markdown + figures) of the smoke study checked against the Parquet rows."""
from __future__ import annotations

import math
from datetime import datetime, UTC
from pathlib import Path

import numpy as np
import pytest

from sweeper.report import analysis
from sweeper.report.findings import check_findings
from sweeper.report.statistics import CANNOT_TELL, SUPPORTS
from report_text import build_report
from sweeper.spec.study import PAPER_STABILITY_RANGE
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, read_trials, write_rows

LRS = (1e-5, 3e-5, 1e-4)
T_975_4 = 2.7764451051977987  # t(0.975, 4 dof), the 95 % two-sided quantile for 5 seeds
SEEDS = range(5)
TASKS = {"sc1": "SC", "sc2": "SC", "tc1": "TC", "qa1": "QA"}


def synthetic_trials(means: dict, noise: dict, seed: int = 0) -> list[dict]:
    """Test score = category mean - LR penalty (best at 3e-5) + seed noise; validation tracks it."""
    rng = np.random.default_rng(seed)
    rows = []
    for (checkpoint, objective, clm_fraction, ratio), by_category in means.items():
        for task, category in TASKS.items():
            for lr in LRS:
                penalty = 0.0 if lr == 3e-5 else 4.0
                for s in SEEDS:
                    score = by_category[category] - penalty + rng.normal(0, noise[objective])
                    rows.append({
                        "study": "synthetic", "trial_key": f"{checkpoint}/{task}/{lr}/{s}", "run_name": checkpoint,
                        "run_key": checkpoint, "checkpoint_id": checkpoint, "objective": objective,
                        "clm_fraction": clm_fraction, "mask_ratio": ratio, "checkpoint_step": 100, "total_steps": 100,
                        "tokens_seen": 100 * 2048, "task": task, "task_category": category, "metric": "accuracy",
                        "search_mode": "grid", "learning_rate": lr, "seed": s, "status": "ok",
                        "validation_score": score + rng.normal(0, 0.1), "test_score": score,
                        "finished_at": datetime.now(UTC),
                    })
    return rows


# CLM's TC win is large enough for 5 seeds at CLM's seed noise (SD 3) to show that CLM ties or
# wins there (non-inferiority within 1 point); a 3-point win at that noise cannot be told apart.
CLEAR = {("m-mlm40-100", "mlm", 0.0, 0.4): {"SC": 80, "QA": 60, "TC": 85},
         ("m-clm-100", "clm", 1.0, None): {"SC": 70, "QA": 45, "TC": 92}}


@pytest.fixture
def clear_study(tmp_path) -> StudyLayout:
    study = StudyLayout(str(tmp_path))
    write_rows(study, TRIALS, synthetic_trials(CLEAR, noise={"mlm": 1.0, "clm": 3.0}))
    return study


@pytest.fixture(scope="module")
def partial_report(tmp_path_factory) -> tuple[str, list[Path]]:
    """The clear study's report (text, figures) with 30 more trials planned than recorded and no
    spec copy, built once for the two tests that read it (a report draws every figure)."""
    import json

    study = StudyLayout(str(tmp_path_factory.mktemp("partial")))
    write_rows(study, TRIALS, synthetic_trials(CLEAR, noise={"mlm": 1.0, "clm": 3.0}))
    keys = read_trials(study).to_pandas()["trial_key"].tolist()
    Path(study.plan).write_text(json.dumps({"trials": len(keys) + 30, "trial_keys": keys + [
        f"missing-{i}" for i in range(30)]}))
    return build_report(study)


def test_selection_and_confidence_intervals(clear_study):
    trials = read_trials(clear_study).to_pandas()
    best = analysis.best_lr_table(trials)
    assert len(best) == 2 * 4 and (best["learning_rate"] == 3e-5).all(), "the planted best LR is selected"
    row = best[(best["checkpoint_id"] == "m-clm-100") & (best["task"] == "sc1")].iloc[0]
    scores = trials[(trials["checkpoint_id"] == "m-clm-100") & (trials["task"] == "sc1")
                    & (trials["learning_rate"] == 3e-5)]["test_score"]
    # The same float64 statistics as the report computes: approx's default (here below, too).
    assert row["test_mean"] == pytest.approx(scores.mean())
    assert row["test_ci95"] == pytest.approx(T_975_4 * scores.std(ddof=1) / math.sqrt(5))
    categories = analysis.category_scores(trials, best)
    sc = categories[(categories["checkpoint_id"] == "m-mlm40-100") & (categories["task_category"] == "SC")].iloc[0]
    per_seed = trials[(trials["checkpoint_id"] == "m-mlm40-100") & trials["task"].isin(["sc1", "sc2"])
                      & (trials["learning_rate"] == 3e-5)].groupby("seed")["test_score"].mean()
    assert sc["mean"] == pytest.approx(per_seed.mean())
    assert sc["ci95"] == pytest.approx(T_975_4 * per_seed.std(ddof=1) / math.sqrt(5))


def test_a_point_drawn_twice_counts_its_seeds_not_its_rows():
    """A search that drew one point twice (two samples, each run on the same seeds) has two rows
    per seed there: the interval is over the seeds' means (n = 5 seeds), not over the 10 rows."""
    import pandas as pd

    rows = synthetic_trials(CLEAR, noise={"mlm": 1.0, "clm": 3.0})
    cell = [r for r in rows if r["checkpoint_id"] == "m-clm-100" and r["task"] == "sc1" and r["learning_rate"] == 3e-5]
    again = [{**r, "trial_key": r["trial_key"] + "/sample1", "test_score": r["test_score"] + 2.0 * (r["seed"] % 2)}
             for r in cell]
    trials = pd.DataFrame(rows + again)
    row = analysis.best_lr_table(trials).query("checkpoint_id == 'm-clm-100' and task == 'sc1'").iloc[0]
    per_seed = pd.DataFrame(cell + again).groupby("seed")["test_score"].mean()
    assert row["seeds"] == 5
    assert row["test_mean"] == pytest.approx(per_seed.mean())
    assert row["test_ci95"] == pytest.approx(T_975_4 * per_seed.std(ddof=1) / math.sqrt(5))


def test_stability_spread_tracks_seed_variance(clear_study):
    trials = read_trials(clear_study).to_pandas()
    table, used = analysis.stability(trials, PAPER_STABILITY_RANGE)
    assert used == "1e-05..0.0001"
    spread = table.groupby("objective")["spread"].mean()
    # Same LR effect for both; CLM has 3x the seed noise, so its spread is clearly larger.
    assert spread["clm"] > spread["mlm"] * 1.4


def test_the_stability_range_is_the_specs_and_the_report_names_it(clear_study, partial_report):
    """Without a spec copy (or `report.stability_lr_range` unset) the spread pools every rate and
    says so; the spec's range reaches the report's stability table and leaves other rates out."""
    trials = read_trials(clear_study).to_pandas()
    assert analysis.stability(trials, None)[1] == "all (1e-05..0.0001; report.stability_lr_range not set)"
    assert (
        analysis.stability(trials, (2e-4, 5e-4))[1]
        == "all (1e-05..0.0001; none in report.stability_lr_range 0.0002..0.0005)"
    )
    # No spec copy (the planned rows missing there bear on no stability range).
    assert "learning rates all (1e-05..0.0001; report.stability_lr_range not set)" in partial_report[0]
    spec = (Path(__file__).parents[3] / "search_spaces" / "micro.yaml").read_text()
    Path(clear_study.spec).write_text(spec + "report:\n  stability_lr_range: [2.0e-5, 5.0e-5]\n")
    text, _ = build_report(clear_study)
    assert "learning rates 2e-05..5e-05, pooled per category" in text
    every, one_rate = analysis.stability(trials, None)[0], analysis.stability(trials, (2e-5, 5e-5))[0]
    assert (one_rate["runs"] * 3 == every["runs"]).all(), "one rate (3e-5) of the three"


def test_findings_verdicts_with_their_evidence(clear_study, tmp_path_factory):
    trials = read_trials(clear_study).to_pandas()
    verdicts = check_findings(trials)
    first = verdicts[0]
    assert first.verdict == SUPPORTS, first.evidence
    assert any("SC: m-mlm40-100" in line for line in first.evidence) and all(v.evidence for v in verdicts)
    assert verdicts[2].verdict != SUPPORTS, "CLM is less stable here, and no early checkpoints exist"
    assert verdicts[4].verdict == CANNOT_TELL and "needs continued-pretraining" in verdicts[4].evidence[0]

    close = {("m-mlm40-100", "mlm", 0.0, 0.4): {"SC": 80, "QA": 60, "TC": 85},
             ("m-clm-100", "clm", 1.0, None): {"SC": 79.5, "QA": 59.5, "TC": 85}}
    overlapping = StudyLayout(str(tmp_path_factory.mktemp("close")))
    write_rows(overlapping, TRIALS, synthetic_trials(close, noise={"mlm": 3.0, "clm": 3.0}, seed=1))
    trials = read_trials(overlapping).to_pandas()
    verdict = check_findings(trials)[0]
    assert verdict.verdict == CANNOT_TELL and "cannot tell" in " ".join(verdict.evidence)


def test_stability_finding_needs_a_spread_and_runs_from_scratch(clear_study):
    """One seed at one learning rate has no spread, and a continued run is no MLM-from-scratch
    run: neither may decide finding 3."""
    trials = read_trials(clear_study).to_pandas()
    one_cell = trials[(trials["seed"] == 0) & (trials["learning_rate"] == 3e-5)]
    verdict = check_findings(one_cell)[2]
    assert verdict.verdict == CANNOT_TELL, verdict.evidence
    continued = trials.assign(init_from=trials["objective"].map({"mlm": "m-clm-100", "clm": None}))
    verdict = check_findings(continued)[2]
    assert verdict.verdict == CANNOT_TELL and "needs final CLM and MLM" in " ".join(verdict.evidence)


def test_report_works_on_partial_results_and_says_what_is_missing(partial_report):
    text, figures = partial_report
    assert "30 of 150 planned result rows are missing" in text
    assert "| m-mlm40-100 | mlm |" in text and len(figures) >= 3


def test_a_damaged_plan_reads_as_absent_and_is_named(clear_study):
    Path(clear_study.plan).write_text('{"trials": 150, "trial_ke')  # cut short
    text, _ = build_report(clear_study)
    assert "- `plan.json`: not JSON" in text and "| m-mlm40-100 | mlm |" in text
    assert "planned result rows are missing" not in text, "no plan: nothing is said missing"


def test_a_one_rate_report_explains_its_verdicts_and_clips_no_interval(tmp_path):
    """One learning rate: no learning-rate sensitivity figure (and why), the stability part says it
    cannot measure sensitivity instead of printing a number, the verdict rule is stated, and no
    interval printed anywhere ends at 0 or at 100 (nothing clipped at a bound)."""
    import re
    study = StudyLayout(str(tmp_path))
    rows = [r for r in synthetic_trials(CLEAR, noise={"mlm": 1.0, "clm": 3.0}) if r["learning_rate"] == 3e-5]
    write_rows(study, TRIALS, rows)
    text, made = build_report(study)
    assert "How a verdict follows from its parts" in text and "About checkpoints, not objectives" in text
    assert "one learning rate: learning-rate sensitivity cannot be measured" in text
    assert not any(path.name == "lr_sensitivity.png" for path in made)
    assert re.search(r"learning-rate sensitivity.*(fewer than two|two or more) learning rates", text, re.I | re.S)
    intervals = re.findall(r"\[(-?[\d.]+), (-?[\d.]+)\]", text)
    assert intervals and not any(float(low) == 0.0 or float(high) == 100.0 for low, high in intervals)
    assert "detectable (80 %)" in text
