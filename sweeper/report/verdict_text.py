"""The findings as the report writes them: the rule that turns parts into a verdict, what the
numbers estimate, and per part its comparison, numbers, test, the p-value its verdict is read from, the smallest
effect it could have detected, and its verdict (docs/statistics.md)."""
from __future__ import annotations

import math

import pandas as pd

from sweeper.report import analysis, findings, robustness, sequential
from sweeper.report.findings import Verdict
from sweeper.report.statistics import CANNOT_TELL, CO_PRIMARY, HOLM, VerdictConfig
from sweeper.report.tables import markdown_table

PARTS_RULE = {
    HOLM: "A part is decided when its Holm-adjusted p-value (over the finding's parts) is below 0.05, in the "
          "direction its test points; otherwise it is *cannot tell*.",
    CO_PRIMARY: "The parts are co-primary claims: a part *supports* when its own one-sided test of the claim "
                "gives p below 0.025, with no split over the parts, because the finding supports only when "
                "every part does (an intersection-union test: a false *supports* needs the one false part's own "
                "test to err); a part *contradicts* when its one-sided test against the claim, Holm-adjusted over "
                "the finding's parts, gives p below 0.025. A part that supports inside a finding that does not is "
                "not a result on its own (its level is not adjusted for the other parts).",
}


def verdict_rule(rule: str) -> str:
    """**How a verdict follows from its parts**, for `VerdictConfig.parts`."""
    return (
        "**How a verdict follows from its parts.** Each finding is split into parts: one claim about one group of "
        f"checkpoints of the same size and budget. {PARTS_RULE[rule]} The finding "
        "**supports** when every part supports, **contradicts** when any part contradicts, and is **cannot tell** "
        "otherwise, so a finding says *supports* or *contradicts* with at most a 5 % chance when its claim is not "
        "true. Ties ('ties or wins', 'the compromise', 'reliable') are tested against a 1-point margin: a tie is "
        "never read from a difference that is merely not significant.")

POWER_NOTE = (
    "**detectable (80 %)**: the smallest true difference the part's test finds 4 times in 5 at the noise it "
    "observed (points; points² for learning-rate variance). A *cannot tell* beside a large figure is "
    "underpowered (more seeds or runs would be needed); beside a small one, any effect is small.")


def level_text(verdicts: list[Verdict], replicated: bool) -> str:
    by_runs = any("pretraining runs" in part.test for v in verdicts for part in v.parts)
    if not replicated:
        return ("**About checkpoints, not objectives.** This study trains each configuration once, so a part "
                "compares two checkpoints over fine-tuning seeds: a second pretraining run of the same objective may "
                "differ by more than the seeds show. Set `pretraining.replicates` (or an entry's `replicates`) to "
                "compare objectives.")
    if by_runs:
        return ("**About objectives where runs are replicated.** A part whose test is over *pretraining runs* compares "
                "configurations by their runs (each run's score is the mean over its seeds, so run-to-run variance "
                "is in the test); a part over *seeds* compares the first runs' checkpoints, where a configuration has "
                "one run.")
    return "**About checkpoints.** No compared configuration has two or more finished runs yet."


ESTIMAND = (
    "**What the scores estimate.** Per (checkpoint, task), the point (learning rate and swept values) best on "
    "the seeds' mean validation score, and the test scores there (the paper's selection). Where runs are "
    "compared, each run's seeds are cross-fitted instead: seed s is scored at the point best on the run's other "
    "seeds, so a flat learning-rate curve gains nothing from having many near-best rates (the winner's curse). "
    "A diverged trial counts as its task's worst finished score (it never drops out of a mean); a failed trial "
    "has no score and is counted below.")


