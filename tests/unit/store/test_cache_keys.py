"""Every cache folder is keyed by everything that shapes its content (issue #29): each input of
each cache, changed alone, names a new folder. Fast tests on the key functions, one end to end:
a study rerun after a tokenizer change that keeps the vocabulary size prepares new task data."""
from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import ROOT
from sweeper.plan.load import load_study
from sweeper.plan.study_plan import finetune_protocol
from sweeper.run import corpora, task_prep
from sweeper.contract import registry
from sweeper.contract.configs import CorpusConfig
from sweeper.store.cache_keys import checkpoint_tokenizer_digest, tokenizer_digest
from sweeper.store.layout import StudyLayout

SMOKE = ROOT / "search_spaces" / "smoke.yaml"
TOKENIZER = {"tokenizer.json": '{"model": {"vocab": {"[PAD]": 0, "a": 1}}}', "tokenizer_config.json": "{}"}


def write_files(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


# --- the tokenizer's content hash --------------------------------------------------------------

def test_a_tokenizer_is_keyed_by_its_content_wherever_it_lies(tmp_path):
    """The corpus's `tokenizer/`, a study checkpoint (tokenizer files beside the weights) and an
    imported one (in its `tokenizer/`) holding the same files have one hash; a byte changes it."""
    corpus = write_files(tmp_path / "corpus" / "tokenizer", TOKENIZER)
    own = write_files(tmp_path / "step-8", {**TOKENIZER, "config.json": "{}", "model.safetensors": "w"})
    imported = write_files(tmp_path / "imported", {"config.json": "{}", "model.safetensors": "w"})
    write_files(imported / "tokenizer", TOKENIZER)
    digest = tokenizer_digest(str(corpus))
    assert checkpoint_tokenizer_digest(str(own)) == digest == checkpoint_tokenizer_digest(str(imported))
    (corpus / "tokenizer.json").write_text(TOKENIZER["tokenizer.json"].replace('"a": 1', '"b": 1'))
    assert tokenizer_digest(str(corpus)) != digest
    with pytest.raises(FileNotFoundError):
        tokenizer_digest(str(tmp_path / "step-8" / "nothing"))


def test_a_trial_refuses_task_data_of_another_tokenizer(tmp_path):
    """The trial's last line of defence: data encoded with another tokenizer than its checkpoint's
    is an error naming both, never token ids that mean other tokens; the checkpoint's fault, so
    a CheckpointUnloadable (its trial recorded failed with that line, no traceback: tune_grid)."""
    from trainables.backbones import CheckpointUnloadable
    from trainables.finetune_loop import check_tokenizer

    checkpoint = write_files(tmp_path / "step-8", {**TOKENIZER, "config.json": "{}"})
    digest = checkpoint_tokenizer_digest(str(checkpoint))
    check_tokenizer(str(checkpoint), {"tokenizer_digest": digest}, "data")
    check_tokenizer(None, {"tokenizer_digest": "other"}, "data")  # the random-weights control has none
    with pytest.raises(CheckpointUnloadable, match="another tokenizer"):
        check_tokenizer(str(checkpoint), {"tokenizer_digest": "0" * 16}, "data")


# --- task data ---------------------------------------------------------------------------------

@pytest.fixture
def probe(tmp_path, monkeypatch):
    """A registry holding the shipped families and tasks plus `probe-cls`: the shipped cls task
    read from a local copy of its file (so a test may edit its rows)."""
    rows = tmp_path / "probe.jsonl"
    with gzip.open(ROOT / "trainables" / "data_files" / "wordnet" / "supersense_cls.jsonl.gz", "rt") as source:
        rows.write_text("".join(source.readlines()[:50]))
    with registry.using(registry.shipped()):
        info = registry.register_task(replace(registry.get_task("wordnet-supersense-cls"), name="probe-cls",
                                              source=str(rows)))
        yield {
            "info": info,
            "rows": rows,
            "protocol": finetune_protocol(load_study(SMOKE).spec, "wordnet-supersense-cls"),
        }


def edit_rows(probe, monkeypatch):
    text = probe["rows"].read_text()
    probe["rows"].write_text(text + text.splitlines(keepends=True)[0])  # one row more, at the same path


def other_definition(probe, monkeypatch):
    registry.register_task(replace(probe["info"], label_field="other"))


def hub_source(revision):
    def change(probe, monkeypatch):
        registry.register_task(replace(probe["info"], source="someone/data:config"))
        monkeypatch.setattr(task_prep, "hub_dataset_revision", lambda repo, revision_=None: revision)
    return change


def other_format(probe, monkeypatch):
    monkeypatch.setattr(task_prep, "TASK_DATA_FORMAT", task_prep.TASK_DATA_FORMAT + 1)


def other_family_code(probe, monkeypatch):
    family = registry.family_of(probe["info"].family)
    registry.current().families[family.name] = replace(family, implementation="elsewhere:Family")


def protocol_change(**fields):
    def change(probe, monkeypatch):
        probe["protocol"] = replace(probe["protocol"], **fields)
    return change


def other_tokenizer(probe, monkeypatch):
    probe["tokenizer"] = "f" * 16


TASK_INPUTS = {
    "tokenizer content": other_tokenizer,
    "source rows (same path)": edit_rows,
    "task definition": other_definition,
    "task-prep code version": other_format,
    "family implementation": other_family_code,
    "max_length": protocol_change(max_length=32),
    "max_train_examples": protocol_change(max_train_examples=7),
    "max_eval_examples": protocol_change(max_eval_examples=7),
}


@pytest.mark.parametrize("change", TASK_INPUTS.values(), ids=TASK_INPUTS.keys())
def test_each_input_of_task_data_names_a_new_folder(probe, monkeypatch, change):
    probe["tokenizer"] = "a" * 16
    before = task_prep.task_folder_name("probe-cls", probe["tokenizer"], probe["protocol"])
    assert task_prep.task_folder_name("probe-cls", probe["tokenizer"], probe["protocol"]) == before, "stable"
    change(probe, monkeypatch)
    after = task_prep.task_folder_name("probe-cls", probe["tokenizer"], probe["protocol"])
    assert after != before and after.startswith(f"probe-cls-len{probe['protocol'].max_length}-")


def test_an_encoding_setting_names_a_new_folder():
    qa = "wordnet-supersense-qa"
    protocol = finetune_protocol(load_study(SMOKE).spec, qa)
    other = replace(protocol, family_settings={**protocol.family_settings, "doc_stride": 4})
    assert task_prep.task_folder_name(qa, "a" * 16, protocol) != task_prep.task_folder_name(qa, "a" * 16, other)


def test_paper_scoring_names_a_new_folder_and_standard_keeps_the_former_name(probe):
    """`finetuning.scoring: paper` encodes other inputs and labels: its own folder; `standard`
    (the default) hashes as before the setting existed, so prepared data is found again."""
    protocol = probe["protocol"]
    assert protocol.scoring == "standard"
    identity = task_prep.task_data_identity("probe-cls", "a" * 16, protocol)
    assert "scoring" not in identity["settings"]
    assert task_prep.encoding_settings(protocol, "probe-cls")["scoring"] == "standard"  # what the family reads
    paper = replace(protocol, scoring="paper")
    assert task_prep.task_data_identity("probe-cls", "a" * 16, paper)["settings"]["scoring"] == "paper"
    assert task_prep.task_folder_name("probe-cls", "a" * 16, paper) != task_prep.task_folder_name(
        "probe-cls", "a" * 16, protocol)
    # Trial keys likewise: `scoring` is hashed only when set away from standard (KEYED_IF_SET).
    assert "scoring" not in protocol.key_fields() and paper.key_fields()["scoring"] == "paper"


def test_a_hub_task_is_keyed_by_the_commit_it_is_read_at(probe, monkeypatch):
    """Its id and the commit the hub names now (pinned for the preparation); offline, the id alone."""
    names = {}
    for revision in ("c1", "c2", None):
        hub_source(revision)(probe, monkeypatch)
        names[revision] = task_prep.task_folder_name("probe-cls", "a" * 16, probe["protocol"])
        assert task_prep.task_source_identity(registry.get_task("probe-cls")) == {
            "hub": "someone/data:config", "revision": revision}
    assert len(set(names.values())) == 3


def test_a_shipped_task_is_keyed_by_its_file_content():
    info = registry.get_task("wordnet-supersense-cls")
    identity = task_prep.task_source_identity(info)
    assert len(identity["sha256"]) == 64


# --- corpora -----------------------------------------------------------------------------------

@pytest.fixture
def corpus_source(tmp_path) -> Path:
    source = tmp_path / "corpus.jsonl"
    source.write_text("".join(json.dumps({"text": f"document {i}", "body": "x"}) + "\n" for i in range(20)))
    return source


def corpus_folder(config: CorpusConfig) -> str:
    return corpora.corpus_dir(StudyLayout("/study"), config)


def rewrite_source(config, source, tmp_path, monkeypatch):
    source.write_text(source.read_text().replace("document 3", "document 4"))  # same name, same size
    return config


def other_training(config, source, tmp_path, monkeypatch):
    monkeypatch.setattr(corpora, "TOKENIZER_TRAINING", corpora.TOKENIZER_TRAINING + 1)
    return config


def field_change(**fields):
    return lambda config, source, tmp_path, monkeypatch: replace(config, **fields)


CORPUS_INPUTS = {
    "source content (same path)": rewrite_source,
    "source": field_change(source="wordnet"),
    "text_column": field_change(text_column="body"),
    "tokenizer": field_change(tokenizer="some/tokenizer"),
    "vocab_size": field_change(vocab_size=300),
    "tokenizer_sample_documents": field_change(tokenizer_sample_documents=10),
    "tokenizer training code": other_training,
    "max_tokens": field_change(max_tokens=1000),
    "max_documents": field_change(max_documents=10),
}


@pytest.mark.parametrize("change", CORPUS_INPUTS.values(), ids=CORPUS_INPUTS.keys())
def test_each_input_of_a_corpus_names_a_new_folder(corpus_source, tmp_path, monkeypatch, change):
    config = CorpusConfig(source=str(corpus_source), vocab_size=200, max_tokens=5000, max_documents=20,
                          tokenizer_sample_documents=20)
    before = corpus_folder(config)
    assert corpus_folder(config) == before, "stable"
    assert corpus_folder(change(config, corpus_source, tmp_path, monkeypatch)) != before


def test_a_given_tokenizer_is_keyed_by_its_content_or_its_commit(tmp_path, monkeypatch):
    """A local tokenizer folder by its files; a hub one by the commit its name resolves to."""
    folder = write_files(tmp_path / "tok", TOKENIZER)
    config = CorpusConfig(source="wordnet", tokenizer=str(folder))
    local = corpus_folder(config)
    (folder / "tokenizer.json").write_text("{}")
    assert corpus_folder(config) != local
    hub = replace(config, tokenizer="someone/tokenizer")
    folders = set()
    for commit in ("c1", "c2"):
        monkeypatch.setattr(corpora, "resolve_hub_revision", lambda key, repo, revision, c=commit: c)
        folders.add(corpus_folder(hub))
    assert len(folders) == 2
    # A hub tokenizer's corpus does not change with the vocabulary size of one trained here.
    assert corpus_folder(replace(hub, vocab_size=4096)) == corpus_folder(hub)


def test_a_corpus_begun_under_the_earlier_key_is_kept(corpus_source, tmp_path):
    """A study that began its corpus before the key covered the source's content keeps it (and
    the tokenizer its checkpoints carry); any other study prepares under the full key."""
    layout = StudyLayout(str(tmp_path / "study"))
    config = CorpusConfig(source=str(corpus_source), vocab_size=200, max_tokens=5000)
    full = corpora.corpus_dir(layout, config)
    legacy = Path(layout.corpus(corpora.legacy_corpus_key(config)))
    assert Path(full) != legacy
    write_files(legacy / "tokenizer", TOKENIZER)  # begun: its tokenizer published
    assert corpora.corpus_dir(layout, config) == str(legacy)
    assert corpora.corpus_dir(layout, replace(config, vocab_size=300)) != str(legacy)


def test_a_longer_corpus_takes_the_tokenizer_of_the_shorter_one(corpus_source, tmp_path):
    """A run added with a longer stream prepares a new corpus (another token limit) with the
    tokenizer of the study's first one: the runs of a study share one tokenizer, though training
    it again would give another. A change of the tokenizer's inputs trains a new one."""
    layout = StudyLayout(str(tmp_path / "study"))
    short = CorpusConfig(source=str(corpus_source), vocab_size=200, max_tokens=5000)
    first = Path(corpora.corpus_dir(layout, short))
    corpora.share_tokenizer(layout, short, str(first))
    write_files(first / "tokenizer", TOKENIZER)  # as its preparation publishes it
    longer = replace(short, max_tokens=50_000)
    second = Path(corpora.corpus_dir(layout, longer))
    assert second != first
    corpora.share_tokenizer(layout, longer, str(second))
    assert tokenizer_digest(str(second / "tokenizer")) == tokenizer_digest(str(first / "tokenizer"))
    other = replace(short, vocab_size=300)
    third = Path(corpora.corpus_dir(layout, other))
    corpora.share_tokenizer(layout, other, str(third))
    assert not (third / "tokenizer").exists()


# --- imported checkpoints ----------------------------------------------------------------------

CHECKPOINT = {"config.json": json.dumps({"model_type": "bert", "hidden_size": 8}),
              "model.safetensors": "\x02\x00\x00\x00\x00\x00\x00\x00{}",  # the smallest safetensors file (no tensor)
              **TOKENIZER}


@pytest.mark.parametrize("changed", ["config.json", "model.safetensors", "tokenizer.json"])
def test_an_imported_checkpoint_is_keyed_by_its_files_content(tmp_path, changed):
    """Already keyed by content (sweeper.plan.checkpoint_sources): the same files at another path are the
    same checkpoint, one file edited is another."""
    from sweeper.plan.checkpoint_sources import resolve_external
    from sweeper.spec.checkpoints import ExternalCheckpointSpec

    def folder_of(source: Path) -> str:
        external = resolve_external(ExternalCheckpointSpec(name="ext", source=str(source)))
        return StudyLayout("/study").external_checkpoint(external.name, external.key)

    first = write_files(tmp_path / "a", CHECKPOINT)
    copy = write_files(tmp_path / "b", CHECKPOINT)
    assert folder_of(first) == folder_of(copy)
    (copy / changed).write_text(CHECKPOINT[changed] + " ")
    assert folder_of(copy) != folder_of(first)


# --- end to end --------------------------------------------------------------------------------
