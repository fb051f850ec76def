"""The pretraining loss curves, from the stored `pretraining` rows: one line per run of the
study's current plan, loss against step. A run that branched from another's state
(`pretraining.share_prefixes`, sweeper.plan.branches) stored only its own steps; its line shows
its whole history, the trunk's rows up to the branch step drawn dashed (not trained by the run
itself, but the steps its weights went through) and its own solid."""
from __future__ import annotations

# The backend (Agg) is set by sweeper.report.figures, imported below, before any figure is drawn.
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from sweeper.plan.branches import Branch, shared_prefixes
from sweeper.report.figures import DPI, FigureSet, drawn, lay_out
from sweeper.store.layout import StudyLayout
from sweeper.store.results import read_table
from sweeper.store.schemas import PRETRAINING

CAPTION = ("Lines: each pretraining run's training loss against its step (log scale when it spans a decade or "
           "more); a run that started "
           "from another run's state (`pretraining.share_prefixes`) shows that run's steps before its branch "
           "point dashed and its own solid.")


def current_rows(rows: pd.DataFrame, run_keys: dict[str, str] | None) -> pd.DataFrame:
    """One row per (run, step, phase): the current plan's runs only (their run keys; without a
    readable plan, every run's), a step written twice (a resumed run) read once, the later."""
    if rows.empty:
        return rows
    if run_keys is not None:
        rows = rows[rows["run_key"] == rows["run_name"].map(run_keys)]
    return rows.drop_duplicates(["run_name", "step", "phase"], keep="last").sort_values(["run_name", "step"])


def histories(rows: pd.DataFrame, branches: dict[str, Branch]) -> dict[str, tuple[pd.DataFrame, pd.DataFrame]]:
    """Per run: the steps before it (its trunk's history up to the branch step, recursively; empty
    for a run from scratch) and its own rows."""
    own = {run: frame for run, frame in rows.groupby("run_name", sort=True)}

    def before(run: str) -> pd.DataFrame:
        branch = branches.get(run)
        if branch is None or branch.trunk not in own:
            return rows.iloc[0:0]
        trunk = pd.concat([before(branch.trunk), own[branch.trunk]])
        return trunk[trunk["step"] <= branch.step]

    return {run: (before(run), frame) for run, frame in own.items()}


@drawn
def loss_curves(rows: pd.DataFrame, branches: dict[str, Branch]) -> Figure | None:
    """The figure (None without a stored pretraining row)."""
    if rows.empty:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=DPI)  # laid out at the PNG's resolution
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    handles, labels = [], []
    for i, (run, (trunk, frame)) in enumerate(histories(rows, branches).items()):
        colour = colours[i % len(colours)]
        if not trunk.empty:
            joined = pd.concat([trunk, frame.iloc[:1]])  # the dashed part meets the solid one
            # On top (zorder): the trunk's own solid line runs under it, the same steps.
            ax.plot(joined["step"], joined["loss"], color=colour, linestyle="--", zorder=3)
        ax.plot(frame["step"], frame["loss"], color=colour)
        handles.append(Line2D([], [], color=colour))
        branch = branches.get(run)
        labels.append(run + (f" (from {branch.trunk} at step {branch.step:,})" if branch and not trunk.empty else ""))
    if any(not trunk.empty for trunk, _ in histories(rows, branches).values()):
        handles.append(Line2D([], [], color="grey", linestyle="--"))
        labels.append("steps of the run it branched from")
    ax.set_xlabel("pretraining step")
    ax.set_ylabel("training loss")
    if (rows["loss"] > 0).all() and rows["loss"].max() > 10 * rows["loss"].min():  # a decade or more: log
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.set_title("Pretraining loss")
    ax.legend(handles, labels, fontsize="small", loc="upper right")
    lay_out(fig)
    return fig


def loss_section(layout: StudyLayout, loaded, shown: FigureSet, noted: dict[str, str]) -> list[str]:
    """The pretraining loss figure from the stored rows (the current plan's runs; a branched run
    with its trunk's steps: sweeper.report.pretraining_curves)."""
    keys = {run.name: run.run_key for run in loaded.plan.runs} if loaded is not None else None
    rows = current_rows(read_table(layout, PRETRAINING, noted).to_pandas(), keys)
    branches = shared_prefixes(loaded.spec, loaded.plan.runs) if loaded is not None else {}
    return shown.place("pretraining loss", "pretraining_loss", loss_curves(rows, branches),
                       "no pretraining rows stored (the study pretrains nothing, or none has logged a step)",
                       CAPTION)
