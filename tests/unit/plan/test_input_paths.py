"""Input paths checked at plan time (sweeper.plan.input_paths): an absent corpus, tokenizer folder
or task data file is a spec error naming file, line, key and reason (exit 2) at `plan` and at
`run`, before anything is written; `status` and `report` still read a study whose inputs moved."""
from __future__ import annotations

import json
from dataclasses import replace

from conftest import edited_spec
from sweeper import cli
from sweeper.contract import registry
from sweeper.plan.load import load_study

CORPUS = "  corpus: wordnet "
TOKENIZER = "  tokenizer: train-wordpiece "


def test_an_absent_corpus_is_a_plan_error_and_run_writes_nothing(tmp_path, capsys):
    absent = tmp_path / "my_corpus.jsonl"
    spec = edited_spec(tmp_path, (CORPUS, f"  corpus: {absent} "))
    assert cli.main(["plan", str(spec)]) == 2
    assert capsys.readouterr().err.strip() == f"spec error: {spec}:8: data.corpus: '{absent}' does not exist"
    storage = tmp_path / "study"
    assert cli.main(["run", str(spec), "--storage", str(storage)]) == 2
    assert "data.corpus" in capsys.readouterr().err and not storage.exists()  # no resolved.json, no folder


def test_a_corpus_without_the_text_column_names_text_column(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"body": "a document"}) + "\n")
    spec = edited_spec(tmp_path, (CORPUS, f"  corpus: {corpus} "))
    assert cli.main(["plan", str(spec)]) == 2
    assert f"{spec}:" in (err := capsys.readouterr().err) and ": data.text_column: " in err and "'text'" in err, err
    corpus.write_text(json.dumps({"text": "a document"}) + "\n")  # readable: plans
    assert cli.main(["plan", str(spec)]) == 0, capsys.readouterr().err


def test_every_absent_input_path_is_named_at_once(tmp_path, capsys):
    spec = edited_spec(tmp_path, (CORPUS, f"  corpus: {tmp_path / 'no.parquet'} "),
                       (TOKENIZER, f"  tokenizer: {tmp_path / 'no-tokenizer'} "))
    assert cli.main(["plan", str(spec)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert [line.split(": ")[2] for line in err] == ["data.corpus", "data.tokenizer"], err
    assert err[1] == (f"spec error: {spec}:9: data.tokenizer: '{tmp_path / 'no-tokenizer'}' does not exist "
                      "(a local tokenizer folder, or a Hugging Face tokenizer name)")


def test_a_hub_tokenizer_name_is_not_taken_for_a_path(tmp_path, capsys):
    spec = edited_spec(tmp_path, (TOKENIZER, "  tokenizer: bert-base-uncased "))
    assert cli.main(["plan", str(spec)]) == 0, capsys.readouterr().err


def test_an_absent_task_data_file_names_the_task(tmp_path, capsys):
    spec = edited_spec(tmp_path, ("[wordnet-supersense-cls,", "[probe-cls,"))
    with registry.using(registry.shipped()):
        registry.register_task(replace(registry.get_task("wordnet-supersense-cls"), name="probe-cls",
                                       source=str(tmp_path / "probe.jsonl")))
        assert cli.main(["plan", str(spec)]) == 2
        assert capsys.readouterr().err.strip() == (
            f"spec error: {spec}:30: finetuning.tasks[0]: task 'probe-cls' reads its rows from "
            f"'{tmp_path / 'probe.jsonl'}' (its registered source), which does not exist")
        (tmp_path / "probe.jsonl").write_text("")
        assert cli.main(["plan", str(spec)]) == 0, capsys.readouterr().err


def test_status_and_report_still_load_a_study_whose_corpus_moved(tmp_path):
    spec = edited_spec(tmp_path, (CORPUS, f"  corpus: {tmp_path / 'gone.jsonl'} "))
    assert load_study(spec).spec.data.corpus == str(tmp_path / "gone.jsonl")  # machine=False: not checked


def test_plan_takes_overrides_after_storage(tmp_path, capsys):
    spec = edited_spec(tmp_path)
    study = tmp_path / "study"
    study.mkdir()
    (study / "spec.yaml").write_text(spec.read_text())
    assert cli.main(["plan", str(spec), "--storage", str(study), "finetuning.seeds=[0]"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "overrides:              finetuning.seeds=[0]" in out and f"against the study at {study}" in out, out
