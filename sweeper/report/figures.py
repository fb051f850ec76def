"""The report's figures (matplotlib). Each function returns the Figure it drew, or None when the
study has nothing to show for it (the report then says why); `FigureSet` saves them as PNGs.

The figures are one set: a checkpoint's colour is its objective family's (`objective_family`,
`FAMILY_COLOURS`) in every figure, and checkpoints of one family differ by marker, line style or
hatch (`member_styles`). Each figure has one legend, beside its panels, at 10 pt.

`FigureSet` places them: each drawn figure saved as a PNG and placed in report.md with a one-line
caption under it (`CAPTIONS`), or named under `## Figures not drawn` with the reason; and, once
the report is written, the figures of an earlier report that this one did not draw are removed
from the study's `figures/` (local folder or object store). A local study's figures are drawn
straight into its `figures/`; a study in an object store gets them drawn into a temporary folder
that `publish` uploads and then deletes, so `sweeper report` leaves nothing outside the study."""
from __future__ import annotations

import functools
import shutil
import sys
import tempfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.layout_engine import TightLayoutEngine
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
import numpy as np
import pandas as pd

from sweeper.report import analysis
from sweeper.report.analysis import ordered_categories
from sweeper.report.lr_bins import rate_text
from sweeper.contract import registry
from sweeper.store import storage
from sweeper.store.layout import StudyLayout
from sweeper.store.quarantine import link_text

# Files only: no display on clusters and CI. Switching after pyplot's import is allowed while no
# figure is open.
matplotlib.use("Agg")

UNREGISTERED_RANGE = (-100.0, 100.0)
"""Score range of a category no registered family reports (a plugin's study reported without its
SWEEPER_PLUGINS): wide enough for any metric x 100, so no interval is clipped wrongly."""

ScoreRanges = Mapping[str, tuple[float, float]]
"""Report category -> (lowest, highest) score."""


