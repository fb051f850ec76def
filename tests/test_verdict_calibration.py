"""The verdicts' error rates, measured by simulation (docs/statistics.md quotes these numbers).

Synthetic studies in the store's trial-row schema, shaped like the paper's 610m grid: MLM at 30 and
40 %, CLM, CLM -> MLM at 25 and 50 % CLM, intermediate checkpoints of CLM and MLM-40, continued MLM
from the CLM and the MLM-40 checkpoints; 4 categories with 1-3 tasks each, 3-6 learning rates,
5 seeds. A trial's test score is

    task base + planted effect (checkpoint, category) - LR curve (checkpoint, lr)
    + seed effect (task, seed; shared by every checkpoint and LR: the pairing) + model noise
    (+ a small evaluation noise, drawn apart for validation and test),

so the learning rate is selected on validation scores that share the model noise with the test
scores, as in a real study. Noise SD SIGMA = 1 point.

- No effect: every finding says "supports" or "contradicts" at most MAX_FALSE of NULL_STUDIES times.
- Effects of EFFECT = 3 SIGMA (finding 2: RATIO_EFFECT = 4 SIGMA) planted in the paper's direction:
  every finding says "supports" in at least MIN_POWER of the studies; planted against it, "contradicts" (finding 2's claim is
  symmetric in its effects: it still holds, and must still be supported).
"""
from __future__ import annotations

import functools
import gc
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from sweeper.report import analysis
from sweeper.report.findings import check_findings, judge
from sweeper.report.statistics import CONTRADICTS, SUPPORTS, SeedScores, Spreads

SIGMA = 1.0          # model noise SD, points
SEED_SD = 1.5        # per-(task, seed) effect shared by every checkpoint and learning rate
EVAL_SD = 0.3        # validation/test evaluation noise, independent per split
EFFECT = 3 * SIGMA   # planted effect size
# Finding 2's claim rests on crossing effects, each shown by one of C(R-1) = 4 tests (Bonferroni):
# at 3 SIGMA it is found about 75 % of the time, so its planted effect is 4 SIGMA.
RATIO_EFFECT = 4 * SIGMA
LRS = (1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4)
BEST_LR = 5e-5       # every checkpoint's optimum: always in the grid (3-6 rates from the smallest)
SEEDS = 5
CATEGORIES = ("SC", "TC", "QA", "IR")

NULL_STUDIES = 200
EFFECT_STUDIES = 40
ALPHA = 0.05
# The largest count of false verdicts out of NULL_STUDIES whose exact binomial upper tail under a
# true 5 % rate is above 5 %: P(X >= 16 | n=200, p=0.05) = 0.044, so 15 (7.5 %) passes, 16 fails.
MAX_FALSE = int(stats.binom.isf(ALPHA, NULL_STUDIES, ALPHA))
MIN_POWER = 0.80


@dataclass(frozen=True)
class Run:
    name: str
    objective: str
    mask_ratio: float
    clm_fraction: float
    total_steps: int
    init_from: str | None = None
    steps_before: int = 0
    checkpoint_steps: tuple[int, ...] = ()


RUNS = (
    Run("610m-mlm40-42k", "mlm", 0.4, 0.0, 42000, checkpoint_steps=(10000,)),
    Run("610m-mlm30-42k", "mlm", 0.3, 0.0, 42000),
    Run("610m-clm-42k", "clm", math.nan, 1.0, 42000, checkpoint_steps=(10000,)),
    Run("610m-clm-10k-mlm40-42k", "clm-mlm", 0.4, 0.25, 42000),
    Run("610m-clm-21k-mlm40-42k", "clm-mlm", 0.4, 0.5, 42000),
    Run("610m-clm-dec42k-mlm40-44k", "mlm", 0.4, 0.0, 2000, "610m-clm-42k", 42000),
    Run("610m-mlm40-dec42k-mlm40-44k", "mlm", 0.4, 0.0, 2000, "610m-mlm40-42k", 42000),
)
# (checkpoint_id, run, step): the final checkpoint is the run's name, an intermediate one the
# authors' `610m-mlm40-42k-10000`.
CHECKPOINTS = [(f"{r.name}-{s}" if s != r.total_steps else r.name, r, s)
               for r in RUNS for s in (*r.checkpoint_steps, r.total_steps)]


