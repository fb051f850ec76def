"""The report's figures as one set: each drawn (sweeper.report.figures), saved as a PNG and placed
in report.md with a one-line caption under it, or named under `## Figures not drawn` with the
reason; and, once the report is written, the figures of an earlier report that this one did not
draw are removed from the study's `figures/` (local folder or object store).

A local study's figures are drawn straight into its `figures/`; a study in an object store gets
them drawn into a temporary folder that `publish` uploads and then deletes, so `sweeper report`
leaves nothing outside the study.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from sweeper.report import figures
from sweeper.store import storage
from sweeper.store.layout import StudyLayout
from sweeper.store.quarantine import link_text

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
        figures.save(fig, drawing)
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