def score_ranges(trials: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """Per report category, the range its scores can take: the `FamilyInfo.score_range` of the
    families the trial rows name for it (`task_family`, `task_category`; the union when several
    share a category). A row without a registered family (written before the column, or by a
    plugin not loaded here) falls back to the registered families of its category."""
    families = trials["task_family"] if "task_family" in trials else pd.Series(None, index=trials.index, dtype=object)
    by_category: dict[str, list[tuple[float, float]]] = {}
    for info in registry.current().families.values():
        by_category.setdefault(info.category, []).append(info.score_range)
    ranges: dict[str, tuple[float, float]] = {}
    pairs = pd.DataFrame({"family": families, "category": trials["task_category"]}).drop_duplicates()
    for family, category in pairs.itertuples(index=False):
        info = registry.current().families.get(family) if isinstance(family, str) else None
        found = [info.score_range] if info is not None else by_category.get(category, [UNREGISTERED_RANGE])
        lows, highs = zip(*found, ranges.get(category, found[0]))
        ranges[category] = (min(lows), max(highs))
    return ranges


def range_of(category: str, ranges: ScoreRanges) -> tuple[float, float]:
    return ranges.get(category, UNREGISTERED_RANGE)


def clipped_interval(mean: pd.Series, half: pd.Series, score_range: tuple[float, float]) -> tuple[pd.Series, pd.Series]:
    """Lower and upper ends of mean ± half, clipped to the category's score range: an interval
    from few seeds can reach past the scale (down to -60 on an F1), which no score can."""
    low, high = score_range
    half = half.fillna(0)
    return (mean - half).clip(lower=low), (mean + half).clip(upper=high)


FAMILY_COLOURS = {"MLM": "tab:blue", "CLM": "tab:orange", "CLM -> MLM": "tab:green", "continued": "tab:purple",
                  "from elsewhere": "tab:gray"}
"""Objective family (`objective_family`) -> its colour, the same in every figure."""
OTHER_COLOURS = ("tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:red")
"""Colours of the other objectives' families (a plugin's `span-mlm`), picked by the name's CRC-32:
the same family gets the same colour in every figure and every study."""
PAPER_FAMILIES = {"mlm": "MLM", "clm": "CLM", "clm-mlm": "CLM -> MLM"}
CONTINUED, FROM_ELSEWHERE = "continued", "from elsewhere"
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", ":", "-.")
HATCHES = ("", "//", "..", "xx", "\\\\", "++", "--", "oo")
FONTS = {"font.size": 10, "legend.fontsize": 10, "legend.title_fontsize": 10, "axes.titlesize": 11,
         "axes.labelsize": 10, "xtick.labelsize": 10, "ytick.labelsize": 10, "figure.titlesize": 12}
"""Text sizes (points): legible with the PNG shown at 100 %."""
DPI = 120
"""The PNG's pixels per inch."""
LEGEND_PAD = 0.1
"""Inches of margin right of a legend beside the panels (and above and below one taller than them)."""


def objective_family(row) -> str:
    """A checkpoint's objective family, from its run columns (a Series or dict): "from elsewhere"
    for a checkpoint the study did not train (`analysis.is_external`; also one that states no
    objective: the study's own runs always do), "continued" for a run from another's checkpoint
    (`init_from`), else MLM, CLM, CLM -> MLM, or the objective's own name (a plugin's)."""
    source, init_from, objective = row.get("source"), row.get("init_from"), row.get("objective")
    if (isinstance(source, str) and source != analysis.STUDY_SOURCE) or not isinstance(objective, str):
        return FROM_ELSEWHERE
    if isinstance(init_from, str):
        return CONTINUED
    return PAPER_FAMILIES.get(objective, objective)


def family_colour(family: str) -> str:
    return FAMILY_COLOURS.get(family) or OTHER_COLOURS[zlib.crc32(family.encode()) % len(OTHER_COLOURS)]


def checkpoint_families(frame: pd.DataFrame) -> dict[str, str]:
    """checkpoint_id -> objective family, for every checkpoint of a trials (or analysis) frame."""
    runs = analysis.run_table(frame)
    return {row["checkpoint_id"]: objective_family(row) for _, row in runs.iterrows()}


@dataclass(frozen=True, slots=True)
class Style:
    """How one checkpoint (or series) is drawn: its family's colour, and the marker, line style and
    hatch that tell it from the others of its family."""

    family: str
    colour: str
    marker: str
    linestyle: str
    hatch: str


def family_rank(family: str) -> tuple[int, str]:
    order = list(FAMILY_COLOURS)
    return (order.index(family), "") if family in order else (len(order), family)


def member_styles(members: Mapping) -> dict:
    """member -> Style, in family order (MLM, CLM, CLM -> MLM, continued, from elsewhere, others),
    members of one family in the order given; the i-th member of a family gets the i-th marker,
    hatch and line style."""
    ordered = sorted(members, key=lambda member: family_rank(members[member]))  # stable: keeps the given order
    seen: dict[str, int] = {}
    styles = {}
    for member in ordered:
        family = members[member]
        i = seen[family] = seen.get(family, -1) + 1
        styles[member] = Style(family, family_colour(family), MARKERS[i % len(MARKERS)],
                               LINESTYLES[i % len(LINESTYLES)], HATCHES[i % len(HATCHES)])
    return styles


def tag(artists, family: str, member) -> None:
    """Name each artist's family and member in its gid (`family|member`, a series' key as its
    values joined by ', '): the tests read it."""
    text = ", ".join(map(str, member)) if isinstance(member, tuple) else str(member)
    for artist in artists:
        artist.set_gid(f"{family}|{text}")


def drawn(draw):
    """Draw the figure with the report's text sizes (FONTS)."""
    @functools.wraps(draw)
    def with_fonts(*args, **kwargs):
        with plt.rc_context(FONTS):
            return draw(*args, **kwargs)
    return with_fonts


def finish(fig: Figure, handles: list, labels: list[str], title: str) -> Figure:
    """Give the figure its one legend, right of the panels, and lay the panels out: the figure grows
    by the legend's width (and height, for a legend taller than the panels) and the panels are laid
    out left of it, at the size they had. Laid out at the PNG's size and resolution, the figure is
    then saved with the text metrics of its layout and drawn once; cropping to the legend
    (`bbox_inches="tight"`) drew it twice at another size."""
    fig.set_dpi(DPI)
    legend = fig.legend(handles, labels, loc="center left", frameon=False, title=title)
    box = legend.get_window_extent(fig.canvas.get_renderer())
    width, height = fig.get_size_inches()
    grown_width = width + box.width / DPI + LEGEND_PAD
    grown_height = max(height, box.height / DPI + 2 * LEGEND_PAD)
    below = (grown_height - height) / 2 / grown_height  # the panels stay centred beside a taller legend
    fig.set_size_inches(grown_width, grown_height)
    panels = width / grown_width
    lay_out(fig, rect=(0, below, panels, 1 - below))
    legend.set_bbox_to_anchor((panels, 0.5), transform=fig.transFigure)
    return fig


def lay_out(fig: Figure, rect=(0, 0, 1, 1)) -> None:
    """`fig.tight_layout` without the placeholder engine it leaves behind, which makes `savefig`
    draw the figure once more before drawing it (a figure with no engine is drawn once)."""
    TightLayoutEngine(rect=rect).execute(fig)


def save(fig: Figure, path) -> None:
    """The PNG; a figure with a legend beside its panels was sized for it (`finish`)."""
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def present(frame: pd.DataFrame) -> list[str]:
    return ordered_categories(frame["task_category"])


def members_of(frame: pd.DataFrame, column: str, families: Mapping[str, str]) -> dict:
    """Each value of `column` (in sorted order) -> the family of its checkpoint's last row."""
    last = frame.drop_duplicates(column, keep="last").sort_values(column)
    return {member: families.get(checkpoint, FROM_ELSEWHERE)
            for member, checkpoint in zip(last[column], last["checkpoint_id"])}


def bars(frame: pd.DataFrame, member: str, value: str, low_high, families: Mapping[str, str], ylabel: str,
         title: str, xlabel: str | None = None) -> Figure | None:
    """Grouped bars: per category a bar per `member` (in its style), with error bars from
    `low_high(rows) -> (below, above)`."""
    if frame.empty:
        return None
    categories, styles = present(frame), member_styles(members_of(frame, member, families))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(styles) * len(categories)), 4.2))
    width = 0.8 / len(styles)
    for i, (name, style) in enumerate(styles.items()):
        rows = frame[frame[member] == name].set_index("task_category").reindex(categories)
        drawn_bars = ax.bar([c + i * width for c in range(len(categories))], rows[value], width,
                            yerr=np.nan_to_num(np.vstack(low_high(rows))).clip(min=0), capsize=3, color=style.colour,
                            hatch=style.hatch, edgecolor="black", linewidth=0.6)
        tag(drawn_bars.patches, style.family, name)
    ax.set_xticks([c + 0.4 - width / 2 for c in range(len(categories))], categories)
    ax.set_ylabel(ylabel)
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.set_title(title)
    handles = [Patch(facecolor=s.colour, hatch=s.hatch, edgecolor="black", linewidth=0.6) for s in styles.values()]
    return finish(fig, handles, [f"{name} ({s.family})" for name, s in styles.items()], "colour: objective family")


