"""Recorded rows whose numbers cannot be read as scores: named, counted, and kept out of every
mean and figure (`sweeper report` and `sweeper status` say so).

A trial that ran to its end (`ok`) has a finite validation and test score: the loop marks a
trial whose loss stops being finite `diverged` (its scores null). An `ok` row with a NaN or an
infinite score (a metric that broke on a degenerate split, a part edited or written by another
tool) would make a mean infinite or NaN, and a figure's interval negative; a `stopped` row's
infinite validation score would win a search. Such rows are a data problem, not an outcome.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

SCORES = ("validation_score", "test_score")
LISTED = 6
"""Rows named one by one (then a count)."""


def non_finite(trials: pd.DataFrame) -> pd.Series:
    """Rows with a score that is not a number: an `ok` row whose validation or test score is not
    finite (NaN, null, +-inf), any other row with an infinite one."""
    if trials.empty:
        return pd.Series(False, index=trials.index)
    scores = trials[list(SCORES)].apply(pd.to_numeric, errors="coerce").astype(float)
    infinite = np.isinf(scores).any(axis=1)
    return ((trials["status"] == "ok") & ~np.isfinite(scores).all(axis=1)) | infinite


def non_finite_text(trials: pd.DataFrame) -> str:
    """One line naming the rows of `non_finite` ('' when none)."""
    rows = trials[non_finite(trials)]
    if rows.empty:
        return ""
    named = [f"{r['checkpoint_id']} / {r['task']} / seed {r['seed']} (trial {r['trial_key']}: validation "
             f"{r['validation_score']}, test {r['test_score']})" for r in rows.head(LISTED).to_dict("records")]
    more = f", and {len(rows) - LISTED} more" if len(rows) > LISTED else ""
    return (f"{len(rows)} recorded trial(s) have scores that are not finite numbers (NaN or infinite), kept out of "
            f"every mean, table and figure: {'; '.join(named)}{more}")