def planted_effects(sign: float) -> tuple[dict, dict]:
    """Per checkpoint, the category effects and the LR-curve depth that make each finding's claim
    true (sign +1) or its opposite true (sign -1). Unlisted: 0, and a depth of 2 points."""
    e, r = sign * EFFECT, sign * RATIO_EFFECT
    effects = {
        # 1: MLM above CLM on SC and QA; CLM above MLM on TC.
        "610m-mlm40-42k": {"SC": e, "QA": e},
        "610m-clm-42k": {"TC": e},
        # 2: 30 % minus 40 % is +r on SC and TC, -r on QA and IR: each ratio is beaten somewhere,
        # and their category means are equal.
        "610m-mlm30-42k": {"SC": e + r, "TC": r, "QA": e - r, "IR": -r},
        # 3: CLM above MLM early.
        "610m-clm-42k-10000": dict.fromkeys(CATEGORIES, e),
        # 4: both splits above MLM-40 in every category.
        "610m-clm-10k-mlm40-42k": {c: e + {"SC": e, "QA": e}.get(c, 0) for c in CATEGORIES},
        "610m-clm-21k-mlm40-42k": {c: e + {"SC": e, "QA": e}.get(c, 0) for c in CATEGORIES},
        # 5: continued from CLM above continued from MLM.
        "610m-clm-dec42k-mlm40-44k": dict.fromkeys(CATEGORIES, e),
    }
    # 3: MLM's learning-rate curve deeper by EFFECT at the in-range rate farthest from the optimum.
    depth = {"610m-mlm40-42k": 2 + max(sign, 0) * EFFECT, "610m-clm-42k": 2 + max(-sign, 0) * EFFECT}
    return effects, depth


@dataclass(frozen=True)
class Study:
    """One simulated study as arrays indexed (checkpoint as in CHECKPOINTS, task, learning rate, seed)."""
    tasks: list[tuple[str, str]]
    """(task, category) per task index."""
    lrs: np.ndarray
    validation: np.ndarray
    test: np.ndarray


def simulate(rng: np.random.Generator, sign: float) -> Study:
    """One study's scores (no effect when sign == 0)."""
    effects, depth = planted_effects(sign) if sign else ({}, {})
    tasks = [(f"{c.lower()}{i}", c) for c in CATEGORIES for i in range(rng.integers(1, 4))]
    lrs = np.array(LRS[:rng.integers(3, 7)])
    n_ck, n_task, n_lr = len(CHECKPOINTS), len(tasks), len(lrs)
    base = rng.uniform(40, 85, n_task)
    effect = np.array([[effects.get(ck, {}).get(c, 0.0) for _, c in tasks] for ck, _, _ in CHECKPOINTS])
    # Depth in points at 1e-5 (0.7 decades below the optimum), quadratic in log10(lr).
    shape = (np.log10(lrs / BEST_LR) / math.log10(1e-5 / BEST_LR)) ** 2
    curve = np.array([depth.get(ck, 2.0) for ck, _, _ in CHECKPOINTS])[:, None] * shape[None, :]
    seed_effect = rng.normal(0, SEED_SD, (1, n_task, 1, SEEDS))
    model = (base[None, :, None, None] + effect[:, :, None, None] - curve[:, None, :, None] + seed_effect
             + rng.normal(0, SIGMA, (n_ck, n_task, n_lr, SEEDS)))
    validation = model + rng.normal(0, EVAL_SD, model.shape)
    test = model + rng.normal(0, EVAL_SD, model.shape)
    return Study(tasks=tasks, lrs=lrs, validation=validation, test=test)


def trial_rows(study: Study) -> pd.DataFrame:
    """The study as the store's trial rows: what `sweeper report` reads."""
    n_ck, n_task, n_lr, _ = study.test.shape
    ck, task, lr, seed = (a.ravel() for a in np.meshgrid(np.arange(n_ck), np.arange(n_task), np.arange(n_lr),
                                                         np.arange(SEEDS), indexing="ij"))
    runs = pd.DataFrame([{"checkpoint_id": c, "run_name": r.name, "objective": r.objective, "mask_ratio": r.mask_ratio,
                          "clm_fraction": r.clm_fraction, "total_steps": r.total_steps, "checkpoint_step": s,
                          "tokens_seen": s * 2048, "init_from": r.init_from, "steps_before": r.steps_before}
                         for c, r, s in CHECKPOINTS])
    rows = runs.iloc[ck].reset_index(drop=True)
    rows["task"] = np.array([t for t, _ in study.tasks])[task]
    rows["task_category"] = np.array([c for _, c in study.tasks])[task]
    rows["learning_rate"], rows["seed"] = study.lrs[lr], seed
    rows["validation_score"], rows["test_score"] = study.validation.ravel(), study.test.ravel()
    rows["status"], rows["metric"] = "ok", "accuracy"
    rows["trial_key"] = [f"t{i}" for i in range(len(rows))]
    return rows