@drawn
def category_bars(final: pd.DataFrame, ranges: ScoreRanges, families: Mapping[str, str]) -> Figure | None:
    """Best-point test score per final checkpoint and category, with 95 % intervals clipped to the
    category's score range (`score_ranges`)."""
    def errors(rows):
        mean, half = rows["mean"].to_numpy(), rows["ci95"].fillna(0).to_numpy()
        low, high = np.array([range_of(c, ranges) for c in rows.index]).T
        return np.minimum(half, mean - low), np.minimum(half, high - mean)

    return bars(final, "checkpoint_id", "mean", errors, families,
                "test score at best point\n(mean over seeds, 95 % CI)", "Category scores per checkpoint")


@drawn
def stability_bars(table: pd.DataFrame, lr_range: str, families: Mapping[str, str]) -> Figure | None:
    """Paper Fig. 5: spread of centred scores over seeds x learning rates, per run, with its 95 %
    interval over seeds (`analysis.stability`; never below 0)."""
    return bars(table, "run_name", "spread", lambda rows: (rows["spread"] - rows["spread_low"],
                                                           rows["spread_high"] - rows["spread"]),
                families, "std of centred test score\n(points, 95 % CI)", "Fine-tuning stability (smaller "
                                                                          "= more stable)",
                f"spread over seeds x learning rates {lr_range}")


