"""`sweeper results` and `sweeper.results`: exactly the rows report.md reads, each with its
standing against the last spec, in CSV, JSON or Parquet; `--all` adds the rows it leaves out.

The record is test_study_history's: spec 1 ran sc1 and tc1 at two learning rates (12 trials),
spec 2 (the last) plans sc1 at the first rate under a changed budget (3 trials, recorded). The
report reads 9 rows (3 current, 6 kept tc1) and leaves out 6 (3 superseded, 3 changed).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

import sweeper
from sweeper import cli
from report_text import build_report


CURRENT = {f"sc1/0.0001/{seed}/v2" for seed in range(3)}
KEPT = {f"tc1/{lr}/{seed}/v1" for lr in (0.0001, 0.0003) for seed in range(3)}
SUPERSEDED = {f"sc1/0.0001/{seed}/v1" for seed in range(3)}
CHANGED = {f"sc1/0.0003/{seed}/v1" for seed in range(3)}


def standings(rows: pd.DataFrame) -> dict[str, set[str]]:
    return {standing: set(group["trial_key"]) for standing, group in rows.groupby("standing")}


def test_the_rows_are_those_the_report_reads_each_with_its_standing(recompute_record):
    Path(recompute_record.spec).write_text("study: record\n")
    rows = sweeper.results(recompute_record.root)
    assert standings(rows) == {"current": CURRENT, "kept": KEPT}
    text, _ = build_report(recompute_record)
    assert f"{len(rows)} result rows recorded ({len(rows)} ok)" in text
    # The report's sc1 mean (v2 rows score 65 + seed) is the mean of these rows, not of all 6 at that rate.
    assert rows.loc[rows["task"] == "sc1", "test_score"].mean() == 66.0
    every = sweeper.results(recompute_record.root, every=True)
    assert standings(every) == {"current": CURRENT, "kept": KEPT, "superseded": SUPERSEDED, "changed": CHANGED}
    assert every.drop(columns="standing").columns.equals(rows.drop(columns="standing").columns)


def test_without_a_plan_every_row_is_read_and_its_standing_unknown(recompute_record):
    Path(recompute_record.spec).write_text("study: record\n")
    os.remove(recompute_record.plan)
    rows = sweeper.results(recompute_record.root)
    assert len(rows) == 15 and set(rows["standing"]) == {"unknown"}


def test_the_command_writes_each_format_and_finds_the_study_by_name(recompute_record, tmp_path_factory,
                                                                    monkeypatch, capsys):
    Path(recompute_record.spec).write_text("study: record\n")
    expected = sweeper.results(recompute_record.root)
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "studies").mkdir()
    os.symlink(recompute_record.root, elsewhere / "studies" / "record")
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert cli.main(["results", "record"]) == 0  # the name, under ./studies/
    from_csv = pd.read_csv(__import__("io").StringIO(capsys.readouterr().out))
    assert list(from_csv["trial_key"]) == list(expected["trial_key"]) and "standing" in from_csv
    assert cli.main(["results", "studies/record", "--output", "rows.parquet"]) == 0  # Parquet from the suffix
    pd.testing.assert_frame_equal(pd.read_parquet("rows.parquet"), expected)
    assert cli.main(["results", "studies/record", "--format", "json", "--all"]) == 0
    every = json.loads(capsys.readouterr().out)
    assert len(every) == 15 and {r["standing"] for r in every} == {"current", "kept", "superseded", "changed"}
    assert cli.main(["results", "studies/record", "--format", "parquet"]) == 2
    assert "needs --output" in capsys.readouterr().err
    assert cli.main(["results", "nothing-here"]) == 1
    assert "not a study directory" in capsys.readouterr().err
