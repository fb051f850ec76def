"""Simulated studies for the verdicts' calibration and power (tests/unit/report/test_verdict_calibration.py,
benchmarks/verdict_power.py; docs/statistics.md quotes their numbers).

A study is the paper's 610m grid per (size, budget) group: MLM at 30 and 40 %, CLM, CLM -> MLM at
25 and 50 % CLM, intermediate checkpoints of CLM and MLM-40, continued MLM from the CLM and the
MLM-40 checkpoints; each configuration trained `replicates` times. 4 categories with 1-3 tasks
each, 3-6 learning rates from 1e-5, 5 fine-tuning seeds. A trial's score is

    task base + planted effect (arm, category) + run effect (run, category; SD `run_sd`)
    [+ the source replicate's run effect, for a continued-pretraining run]
    - learning-rate curve (arm: quadratic in log lr, `depth` points at 1e-5, 0 at its optimum)
    + seed effect (task, seed; shared by every checkpoint and rate: the pairing)
    + model noise (SD `noise` of the arm) + evaluation noise (SD 0.3, validation and test apart),

Continued-pretraining runs are drawn as the plan builds them: replicate r continues from its
source's replicate r and carries that run's effect, shared by every run continued from it
(`shared_from` simulates the old fallback: replicates from it on continued from replicate 0). Run
effects are normal, or for the arms in `skewed` occasional bad runs (run_sd x (1 - Exp(1))).

built straight into a `TrialGrid` with its run columns: the verdicts then run the code a report
runs (`findings.judge_grid`). `trial_rows` writes the same study as the store's rows, so a test can
check that both paths agree.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sweeper.report.grid import OK, TrialGrid

SIGMA = 1.0          # model noise SD, points
SEED_SD = 1.5        # per-(task, seed) effect shared by every checkpoint and learning rate
EVAL_SD = 0.3        # validation/test evaluation noise, independent per split
LRS = (1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4)
BEST_LR = 5e-5       # every arm's optimum: always in the grid (3-6 rates from the smallest)
SEEDS = 5
CATEGORIES = ("SC", "TC", "QA", "IR")
GROUPS = (("610m", 42000), ("610m", 12000), ("150m", 42000))
"""(size, budget) groups of a multi-group study: sizes and budgets are compared apart."""


@dataclass(frozen=True)
class Arm:
    """One configuration (tag as in `610m-<tag>`), its objective and schedule."""
    tag: str
    objective: str
    mask_ratio: float
    clm_fraction: float
    source: str | None = None
    """Continued pretraining: the tag of the run it continues."""
    intermediate: bool = False
    """Whether the run also has a checkpoint at a quarter of its budget."""


ARMS = (Arm("mlm40", "mlm", 0.4, 0.0, intermediate=True), Arm("mlm30", "mlm", 0.3, 0.0),
        Arm("clm", "clm", math.nan, 1.0, intermediate=True), Arm("split25", "clm-mlm", 0.4, 0.25),
        Arm("split50", "clm-mlm", 0.4, 0.5), Arm("cpt-clm", "mlm", 0.4, 0.0, source="clm"),
        Arm("cpt-mlm", "mlm", 0.4, 0.0, source="mlm40"))
CPT_STEPS = 2000


def steps_text(steps: int) -> str:
    return f"{steps // 1000}k" if steps % 1000 == 0 else str(steps)


def run_name(size: str, budget: int, arm: Arm) -> str:
    """The authors' names: `610m-mlm40-42k`, `610m-clm-10k-mlm40-42k`, `610m-clm-dec42k-mlm40-44k`."""
    b = steps_text(budget)
    if arm.objective == "clm-mlm":
        return f"{size}-clm-{steps_text(int(budget * arm.clm_fraction))}-mlm40-{b}"
    if arm.source:
        return f"{size}-{arm.source}-dec{b}-mlm40-{steps_text(budget + CPT_STEPS)}"
    return f"{size}-{arm.tag}-{b}"


