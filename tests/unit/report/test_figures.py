"""The report's figures as one set, drawn from one synthetic trials table that has every objective
family: MLM at two masking ratios (one with intermediate checkpoints), CLM, CLM -> MLM at two
shares and both ratios, an MLM run continued from the CLM run, and a checkpoint from elsewhere;
two learning rates and a swept weight decay, so every figure is drawn.

Each drawn artist names its family and member in its gid (`family|member`); the colours are read
from the matplotlib objects themselves.
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from datetime import datetime, UTC

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex

from sweeper.report import analysis, figures
from report_text import build_report
from sweeper.spec.study import PAPER_STABILITY_RANGE
from sweeper.store.layout import StudyLayout
from sweeper.store.results import PRETRAINING, TRIALS, read_trials, write_rows

TASKS = {"sc1": "SC", "tc1": "TC"}
LRS, SEEDS = (1e-4, 3e-4), range(3)


def checkpoint(name: str, objective: str | None, ratio: float | None, share: float | None, step: int = 100,
               total: int | None = 100, init_from: str | None = None, source: str = "study") -> dict:
    return {"checkpoint_id": name if step == total or total is None else f"{name}@{step}", "run_name": name,
            "run_key": f"key-{name}", "objective": objective, "mask_ratio": ratio, "clm_fraction": share,
            "checkpoint_step": step, "total_steps": total, "tokens_seen": step * 2048, "init_from": init_from,
            "steps_before": 0, "source": source, "parameters": 1_000_000}


CHECKPOINTS = [
    checkpoint("m-mlm40-100", "mlm", 0.4, 0.0), checkpoint("m-mlm40-100", "mlm", 0.4, 0.0, step=50),
    checkpoint("m-mlm20-100", "mlm", 0.2, 0.0),
    checkpoint("m-clm-100", "clm", None, 1.0),
    checkpoint("m-clm-25-mlm40-100", "clm-mlm", 0.4, 0.25), checkpoint("m-clm-50-mlm40-100", "clm-mlm", 0.4, 0.5),
    checkpoint("m-clm-50-mlm20-100", "clm-mlm", 0.2, 0.5),
    checkpoint("m-clm-100-mlm40-50", "mlm", 0.4, 0.0, total=50, step=50, init_from="m-clm-100"),
    checkpoint("elsewhere-bert", None, None, None, step=0, total=None, source="hf:someone/bert"),
]
FAMILY = {"m-mlm40-100": "MLM", "m-mlm40-100@50": "MLM", "m-mlm20-100": "MLM", "m-clm-100": "CLM",
          "m-clm-25-mlm40-100": "CLM -> MLM", "m-clm-50-mlm40-100": "CLM -> MLM", "m-clm-50-mlm20-100": "CLM -> MLM",
          "m-clm-100-mlm40-50": "continued", "elsewhere-bert": "from elsewhere"}
"""What each checkpoint's family is, written out by hand."""


def trial_rows() -> list[dict]:
    rng = np.random.default_rng(0)
    rows = []
    for i, ckpt in enumerate(CHECKPOINTS):
        for task, category in TASKS.items():
            for lr in LRS:
                for decay in (0.0, 0.1):
                    for seed in SEEDS:
                        score = 50 + i + (2 if lr == 3e-4 else 0) + 10 * decay + rng.normal(0, 1)
                        rows.append({**ckpt, "study": "figures", "task": task, "task_category": category,
                                     "trial_key": f"{ckpt['checkpoint_id']}/{task}/{lr}/{decay}/{seed}",
                                     "metric": "accuracy", "search_mode": "grid", "learning_rate": lr, "seed": seed,
                                     "params": json.dumps({"weight_decay": decay}), "weight_decay": decay,
                                     "status": "ok", "validation_score": score + rng.normal(0, 0.1),
                                     "test_score": score, "finished_at": datetime.now(UTC)})
    return rows


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    layout = StudyLayout(str(tmp_path_factory.mktemp("figures")))
    write_rows(layout, TRIALS, trial_rows())
    write_rows(layout, PRETRAINING, [{"study": "figures", "run_name": "m-clm-100", "run_key": "key-m-clm-100",
                                      "objective": "clm", "replicate": 0, "step": step, "phase": "clm",
                                      "loss": 10 / (1 + step), "lr": 1e-3, "tokens_seen": step * 2048,
                                      "tokens_per_s": 1e4} for step in range(1, 101, 10)])
    return layout


