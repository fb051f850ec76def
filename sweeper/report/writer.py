"""`sweeper report STUDY_DIR`: the paper's tables, figures and findings for the study, from the store.

Writes `report.md` and `figures/*.png` in the study directory and prints a few lines of it (the
comparisons, tasks at chance) and its path. Works on partial results: it reports on what is
recorded and says what is missing, and names the damaged files it met (store parts set aside, an
unreadable `plan.json`).
"""
from __future__ import annotations


import math
import sys

import pandas as pd

from sweeper.report import (analysis, chance, data_problems, figures, headline, importance, lr_bins,
                            pretraining_curves, provenance)
from sweeper.report.figures import FigureSet
from sweeper.report.repeats import repeated_lines
from sweeper.report.study_history import read_record
from sweeper.report.tables import fmt, markdown_table
from sweeper.report.statistics import verdict_config
from sweeper.report.verdict_text import verdicts_sections
from sweeper.store import environments, storage
from sweeper.store.layout import StudyLayout
from sweeper.store.quarantine import quarantined, relative
from sweeper.store.results import read_predictions


def damage_section(layout: StudyLayout, damaged: dict[str, str], unreadable: dict[str, str],
                   problems: str = "") -> list[str]:
    """Lines naming the store files set aside, those left in place and not read (`unreadable`),
    the markers read as absent, and the rows whose scores are not numbers (none: no lines)."""
    notes = quarantined(layout)
    if not notes and not damaged and not unreadable and not problems:
        return []
    out = ["## Damaged files", ""]
    if notes:
        out += [f"{len(notes)} damaged file(s) set aside in `quarantine/` by `sweeper run` (a store part's rows are "
                "absent from this report until its trials run again; delete them once inspected):", ""]
        out += [f"- `{n['file']}` (set aside {n['quarantined_at']}): {n['reason'][:200]}" for n in notes]
    if unreadable:
        out += [""] * (len(out) > 2) + [
            f"{len(unreadable)} damaged store file(s) not read and left in place (`sweeper run` sets them "
            "aside in `quarantine/` and reruns their trials):",
            "",
        ]
        out += [f"- `{relative(layout, location)}`: {why[:200]}" for location, why in sorted(unreadable.items())]
    out += [f"- `{relative(layout, location)}`: {why}; read as absent" for location, why in sorted(damaged.items())]
    if problems:
        out += [""] * (len(out) > 2) + [f"Data problem: {problems}."]
    return out + [""]


MAX_AXIS_VALUES = 12
"""A swept field with more values than this gets no axis section, nor does a range the spec's
search samples (a value per sample: one column each would say nothing); `## Parameter
importances` covers them. A choice keeps its section: a few values, each sampled often."""


def coverage(trials: pd.DataFrame, planned: int | None, missing: int = 0) -> str:
    """The result rows the report reads, by status, and how many the current spec plans that have no row
    (a row per trial and data set it scored: a retrieval trial also writes its evaluation-only sets' rows)."""
    counts = trials["status"].value_counts().to_dict() if not trials.empty else {}
    parts = [f"{n} {status}" for status, n in sorted(counts.items())]
    line = f"{len(trials)} result rows recorded ({', '.join(parts) or 'none'})"
    if planned is not None and missing:
        line += (f"; **{missing} of {planned} planned result rows are missing** (study incomplete: "
                 "tables show what is recorded)")
    return line


def category_section(categories: pd.DataFrame, title: str) -> list[str]:
    if categories.empty:
        return []
    means, cis = analysis.wide(categories), analysis.wide(categories, "ci95")
    runs = categories.drop_duplicates("checkpoint_id").set_index("checkpoint_id")
    rows = [[checkpoint, analysis.objective_text(runs.loc[checkpoint, "objective"]),
             *(f"{fmt(means.loc[checkpoint, c])} ± {fmt(cis.loc[checkpoint, c])}" for c in means.columns)]
            for checkpoint in means.index]
    return [f"## {title}", "", markdown_table(["checkpoint", "objective", *means.columns], rows), ""]


def value_text(value) -> str:
    """A swept value as the report writes it: numbers short (1e-3, 0.1), a pair as a list."""
    if isinstance(value, tuple):
        return "[" + ", ".join(f"{v:g}" for v in value) + "]"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e6:
        return str(int(value))
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def params_text(row, swept: list[str]) -> str:
    """The swept values of a best point ('-' when none reaches the task)."""
    given = [f"{analysis.axis_name(a)} {value_text(row[a])}" for a in swept
             if row[a] is not None and not (isinstance(row[a], float) and math.isnan(row[a]))]
    return ", ".join(given) or "-"