def findings_section(verdicts: list[Verdict], replicated: bool = False) -> list[str]:
    """Per finding its verdict, then per part: comparison, numbers, test, the p its verdict is read
    from (and, co-primary, which side and level), detectable effect and verdict."""
    rule = next((part.rule for v in verdicts for part in v.parts), CO_PRIMARY)
    out = ["## The paper's findings, checked on this study", "", verdict_rule(rule), "",
           level_text(verdicts, replicated), "",
           ESTIMAND, "", POWER_NOTE, "", "Numbers: mean [95 % CI]. Tests and their measured error rates: "
           "docs/statistics.md.", ""]
    for verdict in verdicts:
        if untested(verdict):  # nothing the spec makes tests it: one line, not a table of "not tested"
            out += [f"{verdict.number}. *not tested*: {verdict.claim} ({untested_reason(verdict)})", ""]
            continue
        out += [f"{verdict.number}. **{verdict.verdict}**: {verdict.claim}", ""]
        if not verdict.parts:
            out += [f"   - {line}" for line in verdict.evidence] + [""]
            continue
        rows = [[part.comparison, part.numbers or "-", part.test if not part.missing else "not tested",
                 part.p_shown() if not part.missing else "n/a", detectable_text(part.detectable),
                 part.verdict_shown() if not part.missing else f"{CANNOT_TELL}: {part.missing}"]
                for part in verdict.parts]
        out += ["   " + line for line in markdown_table(
            ["part", "numbers", "test", "p", "detectable (80 %)", "verdict"], rows).splitlines()] + [""]
    return out


def untested(verdict: Verdict) -> bool:
    """Whether no part of the finding could be tested (every part lacks runs or seeds)."""
    return all(part.missing for part in verdict.parts) if verdict.parts else not verdict.evidence


def untested_reason(verdict: Verdict) -> str:
    """Why, once per distinct reason, after the parts it holds for (a part names what it would
    compare: a causal LM from elsewhere, a size), in order."""
    by_reason: dict[str, list[str]] = {}
    for part in verdict.parts:
        by_reason.setdefault(part.missing, []).append(part.comparison)
    return "; ".join(f"{', '.join(dict.fromkeys(parts))}: {reason}" for reason, parts in by_reason.items()) \
        or "no evidence"


def detectable_text(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2g}"


def outcomes_section(trials: pd.DataFrame) -> list[str]:
    """Per checkpoint with trials that did not finish: how many diverged, failed or were stopped."""
    counts = analysis.status_counts(trials)
    if counts.empty:
        return []
    per_checkpoint = counts.groupby("checkpoint_id")[["trials", *analysis.STATUSES[1:]]].sum()
    shown = per_checkpoint[per_checkpoint[list(analysis.STATUSES[1:])].sum(axis=1) > 0]
    if shown.empty:
        return ["Every recorded trial finished (none diverged, failed or was stopped).", ""]
    return ["## Trials that did not finish", "",
            "Diverged trials count in the findings as their task's worst finished score; failed ones are left out "
            "(`sweeper run --retry-failed` reruns them); stopped ones (by a trial scheduler) rank after complete "
            "points.", "", markdown_table(["checkpoint", "trials", *analysis.STATUSES[1:]],
                                         [[c, *(str(int(v)) for v in row)] for c, row in shown.iterrows()]), ""]


def verdicts_sections(trials: pd.DataFrame, lr_range: tuple[float, float], design=None,
                      config: VerdictConfig = VerdictConfig()) -> list[str]:
    """The findings (a sequential plan's looks when `design`), the trials that did not finish, and
    the robustness card, by `config` (the spec's: `statistics.verdict_config`)."""
    study = findings.study_grid(trials)
    if study is None:
        return findings_section(findings.check_findings(trials, lr_range, config))
    looks = sequential.study_looks(trials, design, lr_range, config) if design is not None else None
    verdicts = looks.verdicts if looks is not None else findings.judge_grid(*study, lr_range, config)
    replicated = bool((study[1]["replicate"].fillna(0) > 0).any())
    card = robustness.robustness_card(*study, verdicts, lr_range, config)
    return (findings_section(verdicts, replicated) + (sequential.looks_section(looks) if looks else [])
            + outcomes_section(trials) + robustness.robustness_lines(card, verdicts))