def line_panel(ax, rows: pd.DataFrame, x: str, y: str, half: str, style: Style, member, families: Mapping[str, str],
               score_range: tuple[float, float]) -> set[str]:
    """One series in one panel: its line and band in the series' style, each point's marker in its
    own checkpoint's family colour. Returns the families of its points."""
    rows = rows.sort_values(x)
    line = ax.plot(rows[x], rows[y], color=style.colour, linestyle=style.linestyle)
    low, high = clipped_interval(rows[y], rows[half], score_range)
    band = ax.fill_between(rows[x], low, high, color=style.colour, alpha=0.15)
    tag([*line, band], style.family, member)
    point_families = rows["checkpoint_id"].map(lambda c: families.get(c, FROM_ELSEWHERE))
    for family in point_families.unique():
        points = rows[point_families == family]
        markers = ax.plot(points[x], points[y], linestyle="none", marker=style.marker, color=family_colour(family))
        tag(markers, family, member)
    return set(point_families)


def line_legend(styles: dict, label, point_families: set[str], anchor_note: str | None) -> tuple[list, list[str]]:
    """A legend entry per series, then one per family whose points sit on another family's line."""
    handles = [Line2D([], [], color=s.colour, linestyle=s.linestyle, marker=s.marker) for s in styles.values()]
    labels = [f"{label(member)} ({s.family})" for member, s in styles.items()]
    for family in sorted(point_families - {s.family for s in styles.values()}, key=family_rank):
        handles.append(Line2D([], [], linestyle="none", marker="o", color=family_colour(family)))
        labels.append(f"{family}: {anchor_note or 'its own checkpoint'}")
    return handles, labels


@drawn
def lines_by_category(frame: pd.DataFrame, x: str, group, xlabel: str, title: str, ranges: ScoreRanges,
                      families: Mapping[str, str], label=str, anchor_note: str | None = None,
                      log_x: bool = False, legend_title: str = "colour: objective family") -> Figure | None:
    """One panel per category, one line per value of `group` (a column, or a list of columns: a
    series per combination, never joined to another), with 95 % bands clipped to the category's
    score range. A line takes the family of its last point; each marker its own checkpoint's
    (the MLM-only point at CLM share 0, a continued run's starting checkpoint)."""
    if frame.empty:
        return None
    keys = [group] if isinstance(group, str) else list(group)
    frame = frame.assign(series=list(zip(*(frame[k] for k in keys))) if len(keys) > 1 else frame[group])
    styles = member_styles(members_of(frame.sort_values(x), "series", families))
    categories, points = present(frame), set()
    fig, axes = plt.subplots(1, len(categories), figsize=(4.2 * len(categories), 3.8), squeeze=False)
    for ax, category in zip(axes[0], categories):
        for member, rows in frame[frame["task_category"] == category].groupby("series", sort=False):
            points |= line_panel(ax, rows, x, "mean", "ci95", styles[member], member, families,
                                 range_of(category, ranges))
        ax.set_title(category)
        ax.set_xlabel(xlabel)
        if log_x:
            ax.set_xscale("log")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test score at best point")
    fig.suptitle(title)
    return finish(fig, *line_legend(styles, label, points, anchor_note), legend_title)