def task_sections(best: pd.DataFrame, trials: pd.DataFrame) -> list[str]:
    out, swept = [], analysis.axes(best)
    external = set(best.loc[analysis.is_external(best), "checkpoint_id"])  # no step of the study's: '-'
    what = "point (learning rate and swept values)" if swept else "LR"
    for task, rows in best.groupby("task", sort=True):
        metric = trials.loc[trials["task"] == task, "metric"].iloc[0]
        out += [f"### {task} ({metric}; test mean over seeds at the best validation {what})", ""]
        out.append(markdown_table(
            ["checkpoint", "objective", "step", "best LR", *(["best params"] if swept else []), "val mean",
             "test mean", "95% CI", "std", "seeds"],
            [[r["checkpoint_id"], analysis.objective_text(r["objective"]),
              "-" if r["checkpoint_id"] in external else step_text(r), f"{r['learning_rate']:.1e}",
              *([params_text(r, swept)] if swept else []),
              fmt(r["validation_mean"]), fmt(r["test_mean"]), f"± {fmt(r['test_ci95'])}", fmt(r["test_std"]),
              str(int(r["seeds"]))] for _, r in rows.iterrows()]))
        out.append("")
    return out


def axis_section(table: pd.DataFrame, axis: str) -> list[str]:
    """A swept field's section: per task and checkpoint, the test score at each value (mean over
    seeds ± 95 % interval, at that value's best learning rate and other swept values)."""
    name = analysis.axis_name(axis)
    values = sorted(table[axis].unique())
    cells = {(r["task"], r["checkpoint_id"], r[axis]): f"{fmt(r['test_mean'])} ± {fmt(r['test_ci95'])}"
             for _, r in table.iterrows()}
    keys = table.drop_duplicates(["task", "checkpoint_id"])
    rows = [[r["task"], r["checkpoint_id"], analysis.objective_text(r["objective"]),
             *(cells.get((r["task"], r["checkpoint_id"], v), "-") for v in values)]
            for _, r in keys.iterrows()]
    return [f"## Swept: finetuning.{name}", "",
            f"Test score at each value of `{name}` (mean over seeds ± 95 % CI), each value at its best learning "
            "rate and other swept values on mean validation; tasks the field does not reach are left out.", "",
            markdown_table(["task", "checkpoint", "objective", *(f"{name} {value_text(v)}" for v in values)], rows), ""]


def curve_table(frame: pd.DataFrame, index: list[str], title: str, note: str) -> list[str]:
    if frame.empty:
        return []
    table = frame.pivot_table(index=index, columns="task_category", values="mean")
    table = table[analysis.ordered_categories(table.columns)]
    # The 95 % interval over seeds beside each mean (NaN with one seed: the mean alone).
    half = frame.pivot_table(index=index, columns="task_category", values="ci95", dropna=False).reindex(
        index=table.index, columns=table.columns) if "ci95" in frame else None
    readable = [cell_text(column) for column in index]
    rows = [[*(text(v) for text, v in zip(readable, key if isinstance(key, tuple) else (key,))),
             *(fmt(x) if half is None or h != h else f"{fmt(x)} ± {fmt(h)}"
               for x, h in zip(values, half.loc[key] if half is not None else values))]
            for key, values in zip(table.index, table.values)]
    headers = [{"tokens_seen": "tokens seen", "checkpoint_step": "step", "total_steps": "budget (steps)"}.get(c, c)
               for c in index]
    return [f"## {title}", "", note, "", markdown_table([*headers, *table.columns], rows), ""]


def cell_text(column: str):
    """How a curve table writes a column's values: counts of tokens as 410k / 1.2B, steps with
    thousands separators, the rest as they are."""
    if column == "tokens_seen":
        return lambda v: provenance.count_text(v) or "n/a"
    if column in ("checkpoint_step", "total_steps", "added_steps"):
        return lambda v: f"{int(v):,}" if v == v else "n/a"
    return str


def step_text(row) -> str:
    """A checkpoint's step as the study counts it: a continued run's own steps after its
    source's (`700 (600 + 100)`)."""
    step = int(row["checkpoint_step"])
    before = row.get("steps_before")
    if isinstance(row.get("init_from"), str) and before == before and before:
        return f"{int(before) + step:,} ({int(before):,} + {step:,})"
    return f"{step:,}"