def synthetic_study(rng: np.random.Generator, sign: float) -> pd.DataFrame:
    """One study's trial rows (no effect when sign == 0)."""
    return trial_rows(simulate(rng, sign))


# --- the array path: what `check_findings` builds from the rows, built from the arrays ------------
# The findings' tests run on per-seed arrays (`SeedScores`, `Spreads`). Building them from trial
# rows with pandas is most of a study's time, so the many simulated studies build them from their
# arrays; `test_the_array_path_gives_the_verdicts_of_the_trial_rows` checks that both paths give
# the same verdicts, numbers and p-values (the pandas layer is also tested in test_findings.py and
# test_report.py).

FINAL = [i for i, (_, run, step) in enumerate(CHECKPOINTS) if step == run.total_steps]
STABILITY_LRS = (1e-5, 1e-4)  # check_findings' default lr_range


@functools.cache
def runs_table() -> pd.DataFrame:
    """The checkpoints' run columns as the pandas path arranges them (the same in every study)."""
    rows = analysis.analysis_columns(synthetic_study(np.random.default_rng(0), 0.0))
    return SeedScores.of(analysis.per_seed_category_scores(rows)).runs


def seed_arrays(study: Study) -> tuple[SeedScores, Spreads]:
    """`SeedScores` and `Spreads` of the study, as `check_findings` builds them from its rows."""
    ids = [checkpoint_id for checkpoint_id, _, _ in CHECKPOINTS]
    in_category = [np.array([c == category for _, c in study.tasks]) for category in CATEGORIES]
    # Selection: per (checkpoint, task), the rate with the best seed-averaged validation score (the
    # first, i.e. the smallest, on a tie); per seed, the category's mean of the selected test scores.
    best = study.validation.mean(axis=3).argmax(axis=2)
    selected = np.take_along_axis(study.test, best[:, :, None, None], axis=2)[:, :, 0, :]
    cube = np.stack([selected[:, tasks].mean(axis=1) for tasks in in_category], axis=1)
    scores = SeedScores(cube=cube, checkpoints={c: i for i, c in enumerate(ids)},
                        categories_in_order=list(CATEGORIES), runs=runs_table())
    # Spread: final checkpoints, rates in range, scores centred per (checkpoint, task) cell; per
    # seed, the mean square over the category's tasks and rates (analysis.per_seed_spread).
    in_range = (study.lrs >= STABILITY_LRS[0]) & (study.lrs <= STABILITY_LRS[1])
    assert in_range.any(), "the grid starts at 1e-5: some rate is always in range"
    kept = study.test[FINAL][:, :, in_range, :]
    squares = (kept - kept.mean(axis=(2, 3), keepdims=True)) ** 2
    mean_square = np.stack([squares[:, tasks].mean(axis=(1, 2)) for tasks in in_category], axis=1)
    count = np.array([tasks.sum() * in_range.sum() for tasks in in_category])  # squares per seed
    with np.errstate(divide="ignore"):
        log_rms = np.where(mean_square > 0, 0.5 * np.log(mean_square), np.nan)
    final_ids = [ids[i] for i in FINAL]
    pooled = np.sqrt((mean_square * count[None, :, None]).sum(axis=2) / (count[None, :] * SEEDS - 1))
    pooled = pd.Series(pooled.ravel(), index=pd.MultiIndex.from_product(
        [final_ids, list(CATEGORIES)], names=["checkpoint_id", "task_category"]))
    spreads = Spreads(log_rms=SeedScores(cube=log_rms, checkpoints={c: i for i, c in enumerate(final_ids)},
                                         categories_in_order=list(CATEGORIES), runs=runs_table().loc[final_ids]),
                      pooled=pooled)
    return scores, spreads


