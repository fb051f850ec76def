"""The result rows the report used, as a DataFrame or a file (`sweeper results`, `sweeper.results`).

The rows are those `report.md` reads (`study_history.read_record`: the last spec's trials and the
kept trials of earlier ones, one row per trial key), each with its `standing` column; `every`
adds the rows the report leaves out (`superseded`, `changed`), so a reader who wants the whole
store still sees which rows are current. Rows whose scores are not finite are among those the
report reads: it names them and keeps them out of its means (`data_problems`).
"""
from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd

from sweeper.report.study_history import read_record
from sweeper.store.layout import StudyLayout

FORMATS = ("csv", "json", "parquet")


def study_rows(layout: StudyLayout, every: bool = False) -> pd.DataFrame:
    """The rows the report reads, in the store's order (checkpoint, task, learning rate, seed),
    with `standing`; `every`: every recorded row (one per trial key) with its standing."""
    record = read_record(layout, {}, {})
    if every:
        rows = record.recorded
    else:
        rows = record.trials.assign(standing=record.recorded.loc[record.trials.index, "standing"])
    return rows.sort_index().reset_index(drop=True)


def text_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with list cells (`betas`) as JSON text, as a CSV or JSON reader reads them back."""
    out = frame.copy()
    for column in out.columns:
        if out[column].map(lambda v: isinstance(v, (list, tuple, np.ndarray))).any():
            out[column] = out[column].map(
                lambda v: json.dumps([float(x) for x in v]) if isinstance(v, (list, tuple, np.ndarray)) else v)
    return out


def rows_bytes(frame: pd.DataFrame, form: str) -> bytes:
    """`frame` in `form` (FORMATS): CSV with a header; JSON, an array of objects (times in ISO
    8601, UTC); Parquet with the store's column types."""
    if form == "csv":
        return text_cells(frame).to_csv(index=False).encode()
    if form == "json":
        return text_cells(frame).to_json(orient="records", date_format="iso", date_unit="ms").encode()
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()