def origins_section(trials: pd.DataFrame) -> list[str]:
    """`## Checkpoints from elsewhere`: each one's source, what its rows state, and whether the
    findings read it (`sweeper.report.provenance`); no lines when the study has none."""
    origins = provenance.origins(trials)
    if origins.empty:
        return []
    left = set(provenance.left_out(trials)["checkpoint_id"])
    rows = [[r["checkpoint_id"], r["source"], analysis.objective_text(r["objective"]),
             provenance.count_text(r["parameters"]) or "unknown", provenance.count_text(r["tokens_seen"]) or "unknown",
             fmt(r["mask_ratio"]), "left out (below)" if r["checkpoint_id"] in left else "objective comparisons"]
            for _, r in origins.iterrows()]
    return ["## Checkpoints from elsewhere", "",
            "Checkpoints the study did not train (`finetuning.checkpoints`), fine-tuned on its grid beside its own "
            "runs: where each came from, what its meta (or config.json, for its size) states, and which findings "
            "read it.", "",
            markdown_table(["checkpoint", "source", "objective", "parameters", "tokens seen", "mask ratio", "findings"],
                           rows), ""]


def padding_section(trials: pd.DataFrame) -> list[str]:
    """`## Dynamic padding`: the checkpoints some of whose trials ran padded (no lines when none)."""
    padded = provenance.padded(trials)
    if padded.empty:
        return []
    return ["## Dynamic padding", "",
            "The packing probe refused packed rows for these checkpoints' backbones (their packed rows did not match "
            "padded ones), so their trials ran with dynamic padding instead: their wall times are not comparable with "
            "packed trials'.", "",
            *(f"- {r['checkpoint_id']}: {r['padded']} of {r['trials']} trials" for _, r in padded.iterrows()), ""]


LEFT_OUT_INTRO = (
    "The findings compare checkpoints of one size and one budget, so they read a checkpoint from elsewhere only when "
    "its meta states its objective and its parameters and tokens seen are known, and then only in the objective "
    "comparisons (finding 1, and finding 3's stability part). These are in the tables, not in the findings:")


def left_out_section(trials: pd.DataFrame) -> list[str]:
    """`## Left out of the findings`: each checkpoint the findings do not read, and why."""
    left = provenance.left_out(trials)
    if left.empty:
        return []
    return ["## Left out of the findings", "", LEFT_OUT_INTRO, "",
            *(f"- {r['checkpoint_id']}: {r['reason']}" for _, r in left.iterrows()), ""]


def study_loaded(layout: StudyLayout):
    """The study's own spec copy, read and planned; None when it is absent or no longer reads (a
    removed plugin): a report is written from the store whatever the spec says now."""
    from sweeper.plan import load as loading

    try:
        return loading.load_study(layout.spec)
    except Exception:
        return None


def study_space(spec) -> dict | None:
    """The searched space of the study's spec (learning rate and distributions), for the
    importances' bounds; None without a readable spec."""
    from sweeper.spec.space import LEARNING_RATE, log_range

    if spec is None:
        return None
    ft = spec.finetuning
    section = ft.optuna if ft.search == "optuna" else ft.random
    return {LEARNING_RATE: log_range(section.lr_min, section.lr_max), **ft.searched()}


def importance_section(trials: pd.DataFrame, space: dict | None) -> list[str]:
    """`## Parameter importances` for the samples of optuna or random searches (no lines when
    the study has none): per task and objective, each parameter's mean fANOVA importance over
    the cells, and how many cells had too few samples."""
    samples = importance.sample_scores(trials)
    if samples.empty:
        return []
    per_cell = importance.cell_importances(samples, space)
    table = importance.importance_summary(per_cell)
    counts = samples.groupby(["checkpoint_id", "task"]).size()
    few = int((counts < importance.MIN_SAMPLES).sum())
    flat = int((counts >= importance.MIN_SAMPLES).sum()) - per_cell.groupby(["checkpoint_id", "task"]).ngroups
    out = ["## Parameter importances", "",
           "Optuna's fANOVA importance of each searched parameter within a (checkpoint, task) cell, over its samples' "
           "seed-averaged validation scores (the score the search maximised; a cell's importances sum to 1), averaged "
           "over the cells of each task and objective.", ""]
    if not table.empty:
        names = [c for c in table.columns if c not in ("task", "objective", "cells")]
        out += [markdown_table(["task", "objective", "cells", *names],
                               [[r["task"], analysis.objective_text(r["objective"]), str(int(r["cells"])),
                                 *(fmt(r[n]) for n in names)]
                                for _, r in table.iterrows()]), ""]
    if few:
        out += [f"{few} of {len(counts)} cells have fewer than {importance.MIN_SAMPLES} samples and are left out "
                "(more samples per cell: `optuna.samples` / `random.samples`).", ""]
    if flat:
        out += [f"{flat} of {len(counts)} cells are left out: every sample scores the same there (nothing to "
                "explain).", ""]
    return out


