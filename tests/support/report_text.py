"""A study's report as the tests read it: its text and the figures drawn, without writing
report.md (`sweeper.report.writer.write_report` writes it)."""
from __future__ import annotations

from pathlib import Path

from sweeper.report.writer import report_and_figures
from sweeper.store.layout import StudyLayout


def build_report(layout: StudyLayout) -> tuple[str, list[Path]]:
    """The report text and the figures drawn (into `<study>/figures/`; for a study in an object
    store, into a temporary folder that is the caller's to delete: `write_report` uploads them)."""
    text, figure_set, _ = report_and_figures(layout)
    return text, figure_set.made
