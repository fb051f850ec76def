"""Checkpoints from elsewhere (`finetuning.checkpoints`) in the spec and the plan: what they are
keyed by, what a bad source says, and what `sweeper plan` prints without loading their weights.
The worker side (loading, packing) is tests/unit/trainables/test_backbones.py; the whole path is the e2e test
at the end, on a real local Ray."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_process import sweeper_cli
from conftest import ROOT, nano_study

from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study
from sweeper.spec.reading import SpecError

from tiny_checkpoints import KINDS, build_tiny_checkpoint


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    """One tiny random checkpoint of each kind, with its tokenizer (seconds, offline)."""
    root = tmp_path_factory.mktemp("tiny")
    return {kind: build_tiny_checkpoint(kind, root / kind) for kind in KINDS}


def external_spec(tmp_path: Path, entries: str, pretraining: bool = False, name: str = "spec.yaml") -> Path:
    """An evaluation-only study of the given `finetuning.checkpoints` lines (or one with a nano run)."""
    finetuning = ("finetuning:\n  tasks: [wordnet-supersense-cls]\n  learning_rates: [0.001]\n  seeds: [0, 1]\n"
                  "  max_steps: 4\n  max_train_examples: 64\n  max_eval_examples: 32\n  checkpoints:\n" + entries)
    if pretraining:
        text = nano_study("external", "    - objective: mlm\n      mask_ratio: [0.4]\n", finetuning.split("\n", 1)[1])
    else:
        text = "study: external\n" + finetuning
    path = tmp_path / name
    path.write_text(text)
    return path


def entry(name: str, source, extra: str = "") -> str:
    return f"    - name: {name}\n      source: {source}\n" + extra


def trial_keys(path: Path) -> set[str]:
    return {t.trial_key for t in plan_study(load_study(path).spec).trials}


def test_an_external_checkpoint_is_planned_like_a_study_run(tmp_path, tiny):
    plan = plan_study(load_study(external_spec(tmp_path, entry("bert-tiny", tiny["bert"]), pretraining=True)).spec)
    own = [c for c in plan.checkpoints if c.run is not None]
    external = [c for c in plan.checkpoints if c.external is not None]
    assert len(own) == 1 and [c.checkpoint_id for c in external] == ["bert-tiny"]
    assert external[0].external.model_type == "bert" and external[0].model_config["hidden_size"] == 64
    per_checkpoint = {c.checkpoint_id: sum(t.checkpoint == c for t in plan.trials) for c in plan.checkpoints}
    assert set(per_checkpoint.values()) == {2}  # same tasks, learning rates and seeds for both


def test_the_key_follows_the_weights_not_the_path(tmp_path, tiny):
    first = trial_keys(external_spec(tmp_path, entry("m", tiny["bert"]), name="a.yaml"))
    moved = tmp_path / "moved"
    shutil.copytree(tiny["bert"], moved)
    assert trial_keys(external_spec(tmp_path, entry("m", moved), name="b.yaml")) == first
    weights = moved / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of the last weight
    weights.write_bytes(bytes(data))
    assert trial_keys(external_spec(tmp_path, entry("m", moved), name="c.yaml")).isdisjoint(first)


def test_another_tokenizer_is_another_checkpoint(tmp_path, tiny):
    own = trial_keys(external_spec(tmp_path, entry("m", tiny["llama"]), name="a.yaml"))
    other = trial_keys(external_spec(tmp_path, entry("m", tiny["llama"], f"      tokenizer: {tiny['qwen3']}\n"),
                                     name="b.yaml"))
    assert own.isdisjoint(other)


@pytest.mark.parametrize("problem,make,key,reason", [
    ("missing folder", lambda t, d: d / "nowhere", "source", "does not exist"),
    ("no config", lambda t, d: d / "noconfig", "source", "holds no config.json"),
    ("no weights", lambda t, d: d / "noweights", "source", "holds no weight files"),
    ("no tokenizer", lambda t, d: d / "notokenizer", "source", "holds no tokenizer files"),
])
def test_an_unusable_folder_is_a_spec_error(tmp_path, tiny, problem, make, key, reason):
    for name, drop in (("noconfig", "config.json"), ("noweights", "model.safetensors"),
                       ("notokenizer", "tokenizer.json")):
        shutil.copytree(tiny["bert"], tmp_path / name)
        for extra in ((drop, "tokenizer_config.json") if drop == "tokenizer.json" else (drop,)):
            (tmp_path / name / extra).unlink()
    path = external_spec(tmp_path, entry("m", make(tiny, tmp_path)))
    with pytest.raises(SpecError) as caught:
        _ = load_study(path).spec
    assert f"finetuning.checkpoints[0].{key}" in str(caught.value) and reason in str(caught.value)
    assert str(path) in str(caught.value)


def test_a_hub_source_that_cannot_be_resolved_exits_2_naming_it(tmp_path):
    path = external_spec(tmp_path, entry("mb", "hf:answerdotai/ModernBERT-base"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    # HF_HOME read when the child imports the hub client (tests/support/cli_process.py: READ_AT_IMPORT)
    done = sweeper_cli("plan", str(path), env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "finetuning.checkpoints[0].source" in done.stderr and "hf:answerdotai/ModernBERT-base" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_pinned_hub_commit_plans_offline_and_is_sized_at_run_time(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    commit = "0123456789abcdef0123456789abcdef01234567"
    plan = plan_study(load_study(external_spec(tmp_path, entry("mb", "hf:answerdotai/ModernBERT-base",
                                                                f"      revision: '{commit}'\n"))).spec)
    (checkpoint,) = plan.checkpoints
    assert checkpoint.external.revision == commit and checkpoint.model_config == {}


@pytest.mark.parametrize("text,key,reason", [
    ("    - name: a/b\n      source: /x\n", "checkpoints[0].name", "without '/'"),
    ("    - name: m\n      source: 'hf:not a repo'\n", "checkpoints[0].source", "not hf:<org>/<name>"),
    ("    - name: m\n      source: /x\n      revision: main\n", "checkpoints[0].revision", "goes with a hub source"),
    ("    - name: m\n      source: ftp://host/x\n", "checkpoints[0].source", "unsupported storage scheme"),
    ("    - name: m\n      source: /x\n      meta: {mask_ratio: 1.5}\n", "checkpoints[0].meta.mask_ratio", "(0, 1)"),
    ("    - name: m\n      source: /x\n    - name: m\n      source: /y\n", "checkpoints[1].name", "too"),
    ("    - name: m\n      source: /x\n      sorce: /y\n", "checkpoints[0].sorce", "did you mean 'source'"),
])
def test_malformed_entries_name_key_and_reason(tmp_path, text, key, reason):
    path = external_spec(tmp_path, text)
    with pytest.raises(SpecError) as caught:
        _ = load_study(path).spec
    assert f"finetuning.{key}" in str(caught.value) and reason in str(caught.value), str(caught.value)


def test_an_external_name_may_not_be_a_study_checkpoint(tmp_path, tiny):
    with pytest.raises(SpecError, match=r"finetuning.checkpoints\[0\].name: 'nano-mlm40-12' names a checkpoint"):
        _ = load_study(external_spec(tmp_path, entry("nano-mlm40-12", tiny["bert"]), pretraining=True)).spec


def test_a_study_needs_something_to_fine_tune(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("study: x\nfinetuning: {tasks: [wordnet-supersense-cls]}\n")
    with pytest.raises(SpecError, match="nothing to fine-tune"):
        _ = load_study(path).spec


def test_plan_prints_external_checkpoints_without_loading_weights(tmp_path, tiny):
    """`sweeper plan` sizes them from config.json: torch and safetensors are never imported."""
    entries = "".join(entry(f"{kind}-tiny", tiny[kind], "      meta: {objective: mlm}\n") for kind in KINDS)
    path = external_spec(tmp_path, entries, pretraining=True)
    code = ("import sys; from sweeper.cli import main; status = main(['plan', sys.argv[1]]); "
            "assert 'torch' not in sys.modules and 'safetensors' not in sys.modules, 'weights read'; "
            "sys.exit(status)")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "evaluated checkpoints:  6 (1 final + 0 intermediate + 5 from elsewhere)" in out
    for kind in KINDS:
        assert f"from elsewhere: {kind}-tiny: {kind}, " in out
        assert f"    {kind}-tiny " in out  # its memory line
    assert "items sized at run time" not in out  # every cost known from config.json


def test_weights_edited_after_planning_are_refused_at_import(tmp_path, tiny):
    from sweeper.run.checkpoint_import import SourceChanged, import_external_checkpoints
    from sweeper.store.layout import StudyLayout

    source = tmp_path / "bert"
    shutil.copytree(tiny["bert"], source)
    plan = plan_study(load_study(external_spec(tmp_path, entry("m", source))).spec)
    data = bytearray((source / "model.safetensors").read_bytes())
    data[-1] ^= 1
    (source / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(SourceChanged, match="changed after the study was planned"):
        import_external_checkpoints(list(plan.checkpoints), StudyLayout(str(tmp_path / "study")))


@pytest.mark.parametrize("mode", ["grid", "random", "optuna"])
def test_edited_weights_are_a_change_named_by_the_checkpoint_in_every_search_mode(tmp_path, tiny, mode):
    """A recorded external checkpoint whose weights change gets new trial keys; `sweeper run`
    would refuse to mix the two and names the checkpoint and what changed (sweeper.plan.changes)."""
    from sweeper.plan.changes import find_changes, record_settings
    from sweeper.run.recording import trial_row
    from sweeper.store.layout import StudyLayout
    from sweeper.store.results import TRIALS, write_rows

    source = tmp_path / "bert"
    shutil.copytree(tiny["bert"], source)
    search = f"  search: {mode}\n" + ("  random: {samples: 2}\n" if mode == "random" else
                                      "  optuna: {samples: 2}\n" if mode == "optuna" else "")
    path = external_spec(tmp_path, entry("m", source))
    text = path.read_text().replace("finetuning:\n", "finetuning:\n" + search, 1)
    if mode != "grid":  # a search draws the learning rate: the grid's would be ignored (a spec error)
        text = text.replace("  learning_rates: [0.001]\n", "", 1)
    path.write_text(text)
    spec = load_study(path).spec
    plan = plan_study(spec)
    assert {t.search_mode for t in plan.trials} == {mode} and len(plan.trials) == (2 if mode == "grid" else 4)
    layout = StudyLayout(str(tmp_path / "study"))
    record_settings(spec, plan, layout)
    write_rows(layout, TRIALS, [trial_row("external", t, {"validation_score": 50.0, "test_score": 40.0,
                                                          "learning_rate": 1e-3}, "ok", None) for t in plan.trials])
    assert not find_changes(spec, plan_study(spec), layout)
    data = bytearray((source / "model.safetensors").read_bytes())
    data[-1] ^= 1
    (source / "model.safetensors").write_bytes(bytes(data))
    edited = load_study(path).spec
    found = find_changes(edited, plan_study(edited), layout)
    assert len(found.trials) == len(plan.trials)
    assert all(why and all(reason.startswith("checkpoints.m.weights") for reason in why) for _, why in found.trials)


def test_a_checkpoint_with_another_tokenizer_imports_that_tokenizer(tmp_path, tiny):
    """Its own tokenizer files are not part of its key, so they do not count as a change at import."""
    from sweeper.run.checkpoint_import import import_external_checkpoints
    from sweeper.store.layout import StudyLayout

    plan = plan_study(load_study(external_spec(tmp_path, entry("m", tiny["llama"],
                                                               f"      tokenizer: {tiny['qwen3']}\n"))).spec)
    (folder,) = import_external_checkpoints(list(plan.checkpoints), StudyLayout(str(tmp_path / "study"))).values()
    assert Path(folder, "tokenizer", "tokenizer.json").read_bytes() == (tiny["qwen3"] / "tokenizer.json").read_bytes()