def report_and_figures(layout: StudyLayout) -> tuple[str, FigureSet, list[str]]:
    """The report's text, its figures, and the few lines the terminal shows of it (`headline.terminal_lines`).
    The stability range is the study's spec's `report.stability_lr_range` (every rate without a spec copy)."""
    damaged: dict[str, str] = {}  # markers read as absent
    unreadable: dict[str, str] = {}  # store parts not read, left in place: a report moves nothing
    # Every recorded trial but the superseded ones and those recorded under other settings (named).
    record = read_record(layout, damaged, unreadable)  # the rows `sweeper results` writes
    environment = ["## Environment", "", *environments.summary(layout, damaged.__setitem__), ""]
    problems = data_problems.non_finite(record.trials)  # scores that are not numbers: named, never averaged
    trials = record.trials[~problems]
    study = record.trials["study"].iloc[0] if not record.trials.empty else storage.name(layout.root)
    line = coverage(record.trials, record.planned, record.missing)
    if problems.any():
        line += f"; {int(problems.sum())} of them with scores that are not finite, left out (`## Damaged files`)"
    out = [f"# Study report: {study}", "", line, "", *(record.summary and [*record.summary, ""])]
    out += repeated_lines(trials)  # Optuna samples of a cell at one point
    terminal = [f"[report] {study}: {line}"]
    damage = damage_section(layout, damaged, unreadable, data_problems.non_finite_text(record.trials))
    out += damage
    terminal += [f"[report] damaged: {line[2:]}" for line in damage if line.startswith("- ")]  # each file, one line
    out += origins_section(trials) + padding_section(trials)
    best = analysis.best_params_table(trials)
    if best.empty:
        return "\n".join(out + ["No finished trials yet.", ""] + record.section + environment) + "\n", \
            FigureSet.for_study(layout), terminal
    categories = analysis.category_scores(trials, best)
    final = analysis.final_only(categories)
    loaded = study_loaded(layout)
    spec = loaded and loaded.spec
    lr_range = spec.report.stability_lr_range if spec else None  # the one place the report reads it
    stability, used_range = analysis.stability(trials, lr_range)
    ranges = figures.score_ranges(trials)  # per category: its families' score range, for clipping
    families, shown = figures.checkpoint_families(trials), FigureSet.for_study(layout)  # colour: objective family
    found = headline.comparisons(trials)  # the comparisons the spec makes lead the report
    flagged = chance.at_chance(best, trials, read_predictions(layout, unreadable))
    terminal += headline.terminal_lines(found, chance.flag_lines(flagged))
    out += headline.comparisons_section(found)
    at_best = (
        "test score at the best point (learning rate, swept values)" if analysis.axes(best) else "best-LR test score"
    )
    out += category_section(final, f"Category averages (final checkpoints; {at_best}, mean ± 95 % CI over seeds)")
    out += shown.place(
        "category scores", "category_scores", figures.category_bars(final, ranges, families), "no scores"
    )
    out += chance.chance_section(flagged)
    out += verdicts_sections(trials, lr_range, spec and spec.pretraining.sequential,
                             verdict_config(spec and spec.report)) + left_out_section(trials)
    if not stability.empty:
        out += ["## Fine-tuning stability", "",
                f"Test scores centred per (checkpoint, task), spread = std over seeds x learning rates {used_range}, "
                "pooled per category (paper Fig. 5; smaller is more stable).", "",
                "The interval is a 95 % interval over seeds (the replicated unit; see docs/statistics.md).", "",
                markdown_table(["run", "objective", "category", "spread", "95% CI", "trials"],
                               [[r["run_name"], analysis.objective_text(r["objective"]), r["task_category"],
                                 fmt(r["spread"]),
                                 f"[{fmt(r['spread_low'])}, {fmt(r['spread_high'])}]", str(r["runs"])]
                                for _, r in stability.iterrows()]), ""]
    out += shown.place("stability", "stability", figures.stability_bars(stability, used_range, families),
                       "no final checkpoints")
    out += pretraining_curves.loss_section(layout, loaded, shown, unreadable)
    efficiency = analysis.data_efficiency(categories)
    out += curve_table(efficiency, ["run_name", "checkpoint_step", "tokens_seen"], "Data efficiency",
                       "Category score at each evaluated checkpoint of runs with intermediate checkpoints "
                       "(mean ± 95 % CI "
                       "over seeds).")
    out += shown.place("data efficiency", "data_efficiency", figures.lines_by_category(
        efficiency, "tokens_seen", "run_name", "pretraining tokens", "Score vs pretraining tokens", ranges, families),
        "no run has intermediate checkpoints")
    splits = analysis.biphasic(categories)
    if splits["clm_fraction"].between(0, 1, inclusive="neither").any():
        out += curve_table(splits, ["total_steps", "clm_fraction", "mask_ratio"], "Biphasic CLM -> MLM",
                           "Category score per CLM share at each budget (0 = MLM only; mean ± 95 % CI over seeds).")
        out += shown.place("biphasic", "biphasic", figures.lines_by_category(
            splits, "clm_fraction", ["total_steps", "mask_ratio"], "CLM share of the steps",
            "Score vs CLM share, per step budget and masking ratio", ranges, families,
            label=lambda key: f"{int(key[0]):,} steps, {key[1]:.0%} masking", anchor_note="MLM only (share 0)"),
            "no CLM -> MLM runs")
    else:
        shown.skipped.append("biphasic: no CLM -> MLM runs")
    ratios = analysis.masking_ratios(categories)
    if ratios["mask_ratio"].nunique() > 1:
        out += curve_table(ratios, ["run_name", "mask_ratio"], "Masking ratio",
                           "Pure MLM runs by masking ratio (mean ± 95 % CI over seeds).")
    cpt = analysis.continued_pretraining(categories)
    if not cpt.empty:
        out += curve_table(cpt, ["source", "added_steps"], "Continued pretraining",
                           "MLM continued from each source; 0 added steps is the source itself (mean ± 95 % CI over "
                           "seeds).")
        out += shown.place("continued pretraining", "continued_pretraining", figures.lines_by_category(
            cpt, "added_steps", "source", "added MLM steps", "Continued MLM pretraining by starting point", ranges,
            families, label=lambda source: f"from {source}", anchor_note="the starting checkpoint (0 added steps)"),
            "no continued-pretraining runs")
    else:
        shown.skipped.append("continued pretraining: no continued-pretraining runs")
    by_rate, rate_labels = lr_bins.binned(trials)  # a search's sampled rates: log-spaced bins
    out += lr_bins.lr_section(analysis.lr_sensitivity(by_rate), rate_labels)
    out += shown.place("learning-rate sensitivity", "lr_sensitivity", figures.lr_sensitivity(by_rate, families),
                       "fewer than two learning rates in the study (a line needs two or more)")
    swept, searched = analysis.with_params(trials), study_space(spec) or {}
    for axis in analysis.axes(swept):
        name = analysis.axis_name(axis)
        if (name in searched and searched[name].kind != "choice") or swept[axis].nunique() > MAX_AXIS_VALUES:
            continue  # a sampled range, a value per sample: `## Parameter importances` covers it
        table = analysis.axis_scores(swept, axis)
        if table.empty:
            continue
        out += axis_section(table, axis)
        out += shown.place(f"score vs {name}", f"swept_{name}", figures.axis_lines(table, axis, name, ranges, families),
                           "no scores", figures.swept_caption(name))
    out += importance_section(trials, searched or None)
    out += ["## Per task", ""] + task_sections(best, trials)
    return "\n".join(out + record.section + environment + shown.not_drawn()) + "\n", shown, terminal


def write_report(layout: StudyLayout) -> str:
    """Write `report.md` and the figures into the study; returns the report's location."""
    text, shown, terminal = report_and_figures(layout)
    path = layout.report
    if why := storage.not_a_file(path):  # a folder where report.md goes: named and left, never removed
        print(f"[report] {storage.display(path)} is {why.removesuffix(', not a file')}, not a file: the report is "
              "printed below, not written (move it away and run `sweeper report` again)", file=sys.stderr, flush=True)
    else:
        storage.write_text(path, text)
    shown.publish(layout)
    print("\n".join(terminal))  # a few lines; the tables are in the report
    print(f"[report] {storage.display(path)} ({len(shown.made)} figures in "
          f"{storage.display(layout.figures)})")
    return path
