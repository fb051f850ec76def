"""The report for the question the spec asks: its comparisons first with their intervals, the
findings it does not test in one line each, tasks at chance flagged, a short terminal summary
(sweeper.report.headline, sweeper.report.chance, sweeper.report.verdict_text)."""
from __future__ import annotations

from datetime import datetime, UTC

import numpy as np
import pytest

from sweeper.report import chance, headline
from sweeper.report.findings import check_findings
from sweeper.report.statistics import describe
from sweeper.report.verdict_text import findings_section
from sweeper.report.writer import write_report
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, read_trials, write_rows

from report_text import build_report

SEEDS = (0, 1, 2, 3)
TASKS = {"wordnet-supersense-cls": ("SC", "sequence_classification", "accuracy"),
         "wordnet-supersense-tag": ("TC", "token_classification", "f1")}
BASE = {0: 60.0, 1: 58.0, 2: 63.0, 3: 61.0}
SHIFT = {0: -1.0, 1: -3.0, 2: 0.5, 3: -2.5}
"""40 % minus 30 % on SC, per seed: the known truth the headline must report."""


def rows() -> list[dict]:
    out = []
    for ratio in (0.3, 0.4):
        name = f"nano-mlm{int(ratio * 100)}-40"
        for task, (category, family, metric) in TASKS.items():
            for seed in SEEDS:
                # TC never learns (0 F1, the family's chance level); SC differs by SHIFT per seed.
                score = 0.0 if category == "TC" else BASE[seed] + (SHIFT[seed] if ratio == 0.4 else 0.0)
                out.append({"study": "masking", "trial_key": f"{name}/{task}/{seed}", "run_name": name,
                            "run_key": f"key-{name}", "checkpoint_id": name, "objective": "mlm",
                            "clm_fraction": 0.0, "mask_ratio": ratio, "checkpoint_step": 40, "total_steps": 40,
                            "tokens_seen": 40 * 2048, "source": "study", "task": task, "task_family": family,
                            "task_category": category, "metric": metric, "search_mode": "grid",
                            "learning_rate": 1e-4, "seed": seed, "params": "{}", "status": "ok",
                            "validation_score": score, "test_score": score,
                            "finished_at": datetime.now(UTC)})
    return out


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    layout = StudyLayout(str(tmp_path_factory.mktemp("masking")))
    write_rows(layout, TRIALS, rows())
    return layout


@pytest.fixture(scope="module")
def report(study) -> str:
    """The study's report text, built once for the tests that read it (a report draws every figure)."""
    return build_report(study)[0]


def test_a_masking_study_leads_with_its_masking_difference_and_interval(study, report):
    trials = read_trials(study).to_pandas()
    found = headline.comparisons(trials)
    assert [f.label for f in found] == ["40 % minus 30 %"]
    truth = np.array([SHIFT[s] for s in SEEDS])
    assert found[0].per_category["SC"] == describe(truth)  # the known differences, with their t interval
    assert found[0].per_category["TC"] == describe(np.zeros(4))
    assert found[0].mean == describe(truth / 2)  # mean of SC and TC
    assert found[0].units == "4 seeds"
    text = report
    assert text.index("## The comparisons this study makes") < text.index("## Category averages")
    assert f"| 40 % minus 30 % | mask ratio, nano @ 40 | 4 seeds | {describe(truth / 2)} |" in text


def test_findings_the_spec_does_not_test_take_one_line_each(study):
    verdicts = check_findings(read_trials(study).to_pandas())
    lines = findings_section(verdicts)
    untested = [line for line in lines if "*not tested*" in line]
    assert len(untested) == 4  # findings 1, 3, 4, 5: the study has MLM runs at two ratios only
    assert any("CLM" in line and "MLM" in line for line in untested)
    assert any(line.startswith("2. **") for line in lines)  # finding 2 keeps its table of parts


def test_the_masking_table_carries_intervals(report):
    table = report.split("## Masking ratio")[1].split("##")[0]
    assert "±" in table and "95 % CI" in table


def test_a_task_at_chance_is_flagged_with_its_chance_level(report):
    section = report.split("## Tasks at chance")[1].split("##")[0]
    assert "wordnet-supersense-tag (TC, f1): at chance for every checkpoint: never learned" in section
    assert "chance 0.00" in section
    assert "wordnet-supersense-cls" not in section  # SC scores 60, no known chance level: not flagged


def test_chance_levels_per_family_from_the_data_where_kept():
    gold = ["a"] * 6 + ["b"] * 3 + ["c"]
    import pandas as pd
    assert chance.chance_level("wordnet-supersense-cls", "sequence_classification", pd.Series(gold)).level == 60.0
    assert chance.chance_level("sst2", "sequence_classification", pd.Series(dtype=object)).level == 50.0
    assert chance.chance_level("wordnet-supersense-cls", "sequence_classification", pd.Series(dtype=object)) is None
    assert chance.chance_level("wordnet-supersense-tag", "token_classification", pd.Series(dtype=object)).level == 0
    assert chance.chance_level("msmarco", "retrieval", pd.Series(dtype=object)) is None


def test_the_terminal_shows_a_short_summary_and_the_path(study, capsys):
    path = write_report(study)
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) <= 8, printed
    assert any("40 % minus 30 %" in line for line in printed)
    assert any("at chance: wordnet-supersense-tag" in line for line in printed)
    assert str(path).split("/")[-1] in printed[-1]
    assert not any(line.startswith("|") for line in printed)  # no raw Markdown table


def test_arms_are_named_by_what_varies_in_their_group():
    import pandas as pd
    runs = pd.DataFrame({"objective": ["clm", "clm-mlm", "mlm", "mlm"], "clm_fraction": [1.0, 0.2, 0.0, 0.0],
                         "mask_ratio": [float("nan"), 0.4, 0.4, 0.3]}, index=["a", "b", "c", "d"])
    varied = headline.varied_columns(runs)
    assert [headline.arm_label(r, varied) for _, r in runs.iterrows()] == [
        "clm", "clm-mlm (CLM 20 %, 40 % masking)", "mlm (40 % masking)", "mlm (30 % masking)"]
    masking = runs.iloc[2:]
    assert [headline.arm_label(r, headline.varied_columns(masking)) for _, r in masking.iterrows()] == ["40 %", "30 %"]
