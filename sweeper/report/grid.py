"""A study's trials as dense arrays, and the per-seed numbers the verdicts test (docs/statistics.md).

`TrialGrid` holds validation and test scores as (checkpoint, task, point, seed) arrays, a point
being a learning rate with the values of the other swept fields. The findings read two things
from it, both computed here with numpy so that the calibration's thousands of simulated studies
run the very code a report runs (they build a `TrialGrid` directly):

- **Cross-fitted selection** (`selected_scores`): seed s's score on a (checkpoint, task) is its test
  score at the point that is best on the *other* seeds' mean validation score. Choosing the point
  on the seeds whose test scores then enter the test favours checkpoints with flat learning-rate
  curves (many near-equal points, so the best of them is lucky on those seeds: the winner's curse);
  with s left out of its own choice its score is an unbiased draw of what the selection achieves.
  A cell with a single seed selects on that seed (no other to choose with), and says so.
- **Learning-rate sensitivity** (`Sensitivity`): per (checkpoint, task), seed-centred scores over
  the rates in range; for two seeds s != t, the covariance over rates of their curves estimates the
  variance of the true curve (seed noise is independent across seeds, so it cancels), and the
  average over pairs is the U-statistic the stability part tests. Its complement in each seed's
  own mean square is the seed noise.

Outcomes: a *diverged* trial scores the worst finished score of its task in the study (validation
and test apart): a rate where some seeds diverge must not win on its survivors' mean, and
divergence is the plainest sign of learning-rate sensitivity, so it counts in both, on the task's
scale, no worse than the worst finished trial. A *failed* trial (the worker crashed: a property of
the machine, not of the model) and a trial *stopped* by a trial scheduler have no score; a point
with a stopped seed ranks after every point whose seeds all finished (its survivors are the lucky
ones). The report counts each outcome per checkpoint.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from sweeper.report import analysis

OK, DIVERGED, FAILED, STOPPED, ABSENT = 0, 1, 2, 3, 4
STATE_OF = {"ok": OK, "diverged": DIVERGED, "failed": FAILED, "stopped": STOPPED}
STOPPED_PENALTY = 1e6
"""Points with a stopped seed rank after every complete point (scores are on 0-100)."""


@dataclass(frozen=True, kw_only=True)
class TrialGrid:
    """Scores as (checkpoint, task, point, seed) arrays; NaN where a trial has no score."""
    checkpoints: list[str]
    tasks: list[str]
    categories: list[str]
    """Per task, its category."""
    learning_rates: np.ndarray
    """Per point, its learning rate (points are sorted: on a tie the smaller rate wins)."""
    seeds: list
    validation: np.ndarray
    test: np.ndarray
    state: np.ndarray
    """Per trial, OK / DIVERGED / FAILED / STOPPED / ABSENT."""
    final: np.ndarray
    """Per checkpoint, whether it is final (the stability part reads final checkpoints)."""

    @classmethod
    def of(cls, trials: pd.DataFrame) -> TrialGrid:
        """The grid of a trials table (the store's rows, any status)."""
        frame = analysis.with_params(trials)
        swept = analysis.axes(frame)
        points = pd.DataFrame({"learning_rate": frame["learning_rate"].astype(float)})
        for axis in swept:  # a swept value as a sortable key: json of the hashable form
            points[axis] = frame[axis].map(lambda v: json.dumps(v, default=float, sort_keys=True))
        point_keys = list(points.itertuples(index=False, name=None))
        ordered = sorted(set(point_keys), key=lambda p: (p[0], *p[1:]))
        point = pd.Series(point_keys).map({p: i for i, p in enumerate(ordered)}).to_numpy()
        checkpoint, checkpoints = pd.factorize(frame["checkpoint_id"])
        task, tasks = pd.factorize(frame["task"])
        seed, seeds = pd.factorize(frame["seed"])
        shape = (len(checkpoints), len(tasks), len(ordered), len(seeds))
        validation, test = np.full(shape, np.nan), np.full(shape, np.nan)
        state = np.full(shape, ABSENT, dtype=np.int8)
        index = (checkpoint, task, point, seed)
        status = frame["status"].map(STATE_OF).fillna(FAILED).astype(np.int8).to_numpy()
        ok = status == OK
        state[index] = status
        validation[tuple(i[ok] for i in index)] = frame["validation_score"].to_numpy(float)[ok]
        test[tuple(i[ok] for i in index)] = frame["test_score"].to_numpy(float)[ok]
        category_of = frame.drop_duplicates("task").set_index("task")["task_category"]
        final = analysis.is_final(frame).groupby(frame["checkpoint_id"]).any()
        return cls(checkpoints=list(checkpoints), tasks=list(tasks), categories=[category_of[t] for t in tasks],
                   learning_rates=np.array([p[0] for p in ordered]), seeds=list(seeds), validation=validation,
                   test=test, state=state, final=final.reindex(checkpoints).to_numpy(bool))

    # --- variants (the robustness card) ---------------------------------------------------------

    def without_seed(self, index: int) -> TrialGrid:
        keep = np.arange(len(self.seeds)) != index
        return replace(self, seeds=[s for s, k in zip(self.seeds, keep) if k], validation=self.validation[..., keep],
                       test=self.test[..., keep], state=self.state[..., keep])

    def without_task(self, index: int) -> TrialGrid:
        keep = np.arange(len(self.tasks)) != index
        return replace(self, tasks=[t for t, k in zip(self.tasks, keep) if k],
                       categories=[c for c, k in zip(self.categories, keep) if k], validation=self.validation[:, keep],
                       test=self.test[:, keep], state=self.state[:, keep])

    def only(self, keep: np.ndarray) -> TrialGrid:
        """The checkpoints where `keep` is true (a sequential look's replicates)."""
        return replace(self, checkpoints=[c for c, k in zip(self.checkpoints, keep) if k],
                       validation=self.validation[keep],
                       test=self.test[keep], state=self.state[keep], final=self.final[keep])

    def swapped(self) -> TrialGrid:
        """Validation and test exchanged: the point chosen on what was the test split."""
        return replace(self, validation=self.test, test=self.validation)

    # --- what the verdicts read -----------------------------------------------------------------

    def scored(self) -> tuple[np.ndarray, np.ndarray]:
        """Validation and test with each diverged trial at its task's worst finished score."""
        validation, test = self.validation.copy(), self.test.copy()
        diverged = self.state == DIVERGED
        if diverged.any():
            with np.errstate(all="ignore"):
                for scores in (validation, test):
                    floor = np.nanmin(np.moveaxis(scores, 1, 0).reshape(len(self.tasks), -1), axis=1)
                    scores[diverged] = np.broadcast_to(floor[None, :, None, None], scores.shape)[diverged]
        return validation, test

    def selected_scores(self, crossfit: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Per (checkpoint, task, seed): the test score at the selected point (module docstring),
        NaN where the seed has none there; and per (checkpoint, task) whether some seed had to
        select on itself. `crossfit=False`: every seed at the point best on all seeds' mean (the
        paper's selection)."""
        validation, test = self.scored()
        has = ~np.isnan(validation)
        stopped = (self.state == STOPPED).sum(axis=3, keepdims=True)
        total = np.where(has, validation, 0.0).sum(axis=3, keepdims=True)
        count = has.sum(axis=3, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            pooled = np.where(count > 0, total / count, np.nan) - STOPPED_PENALTY * (stopped > 0)
            if crossfit:
                others = count - has
                rank = (total - np.where(has, validation, 0.0)) / others
                rank -= STOPPED_PENALTY * ((stopped - (self.state == STOPPED)) > 0)
                rank = np.where(others > 0, rank, pooled)
                own = ((others == 0) & has).any(axis=(2, 3))
            else:
                rank, own = np.broadcast_to(pooled, validation.shape), np.zeros(validation.shape[:2], bool)
        rank = np.where(np.isnan(rank), -np.inf, rank)
        chosen = rank.argmax(axis=2)[:, :, None, :]
        score = np.take_along_axis(test, chosen, axis=2)[:, :, 0, :]
        return np.where(np.isfinite(np.take_along_axis(rank, chosen, axis=2)[:, :, 0, :]), score, np.nan), own

    def category_cube(self, crossfit: bool = True) -> tuple[np.ndarray, list[str]]:
        """Per (checkpoint, category, seed): the mean of the category's tasks' selected scores; NaN
        where the seed lacks one of the tasks the checkpoint was scored on."""
        scores, _ = self.selected_scores(crossfit)
        scored_task = ~np.isnan(self.validation).all(axis=(2, 3))  # (checkpoint, task)
        categories = analysis.ordered_categories(self.categories)
        cube = np.full((len(self.checkpoints), len(categories), len(self.seeds)), np.nan)
        for k, category in enumerate(categories):
            tasks = np.array([c == category for c in self.categories])
            members = scored_task[:, tasks]  # (checkpoint, tasks of the category)
            values = scores[:, tasks]
            complete = (~np.isnan(values) | ~members[:, :, None]).all(axis=1) & members.any(axis=1)[:, None]
            with np.errstate(invalid="ignore"):
                mean = np.where(members[:, :, None], values, 0.0).sum(axis=1) / members.sum(axis=1)[:, None]
            cube[:, k] = np.where(complete, mean, np.nan)
        return cube, categories

    def outcomes(self) -> pd.DataFrame:
        """Per checkpoint: trials per outcome (ok, diverged, failed, stopped)."""
        counts = {name: (self.state == code).sum(axis=(1, 2, 3)) for name, code in STATE_OF.items()}
        return pd.DataFrame(counts, index=pd.Index(self.checkpoints, name="checkpoint_id"))


@dataclass(frozen=True, kw_only=True)
class Sensitivity:
    """Seed-centred scores over the rates in range, per final checkpoint and task: (checkpoint,
    task, rate, seed), NaN where a seed lacks a rate (it then has no curve for that task)."""
    centred: np.ndarray
    checkpoints: dict[str, int]
    categories: list[str]
    """Per task, its category."""
    rates: int

    @classmethod
    def of(cls, grid: TrialGrid, lr_range: tuple[float, float] | None) -> Sensitivity:
        """Over the rates in `lr_range` (None: every rate; `analysis.in_lr_range` says the same)."""
        _, test = grid.scored()
        in_range = np.ones(len(grid.learning_rates), bool)
        if lr_range is not None:
            in_range = (grid.learning_rates >= lr_range[0]) & (grid.learning_rates <= lr_range[1])
        if not in_range.any():  # the CPU studies: every rate, as the stability table does
            in_range = np.ones(len(grid.learning_rates), bool)
        curves = test[grid.final][:, :, in_range, :]
        with np.errstate(invalid="ignore"):
            centred = curves - curves.mean(axis=2, keepdims=True)
        final = [c for c, f in zip(grid.checkpoints, grid.final) if f]
        return cls(centred=centred, checkpoints={c: i for i, c in enumerate(final)}, categories=grid.categories,
                   rates=int(in_range.sum()))

    def seeds_with_curves(self, checkpoint_ids, category: str) -> np.ndarray:
        """Seeds with a full curve on every task of the category for every one of the checkpoints."""
        tasks = [i for i, c in enumerate(self.categories) if c == category]
        rows = self.centred[np.ix_([self.checkpoints[c] for c in checkpoint_ids], tasks)]
        return ~np.isnan(rows).any(axis=(0, 1, 2))

    def components(self, checkpoint: str, category: str, seeds: np.ndarray) -> tuple[np.ndarray, float, float]:
        """Learning-rate variance (points squared) of one checkpoint's curve in a category, mean over
        its tasks, on `seeds` (a mask) and with each of them left out (the jackknife's), and the
        seed noise variance: (leave-one-out values per kept seed, estimate, noise)."""
        tasks = [i for i, c in enumerate(self.categories) if c == category]
        z = self.centred[self.checkpoints[checkpoint]][tasks][:, :, seeds]  # (task, rate, seed)
        n, dof = z.shape[2], self.rates - 1
        total = z.sum(axis=2)  # (task, rate)
        own = (z ** 2).sum(axis=1)  # (task, seed)
        pairs = (total ** 2).sum(axis=1) - own.sum(axis=1)  # sum over ordered pairs s != t of z_s . z_t
        estimate = pairs / (n * (n - 1) * dof)
        without = total[:, :, None] - z  # (task, rate, seed): the sum without seed s
        pairs_without = (without ** 2).sum(axis=1) - (own.sum(axis=1)[:, None] - own)
        with np.errstate(invalid="ignore", divide="ignore"):
            left_out = pairs_without / ((n - 1) * (n - 2) * dof)
        noise = own.sum(axis=1) / (n * dof) - estimate
        return left_out.mean(axis=0), float(estimate.mean()), float(noise.mean())