@pytest.fixture(scope="module")
def drawn(study):
    """Every figure of the report, drawn from the one table: name -> Figure."""
    trials = read_trials(study).to_pandas()
    families = figures.checkpoint_families(trials)
    best = analysis.best_params_table(trials)
    categories = analysis.category_scores(trials, best)
    ranges = figures.score_ranges(trials)
    stability, used = analysis.stability(trials, PAPER_STABILITY_RANGE)
    swept = analysis.with_params(trials)
    out = {
        "category_scores": figures.category_bars(analysis.final_only(categories), ranges, families),
        "stability": figures.stability_bars(stability, used, families),
        "data_efficiency": figures.lines_by_category(analysis.data_efficiency(categories), "tokens_seen", "run_name",
                                                     "tokens", "t", ranges, families),
        "biphasic": figures.lines_by_category(analysis.biphasic(categories), "clm_fraction",
                                              ["total_steps", "mask_ratio"], "share", "t", ranges, families),
        "continued_pretraining": figures.lines_by_category(analysis.continued_pretraining(categories), "added_steps",
                                                           "source", "steps", "t", ranges, families),
        "lr_sensitivity": figures.lr_sensitivity(trials, families),
        "swept_weight_decay": figures.axis_lines(analysis.axis_scores(swept, "params.weight_decay"),
                                                 "params.weight_decay", "weight_decay", ranges, families),
    }
    assert all(fig is not None for fig in out.values()), [name for name, fig in out.items() if fig is None]
    yield out
    for fig in out.values():
        figures.plt.close(fig)


def tagged(fig):
    """(family, member, colour) of every artist a figure function tagged."""
    for ax in fig.axes:
        for artist in [*ax.patches, *ax.lines, *ax.collections]:
            if artist.get_gid():
                family, member = artist.get_gid().split("|", 1)
                colour = artist.get_facecolor() if not hasattr(artist, "get_color") else artist.get_color()
                colour = np.asarray(colour).reshape(-1, 4)[0] if not isinstance(colour, str) else colour
                yield family, member, to_hex(colour, keep_alpha=False)


def test_checkpoint_families_as_written_out():
    trials = pd.DataFrame(trial_rows())
    assert figures.checkpoint_families(trials) == FAMILY
    assert figures.objective_family({"objective": "clm", "source": "hf:org/clm"}) == "from elsewhere"
    assert figures.objective_family({"objective": "span-mlm"}) == "span-mlm"
    assert figures.family_colour("span-mlm") == figures.family_colour("span-mlm") in figures.OTHER_COLOURS


def test_each_family_has_one_colour_in_every_figure(drawn):
    colours, seen_in = defaultdict(set), defaultdict(set)
    for name, fig in drawn.items():
        found = list(tagged(fig))
        assert found, name
        for family, member, colour in found:
            colours[family].add(colour)
            seen_in[family].add(name)
            if member in FAMILY and name not in ("biphasic", "continued_pretraining"):  # a checkpoint's own artist
                assert family == FAMILY[member], (name, member, family)
    assert {family: sorted(c) for family, c in colours.items()} == {
        family: [to_hex(figures.FAMILY_COLOURS[family])] for family in figures.FAMILY_COLOURS}
    assert len({c for cs in colours.values() for c in cs}) == len(figures.FAMILY_COLOURS), "families differ in colour"
    assert seen_in["MLM"] >= {"category_scores", "stability", "data_efficiency", "biphasic", "lr_sensitivity"}
    assert seen_in["CLM"] >= {"category_scores", "stability", "continued_pretraining", "lr_sensitivity"}