@dataclass(frozen=True)
class Scenario:
    """What a simulated study plants: effects per (arm tag, category) in points, learning-rate
    curve depth and noise SD per arm tag (defaults: 2 points and SIGMA), run-to-run SD, replicates."""
    groups: tuple = GROUPS
    effects: dict = field(default_factory=dict)
    depth: dict = field(default_factory=dict)
    noise: dict = field(default_factory=dict)
    run_sd: float = 0.0
    replicates: int = 1
    tasks_per_category: int | None = None
    """Fixed count of tasks per category (None: 1-3, drawn per study)."""
    rates: int | None = None
    """Fixed count of learning rates from 1e-5 (None: 3-6, drawn per study)."""
    skewed: tuple = ()
    """Arm tags whose run effects are skewed: occasional bad runs, run_sd x (1 - Exp(1))."""
    shared_from: int | None = None
    """CPT replicates from this one on continue from source replicate 0 (the old fallback)."""

    def source_rows(self, runs: pd.DataFrame) -> np.ndarray:
        """Per checkpoint, the row of the source run's final checkpoint whose run effect it carries
        (its own source replicate, or 0 from `shared_from` on); -1 for a run from scratch."""
        columns = zip(runs["run_name"], runs["replicate"], runs["checkpoint_step"], runs["total_steps"])
        final = {(n.removesuffix(f"-rep{r}"), r): i for i, (n, r, s, t) in enumerate(columns) if s == t}
        out = np.full(len(runs), -1)
        for i, (source, r) in enumerate(zip(runs["init_from"], runs["replicate"])):
            if isinstance(source, str):
                r = r if self.shared_from is None or r < self.shared_from else 0
                out[i] = final[(source, r)]
        return out

    def checkpoints(self) -> list[dict]:
        """The study's checkpoints' run columns, with `arm_tag` (the planted effects' key)."""
        rows = []
        for size, budget in self.groups:
            for arm in ARMS:
                name = run_name(size, budget, arm)
                total = CPT_STEPS if arm.source else budget
                steps = [budget // 4, total] if arm.intermediate else [total]
                for replicate in range(self.replicates):
                    run = name if replicate == 0 else f"{name}-rep{replicate}"
                    source = (
                        run_name(size, budget, next(a for a in ARMS if a.tag == arm.source)) if arm.source else None
                    )
                    for step in steps:
                        suffix = "" if step == total else f"-{step}"
                        rows.append({"checkpoint_id": run + suffix, "run_name": run, "objective": arm.objective,
                                     "clm_fraction": arm.clm_fraction, "mask_ratio": arm.mask_ratio,
                                     "checkpoint_step": step, "total_steps": total, "tokens_seen": step * 2048,
                                     "init_from": source, "steps_before": budget if arm.source else 0,
                                     "source": "study", "parameters": math.nan, "arm": name + suffix,
                                     "replicate": replicate,
                                     "arm_tag": arm.tag + ("-early" if step != total else "")})
        return rows


def uniform_effects(effect: float, margin: float = 1.0) -> dict:
    """Planted effects of one group under which every part that compares two arms' means claims
    `effect` points, the model of `sweeper plan`'s expected cost (sweeper.design.sequential_cost):
    MLM beats CLM by `effect` on SC and QA and CLM ties it on TC (CLM - MLM + `margin`), CLM
    beats MLM early, the splits beat MLM-40 and CPT from CLM beats CPT from MLM, each by `effect`
    in every category. MLM-30 equals MLM-40 and the 50 % split the 25 %, so the margin tests
    against them (finding 2's compromise, finding 4's reliability) claim `margin`; finding 2's
    'no ratio is best everywhere' and finding 3's stability stay null."""
    mlm = {"SC": effect, "QA": effect, "TC": margin - effect, "IR": 0.0}
    split = {c: v + effect for c, v in mlm.items()}
    every = dict.fromkeys(CATEGORIES, effect)
    return {"mlm40": mlm, "mlm30": mlm, "clm-early": every, "split25": split, "split50": split, "cpt-clm": every}


@functools.cache
def runs_table(scenario_key: tuple) -> pd.DataFrame:
    """The study's checkpoints (`Scenario.checkpoints`), by groups and replicates."""
    groups, replicates = scenario_key
    return pd.DataFrame(Scenario(groups=groups, replicates=replicates).checkpoints()).set_index("checkpoint_id")


def simulate(rng: np.random.Generator, scenario: Scenario) -> tuple[TrialGrid, pd.DataFrame]:
    """One study: its grid and its checkpoints' run columns (indexed by checkpoint id)."""
    runs = runs_table((scenario.groups, scenario.replicates))
    tags = runs["arm_tag"].to_numpy()
    tasks = [(f"{c.lower()}{i}", c) for c in CATEGORIES
             for i in range(scenario.tasks_per_category or rng.integers(1, 4))]
    lrs = np.array(LRS[:scenario.rates or rng.integers(3, 7)])
    n_ck, n_task, n_lr = len(runs), len(tasks), len(lrs)
    category = np.array([CATEGORIES.index(c) for _, c in tasks])
    base = rng.uniform(40, 85, n_task)
    effect = np.array([[scenario.effects.get(t, {}).get(c, 0.0) for _, c in tasks] for t in tags])
    run_effect = 0.0
    if scenario.run_sd:
        draws = rng.normal(0, scenario.run_sd, (n_ck, len(CATEGORIES)))
        skewed = np.isin([t.removesuffix("-early") for t in tags], scenario.skewed)
        draws[skewed] = scenario.run_sd * (1 - rng.exponential(1.0, (skewed.sum(), len(CATEGORIES))))
        source = scenario.source_rows(runs)
        draws += np.where(source[:, None] >= 0, draws[np.maximum(source, 0)], 0.0)
        run_effect = draws[:, category]
    shape = (np.log10(lrs / BEST_LR) / math.log10(1e-5 / BEST_LR)) ** 2
    curve = np.array([scenario.depth.get(t.removesuffix("-early"), 2.0) for t in tags])[:, None] * shape[None, :]
    noise = np.array([scenario.noise.get(t, SIGMA) for t in tags])[:, None, None, None]
    seed_effect = rng.normal(0, SEED_SD, (1, n_task, 1, SEEDS))
    model = (base[None, :, None, None] + (effect + run_effect)[:, :, None, None] - curve[:, None, :, None]
             + seed_effect + noise * rng.normal(0, 1, (n_ck, n_task, n_lr, SEEDS)))
    validation = model + rng.normal(0, EVAL_SD, model.shape)
    test = model + rng.normal(0, EVAL_SD, model.shape)
    final = (runs["checkpoint_step"] == runs["total_steps"]).to_numpy()
    grid = TrialGrid(checkpoints=list(runs.index), tasks=[t for t, _ in tasks], categories=[c for _, c in tasks],
                     learning_rates=lrs, seeds=list(range(SEEDS)), validation=validation, test=test,
                     state=np.full(model.shape, OK, dtype=np.int8), final=final)
    return grid, runs


def trial_rows(grid: TrialGrid, runs: pd.DataFrame) -> pd.DataFrame:
    """The study as the store's trial rows: what `sweeper report` reads."""
    n_ck, n_task, n_lr, n_seed = grid.test.shape
    ck, task, lr, seed = (a.ravel() for a in np.meshgrid(np.arange(n_ck), np.arange(n_task), np.arange(n_lr),
                                                         np.arange(n_seed), indexing="ij"))
    rows = runs.drop(columns="arm_tag").reset_index().iloc[ck].reset_index(drop=True)
    rows["task"] = np.array(grid.tasks)[task]
    rows["task_category"] = np.array(grid.categories)[task]
    rows["learning_rate"], rows["seed"] = grid.learning_rates[lr], np.array(grid.seeds)[seed]
    rows["validation_score"], rows["test_score"] = grid.validation.ravel(), grid.test.ravel()
    rows["status"], rows["metric"] = "ok", "accuracy"
    rows["trial_key"] = [f"t{i}" for i in range(len(rows))]
    return rows