def verdict_counts(sign: float, studies: int, seed: int) -> pd.DataFrame:
    """Per finding, how many of `studies` synthetic studies gave each verdict."""
    rng = np.random.default_rng(seed)
    verdicts = [[v.verdict for v in judge(*seed_arrays(simulate(rng, sign)))] for _ in range(studies)]
    table = pd.DataFrame(verdicts, columns=[1, 2, 3, 4, 5])
    return table.apply(lambda column: column.value_counts()).fillna(0).astype(int).T


@pytest.fixture(scope="module", autouse=True)
def frozen_heap():
    """statsmodels' Holm (`multipletests`) runs a full `gc.collect()` on every call: 0.05-0.2 s in
    a process holding pandas, scipy and pytest's objects, most of this module's time over its
    ~1,400 calls. Freezing the objects alive now (`gc.freeze`) leaves each collection only those
    made since; nothing computed changes."""
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture(scope="module")
def null_counts() -> pd.DataFrame:
    return verdict_counts(0.0, NULL_STUDIES, seed=2507_00994)


def test_the_simulated_studies_have_the_store_schema_and_the_paper_grid_shape():
    from sweeper.store.results import TRIAL_SCHEMA
    rows = synthetic_study(np.random.default_rng(0), 0.0)
    assert set(rows.columns) <= set(TRIAL_SCHEMA.names)
    assert rows["seed"].nunique() == SEEDS and 3 <= rows["learning_rate"].nunique() <= 6
    assert set(rows["task_category"]) == set(CATEGORIES) and rows.groupby("task_category")["task"].nunique().between(1, 3).all()
    assert rows.groupby(["checkpoint_id", "task", "learning_rate", "seed"]).size().eq(1).all()


@pytest.mark.parametrize("sign", [0.0, +1.0, -1.0])
def test_the_array_path_gives_the_verdicts_of_the_trial_rows(sign):
    """The simulated studies' verdicts are those `check_findings` gives on their trial rows: the
    same parts, numbers, adjusted p-values and verdicts (over draws of 1-3 tasks, 3-6 rates)."""
    rng = np.random.default_rng(2507 + int(sign))
    for _ in range(3):
        study = simulate(rng, sign)
        from_rows, from_arrays = check_findings(trial_rows(study)), judge(*seed_arrays(study))
        for rows, arrays in zip(from_rows, from_arrays):
            assert (rows.verdict, rows.evidence) == (arrays.verdict, arrays.evidence)
            # float64 statistics in another order (~1e-15); a t tail's p moves by ~t**2 times that: < 1e-12.
            assert [p.p_adjusted for p in rows.parts] == pytest.approx([p.p_adjusted for p in arrays.parts],
                                                                       rel=1e-9, nan_ok=True)


def test_no_effect_gives_a_verdict_at_most_five_percent_of_the_time(null_counts):
    decided = null_counts.reindex(columns=[SUPPORTS, CONTRADICTS], fill_value=0).sum(axis=1)
    print(f"\nfalse verdicts out of {NULL_STUDIES} null studies (bound {MAX_FALSE}):\n{null_counts}")
    assert (decided <= MAX_FALSE).all(), decided


@pytest.mark.parametrize("sign, expected", [(+1, {1: SUPPORTS, 2: SUPPORTS, 3: SUPPORTS, 4: SUPPORTS, 5: SUPPORTS}),
                                            (-1, {1: CONTRADICTS, 2: SUPPORTS, 3: CONTRADICTS, 4: CONTRADICTS,
                                                  5: CONTRADICTS})])
def test_planted_effects_of_three_noise_sds_are_found_in_their_direction(sign, expected):
    counts = verdict_counts(sign, EFFECT_STUDIES, seed=18 + int(sign))
    print(f"\nverdicts out of {EFFECT_STUDIES} studies with effects of {EFFECT:g} SD (sign {sign:+d}):\n{counts}")
    for finding, verdict in expected.items():
        power = counts.loc[finding].get(verdict, 0) / EFFECT_STUDIES
        assert power >= MIN_POWER, (finding, verdict, power, counts.loc[finding].to_dict())
        wrong = CONTRADICTS if verdict == SUPPORTS else SUPPORTS
        assert counts.loc[finding].get(wrong, 0) == 0, (finding, counts.loc[finding].to_dict())