def test_one_legend_per_figure_beside_its_panels_at_ten_points(drawn):
    for name, fig in drawn.items():
        assert len(fig.legends) == 1 and not any(ax.get_legend() for ax in fig.axes), name
        legend = fig.legends[0]
        assert all(text.get_fontsize() >= 10 for text in legend.get_texts()), name
        labels = [text.get_text() for text in legend.get_texts()]
        assert all(re.search(r"\((MLM|CLM|CLM -> MLM|continued|from elsewhere)\)|: ", label) for label in labels), (
            labels
        )


def test_checkpoints_of_one_family_differ_by_style(drawn):
    bars = defaultdict(set)
    for family, member, _ in tagged(drawn["category_scores"]):
        bars[family].add(member)
    hatches = {}
    for patch in drawn["category_scores"].axes[0].patches:
        if patch.get_gid():
            hatches.setdefault(patch.get_gid(), set()).add(patch.get_hatch() or "")
    mlm = [gid for gid in hatches if gid.startswith("MLM|")]
    assert len(mlm) == 2 and len({next(iter(hatches[gid])) for gid in mlm}) == 2, hatches


def test_no_biphasic_line_joins_two_masking_ratios(drawn, study):
    trials = read_trials(study).to_pandas()
    splits = analysis.biphasic(analysis.category_scores(trials))
    fig = drawn["biphasic"]
    lines = [line for ax in fig.axes for line in ax.lines
             if line.get_gid() and line.get_linestyle() != "None" and len(line.get_xdata()) > 1]
    assert len(lines) == 2 * 2, "one line per (budget, ratio) in each of the 2 panels"
    for ax in fig.axes:
        category = ax.get_title()
        for line in ax.lines:
            if not line.get_gid() or line.get_linestyle() == "None":
                continue
            budget, ratio = map(float, line.get_gid().split("|", 1)[1].split(", "))  # the series: (budget, ratio)
            series = splits[(splits["task_category"] == category) & (splits["total_steps"] == budget)
                            & (splits["mask_ratio"] == ratio)].sort_values("clm_fraction")
            assert list(line.get_xdata()) == list(series["clm_fraction"]), (category, budget, ratio)
            assert list(line.get_ydata()) == pytest.approx(list(series["mean"]))
            assert len(set(line.get_xdata())) == len(line.get_xdata()), "no vertical segment"
    # The MLM-only points at share 0 are marked in MLM's colour, each on its own ratio's line.
    zero = [(artist.get_gid(), to_hex(artist.get_color())) for ax in fig.axes for artist in ax.lines
            if artist.get_gid() and artist.get_linestyle() == "None" and 0.0 in list(artist.get_xdata())]
    assert len(zero) == 2 * 2 and {colour for _, colour in zero} == {to_hex(figures.FAMILY_COLOURS["MLM"])}


@pytest.mark.long  # a whole report, every figure drawn: 5-7 s
def test_every_drawn_figure_has_a_caption_in_the_report(study):
    text, made = build_report(study)
    assert {p.name for p in made} == {"category_scores.png", "stability.png", "data_efficiency.png", "biphasic.png",
                                      "continued_pretraining.png", "lr_sensitivity.png", "swept_weight_decay.png",
                                      "pretraining_loss.png"}
    lines = text.splitlines()
    for path in made:
        at = lines.index(next(line for line in lines if line.endswith(f"(figures/{path.name})")))
        caption = next(line for line in lines[at + 1:] if line.strip())
        assert caption.startswith("*") and caption.endswith("*") and len(caption) > 60, (path.name, caption)
    assert "## Figures not drawn" not in text


def test_the_report_says_why_the_learning_rate_figure_is_not_drawn(tmp_path):
    layout = StudyLayout(str(tmp_path))
    # One rate, and three checkpoints: the report's other figures need not be many to be drawn.
    kept = {"m-mlm40-100", "m-clm-100", "m-clm-25-mlm40-100"}
    write_rows(layout, TRIALS, [row for row in trial_rows() if row["learning_rate"] == LRS[0]
                                and row["checkpoint_id"] in kept])
    text, made = build_report(layout)
    assert "lr_sensitivity.png" not in {p.name for p in made}
    assert "- learning-rate sensitivity: fewer than two learning rates" in text.split("## Figures not drawn")[1]
