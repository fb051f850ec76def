"""The environment that shapes a study's numbers (sweeper.store.environments): what a worker
reports (trainables.environment), how the study keeps it, and where status and the report show it."""
from __future__ import annotations

import shutil

import torch
from conftest import ROOT

from sweeper.plan.load import load_study
from sweeper.report.status import print_status
from report_text import build_report
from sweeper.store import environments
from sweeper.store.layout import StudyLayout
from trainables.environment import describe



def test_a_worker_reports_every_field_that_shapes_the_numbers():
    found = describe()
    assert set(environments.SHAPING) <= set(found)
    assert found["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert found["torch_threads"] == torch.get_num_threads() and found["cpu_count"] >= 1
    assert {"torch", "transformers", "tokenizers", "ray", "numpy"} <= set(found["packages"])
    assert found["packages"]["torch"] == torch.__version__
    assert (found["gpu"] is None) == (not torch.cuda.is_available())
    with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:  # the project's machines run Linux
        names = {line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")}
    assert found["cpu_model"] in names, (found["cpu_model"], names)
    assert f"({found['cpu_model']}), CPU path" in environments.describe(found)


def test_the_study_keeps_one_entry_per_environment(tmp_path):
    layout = StudyLayout(str(tmp_path / "study"))
    (tmp_path / "study").mkdir()
    here = describe()
    assert environments.record(layout, here, "001-abc")
    assert not environments.record(layout, dict(here), "001-abc"), "a resume on the same environment adds nothing"
    # Another CPU path than this machine's own (an AVX2 machine would otherwise record nothing new).
    other = "DEFAULT" if here["torch_cpu_capability"] != "DEFAULT" else "AVX2"
    assert environments.record(layout, {**here, "torch_cpu_capability": other}, "002-def")
    kept = environments.entries(layout)
    assert [e["spec"] for e in kept] == ["001-abc", "002-def"] and kept[-1]["torch_cpu_capability"] == other
    assert all(e["recorded_at"] for e in kept)
    summary = "\n".join(environments.summary(layout))
    assert f"CPU path {other}" in summary and "1 earlier environment(s) differ" in summary
    another_cpu = {**here, "torch_cpu_capability": other, "cpu_model": "another CPU"}
    assert environments.record(layout, another_cpu, "002-def"), \
        "the same CPU path on another CPU model is another environment (it may run at half the speed)"


def test_an_entry_recorded_before_the_cpu_model_was_is_not_a_new_environment(tmp_path):
    layout = StudyLayout(str(tmp_path))
    here = describe()
    assert environments.record(layout, {field: value for field, value in here.items() if field != "cpu_model"}, "001")
    assert not environments.record(layout, here, "001"), "a field the kept entry predates is not a difference"
    assert environments.record(layout, {**here, "python": "0.0"}, "001")


def study_with_environment(tmp_path) -> StudyLayout:
    study = tmp_path / "smoke"
    study.mkdir()
    shutil.copy(ROOT / "search_spaces" / "smoke.yaml", study / "spec.yaml")
    layout = StudyLayout(str(study))
    environments.record(layout, {**describe(), "torch_cpu_capability": "AVX512", "torch_threads": 3}, "001-abc")
    return layout


def test_status_and_report_show_the_environment(tmp_path, capsys):
    layout = study_with_environment(tmp_path)
    print_status(layout, load_study(layout.spec))
    shown = capsys.readouterr().out
    assert "environment: torch " in shown and "CPU path AVX512, 3 torch thread(s)" in shown
    assert "fine-tuning: 40 result rows (32 trials): 0 ok" in shown, "rows and trials, each by its own word"
    text, _ = build_report(layout)
    section = text.split("## Environment", 1)[1]
    assert "CPU path AVX512, 3 torch thread(s)" in section and "transformers " in section


def test_a_study_without_a_record_says_so(tmp_path):
    layout = StudyLayout(str(tmp_path))
    assert environments.summary(layout) == ["environment: not recorded (a study run before sweeper recorded it)"]