def lr_sensitivity(trials: pd.DataFrame, families: Mapping[str, str]) -> Figure | None:
    """Validation score (mean over seeds) against the learning rate, per final checkpoint and
    category; None below two learning rates."""
    per_lr = analysis.lr_sensitivity(trials)
    if per_lr.empty:
        return None
    final = trials[trials["checkpoint_id"].isin(set(per_lr["checkpoint_id"]))]
    fig = lines_by_category(per_lr.rename(columns={"std": "ci95"}), "learning_rate", "checkpoint_id",
                            "fine-tuning learning rate", "Validation score vs learning rate (band: std over seeds)",
                            score_ranges(final), families, log_x=True)
    fig.axes[0].set_ylabel("validation score (mean over seeds)")
    for ax in fig.axes:  # a few labelled ticks (1e-4, 2e-4, 5e-4), none on minor ticks: labels never overlap
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0), numticks=6))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: rate_text(value)))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.tick_params(axis="x", labelrotation=30)
    return fig


@drawn
def axis_lines(table: pd.DataFrame, axis: str, name: str, ranges: ScoreRanges,
               families: Mapping[str, str]) -> Figure | None:
    """Test score against a swept field's value (`analysis.axis_scores`): one panel per task, one
    line per checkpoint, 95 % bands clipped to the task's score range. Values that are not single
    numbers (betas) sit at even places along the axis, labelled."""
    if table.empty:
        return None
    tasks, values = sorted(table["task"].unique()), sorted(table[axis].unique())
    numeric = all(isinstance(v, (int, float, np.integer, np.floating)) for v in values)
    place = {v: (float(v) if numeric else i) for i, v in enumerate(values)}
    styles = member_styles(members_of(table, "checkpoint_id", families))
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.8), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        rows = table[table["task"] == task].assign(x=lambda t: t[axis].map(place))
        for checkpoint, line_rows in rows.groupby("checkpoint_id"):
            line_panel(ax, line_rows, "x", "test_mean", "test_ci95", styles[checkpoint], checkpoint, families,
                       range_of(rows["task_category"].iloc[0], ranges))
        if not numeric:
            ax.set_xticks(list(place.values()), [str(list(v)) if isinstance(v, tuple) else str(v) for v in values],
                          fontsize=9)
        ax.set_title(task)
        ax.set_xlabel(f"finetuning.{name}")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test score\n(mean over seeds, 95 % CI)")
    fig.suptitle(f"Score vs {name} (each value at its best learning rate and other swept values)")
    return finish(fig, *line_legend(styles, str, set(), None), "colour: objective family")


# --- the figures as one set: placed in report.md, captioned, saved; stale ones removed ------------

CAPTIONS = {
    "category_scores": "Bars: per category, each final checkpoint's test score at its best point (mean over seeds, "
                       "whiskers: 95 % interval); higher is better. Colour: objective family; hatch: which "
                       "checkpoint of that family.",
    "stability": "Bars: per category, each final run's spread of centred test scores over seeds x learning rates "
                 "(whiskers: 95 % interval over seeds); a lower bar is a run that fine-tunes more reliably. Colour: "
                 "objective family; hatch: which run of that family.",
    "data_efficiency": "Lines: per category, each run's score at its evaluated checkpoints against the tokens it had "
                       "seen (band: 95 % interval over seeds); the earlier a line rises, the less data the objective "
                       "needs. Colour: objective family; line style and marker: which run.",
    "biphasic": "Lines: one per (step budget, masking ratio), score against the share of steps trained with CLM "
                "before the switch to MLM (band: 95 % interval over seeds); the point at share 0 is that ratio's "
                "MLM-only run, drawn in MLM's colour, and no line joins two ratios.",
    "continued_pretraining": "Lines: one per starting checkpoint, score against the MLM steps added on top of it "
                             "(band: 95 % interval over seeds); the point at 0 is the starting checkpoint itself, in "
                             "its own family's colour.",
    "lr_sensitivity": "Lines: each final checkpoint's validation score (mean over seeds; band: std over seeds) "
                      "against the fine-tuning learning rate, log scale; a flatter line is a checkpoint less "
                      "sensitive to the learning rate. Colour: objective family.",
}
"""Figure file stem -> the caption written under it (`swept_<field>` figures: `swept_caption`)."""


