"""Command-line overrides (`sweeper plan|run SPEC key.path=value ...`, sweeper.spec.overrides):
applied before the spec is checked, checked as the file is, named in their errors, and kept
in the study's spec history."""
from __future__ import annotations

import json

import pytest
import yaml

from conftest import ROOT
from sweeper import cli
from sweeper.plan.load import load_study
from sweeper.spec.overrides import apply_overrides
from sweeper.spec.reading import SpecError

SMOKE = str(ROOT / "search_spaces" / "smoke.yaml")


def test_overrides_take_yaml_values_and_change_the_plan_as_the_file_would(tmp_path):
    study = load_study(SMOKE, ["finetuning.seeds=[0]", "pretraining.steps=100", "pretraining.runs[1].objective=mlm",
                               "limits.max_runs=500"])
    assert study.spec.finetuning.seeds == [0] and study.spec.pretraining.steps == 100
    assert study.spec.limits.max_runs == 500  # a section the file leaves out is created
    assert {run.objective for run in study.plan.runs} == {"mlm", "clm-mlm"}
    edited = tmp_path / "edited.yaml"
    edited.write_text(open(SMOKE).read().replace("seeds: [0, 1]", "seeds: [0]").replace("steps: 40 ", "steps: 100 ")
                      .replace("- objective: clm ", "- objective: mlm "))
    from_file = load_study(edited)
    assert [t.trial_key for t in study.plan.trials] == [t.trial_key for t in from_file.plan.trials]
    assert [r.run_key for r in study.plan.runs] == [r.run_key for r in from_file.plan.runs]


def test_the_effective_spec_is_the_file_without_overrides_and_the_overridden_mapping_with_them():
    assert load_study(SMOKE).text == open(SMOKE).read()
    study = load_study(SMOKE, ["finetuning.seeds=[0]"])
    assert study.overrides == ("finetuning.seeds=[0]",) and "#   finetuning.seeds=[0]" in study.text
    assert yaml.safe_load(study.text)["finetuning"]["seeds"] == [0]
    assert [t.trial_key for t in study.plan.trials] == [t.trial_key for t in load_study_text(study.text).plan.trials]


def load_study_text(text: str):
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as file:
        file.write(text)
    return load_study(file.name)


@pytest.mark.parametrize("override, key, reason", [
    ("finetuning.seedz=[0]", "finetuning.seedz", "unknown key (did you mean 'seeds'?)"),
    ("pretraining.steps=many", "pretraining.steps", "expected an integer, got a string 'many'"),
    ("finetuning.seeds=[0, 0]", "finetuning.seeds[1]", "listed twice"),
    ("pretraining.runs[7].steps=3", "pretraining.runs[7].steps", "a list of 3: no item [7]"),
    ("study.name=x", "study.name", "study is a string, not a mapping"),
    ("finetuning.seeds=[0", "finetuning.seeds", "malformed YAML value"),
    ("seeds", "", "an override is key.path=value"),
    ("finetuning..seeds=1", "", "is not a key path"),
])
def test_a_mistaken_override_exits_2_naming_it(override, key, reason, capsys):
    assert cli.main(["plan", SMOKE, override]) == 2
    err = capsys.readouterr().err
    assert f"spec error: override {override}: {key or '<top>'}: " in err and reason in err, err


def test_override_errors_come_with_the_files_own_after_them(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(open(SMOKE).read().replace("  max_length: 48 ", "  max_lenght: 48 "))
    assert cli.main(["run", str(spec), "finetuning.seedz=[0]", "--storage", str(tmp_path / "never")]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith(f"spec error: {spec}:37: finetuning.max_lenght: unknown key")
    assert lines[1].startswith("spec error: override finetuning.seedz=[0]: finetuning.seedz: unknown key")
    assert not (tmp_path / "never").exists()


def test_an_override_of_a_value_the_file_gives_replaces_it_whole_and_the_last_of_two_wins():
    data = {"finetuning": {"seeds": [0, 1], "tasks": ["a"]}}
    out, given = apply_overrides(data, ["finetuning.seeds=[5]", "finetuning.seeds=[6, 7]"])
    assert out["finetuning"] == {"seeds": [6, 7], "tasks": ["a"]} and data["finetuning"]["seeds"] == [0, 1]
    assert given == {"finetuning.seeds": "finetuning.seeds=[6, 7]"}
    with pytest.raises(SpecError, match="more than"):  # read within the spec's own bounds
        apply_overrides(data, ["finetuning.seeds=[" + ",".join(["0"] * 20_000) + "]"])


def test_the_overrides_are_kept_in_the_spec_history_beside_the_effective_spec(tmp_path):
    from sweeper.run.runner import record_spec  # imports Ray, starts none
    from sweeper.store.layout import StudyLayout
    from sweeper.store.spec_history import entries

    layout = StudyLayout(str(tmp_path / "study"))
    study = load_study(SMOKE, ["finetuning.seeds=[0]"])
    record_spec(study, layout)
    (entry,) = entries(layout)
    assert entry.plan["overrides"] == ["finetuning.seeds=[0]"]
    kept = (tmp_path / "study" / "specs" / f"{entry.name}.yaml").read_text()
    assert kept == (tmp_path / "study" / "spec.yaml").read_text() == study.text
    assert load_study(layout.spec).spec == study.spec  # status and report read what was run
    assert json.loads((tmp_path / "study" / "plan.json").read_text())["trials"] == len(study.plan.trials)
