"""The study's own checkpoints read as hostile input before their trials run (sweeper.run.own_checkpoints):
a config.json edited after its run is refused in one line, one that the study wrote passes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweeper.plan.checkpoint_checks import STUDY_AUTO_MAP
from sweeper.plan.load import load_study
from sweeper.run.own_checkpoints import config_refusal, refusal, refuse_edited_checkpoints
from sweeper.store.layout import StudyLayout

from conftest import ROOT

EVIL = {"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"}


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    """A checkpoint folder as a pretraining run writes it (save_pretrained of the study's model)."""
    from trainables.model import LlamaEncoderConfig, LlamaEncoderForMaskedLM

    folder = tmp_path_factory.mktemp("written") / "step-40"
    LlamaEncoderForMaskedLM(LlamaEncoderConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                                               num_hidden_layers=1, num_attention_heads=2,
                                               num_key_value_heads=2)).save_pretrained(folder)
    return folder


def edited(folder: Path, target: Path, **changes) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    config = json.loads((folder / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, **changes}))
    return target


def test_the_auto_map_the_study_writes_is_the_one_the_driver_accepts(written):
    from trainables.model import AUTO_MAP

    assert STUDY_AUTO_MAP == AUTO_MAP
    assert json.loads((written / "config.json").read_text())["auto_map"] == STUDY_AUTO_MAP
    assert config_refusal(str(written)) is None


def test_an_auto_map_given_after_the_run_is_refused_naming_the_code(written, tmp_path):
    evil_model = {**STUDY_AUTO_MAP, "AutoModel": "evil.EvilModel"}
    why = config_refusal(str(edited(written, tmp_path / "a", auto_map=evil_model)))
    assert why == ("auto_map names code the study did not write (AutoModel -> evil.EvilModel); "
                   "the study never runs a folder's code")
    assert "evil.EvilModel" in config_refusal(str(edited(written, tmp_path / "b", auto_map=EVIL)))
    assert config_refusal(str(edited(written, tmp_path / "c", auto_map=["x"]))).startswith("auto_map: a JSON list")


def test_an_architecture_that_needs_the_folders_code_is_refused(written, tmp_path):
    why = config_refusal(str(edited(written, tmp_path / "a", model_type="evil_arch", auto_map=EVIL)))
    assert why.startswith("model_type: 'evil_arch' is not an architecture the installed transformers ships")
    assert "auto_map asks for the folder's own code" in why


def test_a_shipped_family_keeps_its_auto_map_and_what_cannot_be_read_is_refused(written, tmp_path):
    # A natively continued causal LM is saved as its shipped family; its source's auto_map may ride
    # along, and transformers builds the shipped class without running any code (not refused).
    assert config_refusal(str(edited(written, tmp_path / "a", model_type="llama", auto_map=EVIL))) is None
    assert config_refusal(str(tmp_path / "none")) is None, "no config.json: the load says so on the worker"
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "config.json").write_text("{not json")
    assert config_refusal(str(tmp_path / "garbage")).startswith("cannot be read as the study writes it: is not JSON")
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "config.json").symlink_to(written / "config.json")
    assert "resolves outside the source folder" in config_refusal(str(tmp_path / "linked"))
    edited(written, tmp_path / "sizes", hidden_size=float("nan"))
    assert config_refusal(str(tmp_path / "sizes")) == "hidden_size: must be a whole number, got nan"


def test_each_refused_checkpoint_is_named_once_with_its_file(written, tmp_path, capsys):
    plan = load_study(ROOT / "search_spaces" / "smoke.yaml").plan
    layout = StudyLayout(str(tmp_path / "study"))
    first, second = plan.checkpoints[0], plan.checkpoints[1]
    edited(written, Path(layout.checkpoint(first.run.name, first.step)), auto_map=EVIL)
    edited(written, Path(layout.checkpoint(second.run.name, second.step)))
    refused = {}
    refuse_edited_checkpoints([first, first, second], layout, refused)
    where = f"pretraining/{first.run.name}/step-{first.step}/config.json"
    assert refused == {first.checkpoint_id: f"{where}: auto_map names code the study did not write "
                                            "(AutoConfig -> evil.EvilConfig, AutoModel -> evil.EvilModel); the "
                                            "study never runs a folder's code"}
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"[finetune] checkpoint {first.checkpoint_id}: {refused[first.checkpoint_id]}: its trials are "
                     "recorded failed, nothing from its folder ran"]


def test_a_tokenizer_given_code_of_its_own_after_the_run_is_refused(written, tmp_path):
    folder = edited(written, tmp_path / "tok")
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "EvilTokenizer", "auto_map": {"AutoTokenizer": ["evil_tok.EvilTokenizer", None]}}))
    assert refusal(str(folder)).startswith("tokenizer_config.json: auto_map asks for the tokenizer's own code")
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    assert refusal(str(folder)) is None