def swept_caption(name: str) -> str:
    return (f"Lines: per task, each checkpoint's test score at its best point with each value of "
            f"`finetuning.{name}` (band: 95 % interval over seeds); where a line peaks is the best value for that "
            "checkpoint. Colour: objective family.")


@dataclass
class FigureSet:
    """The figures of one report: where they are drawn, those drawn, those not drawn and why."""

    folder: Path
    temporary: bool = False
    """The folder is a temporary one (a study in an object store): `publish` uploads and deletes it."""
    made: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    blocked: str | None = None
    """Why the study's `figures/` is not written (a link out of the study, not a folder): the
    figures are drawn into a temporary folder, then dropped (docs/security.md)."""

    @classmethod
    def for_study(cls, layout: StudyLayout) -> FigureSet:
        if storage.is_remote(layout.root):
            return cls(Path(tempfile.mkdtemp(prefix="sweeper-figures-")), temporary=True)
        folder = Path(layout.figures)
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            why = link_text(str(folder)) if folder.is_symlink() else "not a folder"
            return cls(Path(tempfile.mkdtemp(prefix="sweeper-figures-")), temporary=True,
                       blocked=f"`figures/` is {why}: no figure was written (a report writes inside its study only)")
        folder.mkdir(parents=True, exist_ok=True)
        return cls(folder)

    def place(self, name: str, stem: str, fig, why_not: str, caption: str | None = None) -> list[str]:
        """report.md's lines for one figure: the image and its caption under it; none when `fig`
        is None (the figure is then listed as not drawn, with `why_not`)."""
        if fig is None:
            self.skipped.append(f"{name}: {why_not}")
            return []
        path = self.folder / f"{stem}.png"
        drawing = self.folder / f".{stem}.tmp.png"
        save(fig, drawing)
        if self.blocked:  # drawn (and closed) to no end: the report says why below
            return []
        drawing.replace(path)  # a link at `path` is replaced, never written through
        self.made.append(path)
        return [f"![{name}](figures/{path.name})", "", f"*{caption or CAPTIONS[stem]}*", ""]

    def not_drawn(self) -> list[str]:
        """`## Figures not drawn`: each with its reason (no lines when every figure was drawn)."""
        skipped = ([f"every figure: {self.blocked}"] if self.blocked else []) + self.skipped
        if not skipped:
            return []
        return ["## Figures not drawn", "", *(f"- {line}" for line in skipped), ""]

    def publish(self, layout: StudyLayout) -> None:
        """Upload the figures (object store), then remove every PNG in the study's `figures/` that
        this report did not draw: a figure of an earlier report would otherwise stay beside a
        report that says it is not drawn."""
        if self.blocked:
            print(f"[report] {self.blocked}", file=sys.stderr, flush=True)
            shutil.rmtree(self.folder, ignore_errors=True)
            return
        if storage.is_remote(layout.root):
            for path in self.made:
                storage.write_bytes(storage.join(layout.figures, path.name), path.read_bytes())
        drawn = {path.name for path in self.made}
        for name in storage.list_names(layout.figures, folders=False):
            if name.endswith(".png") and name not in drawn:
                storage.remove(storage.join(layout.figures, name))
        if self.temporary:
            shutil.rmtree(self.folder, ignore_errors=True)
