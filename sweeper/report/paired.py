"""The paired tests a part of a finding runs over its units' differences (the last axis: seeds
or pretraining runs; any axes before it are tested apart): the t-test, the skew-corrected t, the
exact sign-flip test, the skew-sign test that needs both (the default, `VerdictConfig.test`) and
the Wilcoxon signed-rank test, and what skewed differences do to their error rate in each design
(docs/statistics.md, "Skewed differences")."""
from __future__ import annotations

import functools
import itertools
import math

import numpy as np
from scipy import stats


def adjusted_skewness(values: np.ndarray) -> np.ndarray:
    """The adjusted sample skewness G1 over the last axis, `scipy.stats.skew(values, axis=-1,
    bias=False)` to rounding (a test checks): NaN where the values do not vary. Written out
    because scipy's per-call input handling costs ~1 ms, against microseconds for the sums, and
    a report's robustness card and the calibrations call it thousands of times."""
    values = np.asarray(values, dtype=float)
    n = values.shape[-1]
    mean = values.mean(axis=-1, keepdims=True)
    deviations = values - mean
    m2, m3 = (deviations ** 2).mean(axis=-1), (deviations ** 3).mean(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        g = m3 / m2 ** 1.5 * (math.sqrt((n - 1.0) * n) / (n - 2.0) if n > 2 else 1.0)
    # scipy's test for values that do not vary (rounding of an equal set's mean and deviations).
    return np.where(m2 <= (np.finfo(float).resolution * mean[..., 0]) ** 2, np.nan, g)


def paired_t(differences: np.ndarray, shift: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """One-sided paired t-tests of the mean of `differences` (last axis: seeds) against `shift`:
    (p for 'above shift', p for 'below shift'). NaN where the seeds do not vary (no test)."""
    differences = np.asarray(differences, dtype=float)
    n = differences.shape[-1]
    sd = differences.std(axis=-1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(sd > 0, (differences.mean(axis=-1) - shift) / (sd / np.sqrt(n)), np.nan)
    return stats.t.sf(t, n - 1), stats.t.cdf(t, n - 1)


SKEW_UNITS = 6
"""Fewest units the skewness correction runs on; below, the plain t-test. Over 5 units (the
paper's seeds) the sample skewness is so noisy that the larger p cost most of the power at
effects of 3 noise SDs (finding 1: 62 % against 100 %; tests/unit/report/test_verdict_calibration.py's
planted effects, measured), for little: skew is a property of runs, not of seed noise."""


def skew_corrected_t(differences: np.ndarray, shift: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """One-sided tests of the mean like `paired_t`, robust to skewed differences: per direction the
    larger p of the paired t-test and of Hall's (1992) monotone form of Johnson's (1978) skewness-
    corrected t (from SKEW_UNITS units), T = sqrt(n) (u + g u^2 / 3 + g^2 u^3 / 27 + g / (6 n)),
    u = (mean - shift) / SD and g the adjusted sample skewness (scipy's `skew(bias=False)`), read on Student's t with n
    - 1 degrees of freedom. A skewed difference (one arm with occasional bad runs) makes the t-test's
    tail on the short side too light; the correction moves it, and the larger p keeps the t-test's
    where the correction's noisy skewness would make a tail lighter still. Measured false verdicts
    per finding (tests/unit/report/test_skew_calibration.py, docs/statistics.md): at most the
    t-test's under normal and t3 differences; under centred-exponential ones 4.3-4.7 % (t: 8.4-
    9.2 %) for one part at 12-15 runs, but above 5 % below that (the t-test's below 6) and for
    three parts (`SKEWED_RATES`)."""
    differences = np.asarray(differences, dtype=float)
    n = differences.shape[-1]
    t_above, t_below = paired_t(differences, shift)
    if n < SKEW_UNITS:
        return t_above, t_below
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.nan_to_num(adjusted_skewness(differences))
        u = (differences.mean(axis=-1) - shift) / differences.std(axis=-1, ddof=1)
        corrected = math.sqrt(n) * (u + g * u ** 2 / 3 + g ** 2 * u ** 3 / 27 + g / (6 * n))
    return np.fmax(t_above, stats.t.sf(corrected, n - 1)), np.fmax(t_below, stats.t.cdf(corrected, n - 1))


@functools.cache
def _signs(n: int) -> np.ndarray:
    """Every sign vector of length n, as columns (n, 2^n)."""
    return np.array(list(itertools.product([-1.0, 1.0], repeat=n))).T.reshape(n, 2 ** n)


def sign_flip(differences: np.ndarray, shift: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Exact one-sided sign-flip (permutation) tests of `differences` (last axis: units) against
    `shift`, like `paired_t`: the share of the 2^n sign vectors whose signed sum is at least
    (above) or at most (below) the observed one, the observed included. Exact when the
    differences are symmetric about `shift` (the t statistic is monotone in the signed sum, so the
    studentized test is the same); its smallest one-sided p is 2^-n. All 2^n sums are counted by
    meeting in the middle: the sums of each half, one half sorted, searched for the other's."""
    d = np.asarray(differences, dtype=float) - shift
    n = d.shape[-1]
    flat = d.reshape(-1, n)
    scale = np.abs(flat).sum(axis=1, keepdims=True)
    x = flat / np.where(scale > 0, scale, 1.0)  # every signed sum in [-1, 1]: rows apart by 4
    half = n // 2
    left = x[:, :half] @ _signs(half)
    right = np.sort(x[:, half:] @ _signs(n - half), axis=1)
    width, offset = right.shape[1], 4.0 * np.arange(len(x))[:, None]
    ranked, target = (right + offset).ravel(), x.sum(axis=1)[:, None] - left + offset
    start = width * np.arange(len(x))[:, None]
    tie = 1e-9  # sums equal to the observed one count on both sides
    at_least = width - (np.searchsorted(ranked, (target - tie).ravel()).reshape(left.shape) - start)
    at_most = np.searchsorted(ranked, (target + tie).ravel(), side="right").reshape(left.shape) - start
    shape = d.shape[:-1]
    return (at_least.sum(axis=1) / 2.0 ** n).reshape(shape), (at_most.sum(axis=1) / 2.0 ** n).reshape(shape)


def skew_sign(differences: np.ndarray, shift: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Per direction the larger p of `skew_corrected_t` and the exact `sign_flip` test (from
    SKEW_UNITS units; below, the plain t-test like the skew-t). A verdict needs both: the sign-flip
    is exact under any symmetric null (normal, t3, unequal arm SDs) and cannot go below 2^(1-n)
    two-sided, so the small levels of the sequential design's early looks and of Holm's splits are
    not read on the normal tail alone; the skew-t guards the skewed nulls, under which the sign-
    flip alone is too liberal. Measured (docs/statistics.md, "Skewed differences"): the sequential
    design's false verdicts under centred-exponential differences fall from 5.0-5.4 % (skew-t) to
    at most 5 % plus the calibration's margin."""
    differences = np.asarray(differences, dtype=float)
    above, below = skew_corrected_t(differences, shift)
    if differences.shape[-1] < SKEW_UNITS:
        return above, below
    flip_above, flip_below = sign_flip(differences, shift)
    return np.fmax(above, flip_above), np.fmax(below, flip_below)


SKEWED = 1.0
"""Adjusted sample skewness of a part's differences from which the report calls them skewed: the
skewness of normal differences stays below it 90 % of the time at 12 units."""
SKEWED_RATES = {"skew-sign": {1: ((3, 11.5), (6, 4.8), (9, 4.9), (12, 4.6), (15, 4.3)),
                              3: ((3, 15.0), (6, 0.0), (9, 6.5), (12, 5.8), (15, 5.2))},
                "skew-t": {1: ((3, 11.5), (6, 5.6), (9, 5.1), (12, 4.7), (15, 4.3)),
                           3: ((3, 15.0), (6, 8.9), (9, 6.8), (12, 5.9), (15, 5.2))},
                "t": {1: ((3, 11.5), (6, 11.2), (9, 10.2), (12, 9.2), (15, 8.4)),
                      3: ((3, 15.0), (6, 18.4), (9, 16.5), (12, 15.0), (15, 13.6))}}
"""False verdicts per finding (%) of the fixed design under centred-exponential run differences,
by test, parts of the finding (1; 3 stands for 2 or more, under `VerdictConfig.parts` holm) and
units (the rate at the largest units listed at or below the part's), no source effect (the worst
case), 20,000 simulated findings each (`benchmarks/skew_rates.py`; the sequential design's:
`SKEWED_SEQUENTIAL`). The skew-sign test decides nothing for 3 parts at 6 units under holm (the
sign-flip's floor 2^-5 is above 0.05 / 3). A co-primary part's note quotes the one-part row
(`statistics.part_family`): its claim is tested alone at alpha / 2, and its finding's least
favourable configuration, one null part among true ones, adds only a share of the opposite
side's rate (tests/unit/report/test_skew_calibration.py)."""


def skewness(differences: np.ndarray) -> float:
    """The adjusted sample skewness of differences (last axis: units) largest in size over the
    other axes; NaN under 3 units."""
    differences = np.asarray(differences, dtype=float)
    if differences.shape[-1] < 3:
        return math.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.ravel(adjusted_skewness(differences))
    g = g[np.isfinite(g)]
    return float(g[np.argmax(np.abs(g))]) if len(g) else math.nan


SEQUENTIAL_LOOKS = (9, 12, 15)
"""The looks of the sequential design whose rates `SKEWED_SEQUENTIAL` gives: the default's
(`SequentialSpec().looks()`, a test checks)."""
SKEWED_SEQUENTIAL = {"skew-sign": {1: 5.3, 3: 6.2}, "skew-t": {1: 5.5, 3: 7.1}, "t": {1: 10.9, 3: 18.0}}
"""False verdicts per finding (%) of the sequential design with looks at SEQUENTIAL_LOOKS runs under
centred-exponential run differences, by test and parts (1; 3 stands for 2 or more), no source
effect, 20,000 simulated findings each (`benchmarks/skew_rates.py`)."""


def skew_note(part_units: int, family: int, value: float, test: str, looks: tuple[int, ...] | None = None) -> str:
    """A sentence for a part whose differences look skewed: what skew does to its error rate in the
    study's design (fixed: `looks` None; else the sequential design's looks)."""
    if not abs(value) >= SKEWED or test not in SKEWED_RATES:
        return ""
    parts = 1 if family < 2 else 3
    if looks is None:
        rows = SKEWED_RATES[test][parts]
        rate = next((r for n, r in reversed(rows) if n <= part_units), rows[0][1])
        where = f"at {part_units} units"
    else:
        rate = SKEWED_SEQUENTIAL[test][parts]
        measured = ", ".join(map(str, SEQUENTIAL_LOOKS))
        where = (f"over a sequential design's looks at {measured} runs" if tuple(looks) == SEQUENTIAL_LOOKS else
                 f"over a sequential design's looks (measured with looks at {measured} runs, not this study's)")
    if rate <= 100 * 0.05:
        return ""
    return (f"the differences look skewed (skewness {value:+.1f}): under such a null this test gives about "
            f"{rate:.0f} % false verdicts per finding {where}, not 5 %")


def paired_test(differences: np.ndarray, shift: float, config) -> tuple[np.ndarray, np.ndarray]:
    """`skew_corrected_t`, `paired_t`, or Wilcoxon signed-rank tests, as `config.test` says (a
    `statistics.VerdictConfig`; scipy;
    the Wilcoxon test is exact for small samples: with 5 units its smallest two-sided p is 0.0625).
    The last axis of `differences` is the units; any axes before it are tested apart."""
    if config.test == "skew-t":
        return skew_corrected_t(differences, shift)
    if config.test == "skew-sign":
        return skew_sign(differences, shift)
    if config.test == "t":
        return paired_t(differences, shift)
    d = np.asarray(differences, dtype=float) - shift
    flat = d.reshape(-1, d.shape[-1])
    above, below = np.full(len(flat), np.nan), np.full(len(flat), np.nan)
    for i, row in enumerate(flat):
        if np.count_nonzero(row) >= 1 and len(row) >= 2:
            above[i] = stats.wilcoxon(row, alternative="greater").pvalue
            below[i] = stats.wilcoxon(row, alternative="less").pvalue
    return above.reshape(d.shape[:-1]), below.reshape(d.shape[:-1])


def test_name(config, units: int) -> str:
    """The test's name as a part's text gives it (the skew-corrected t is the plain t below SKEW_UNITS)."""
    if config.test in ("skew-t", "skew-sign") and units < SKEW_UNITS:
        return "paired t-test"
    return {"t": "paired t-test", "skew-t": "skew-corrected paired t-test",
            "skew-sign": "skew-corrected paired t- and sign-flip test"}.get(config.test, "Wilcoxon signed-rank test")
