"""Checkpoints from anywhere, safely (#38): hostile or broken model folders built here are refused
by `sweeper plan` (exit 2, `file:line: key: reason`, no traceback) within 10 s of CPU and 2 GiB of
address space; nothing outside a source enters the study; no payload in a folder ever runs; and a
folder that passes the plan but fails at load is a recorded failed trial (exit 1), while a folder
shaped like the Hugging Face hub cache (snapshot links into ../../blobs/) is planned, imported and
fine-tuned."""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import resource
import secrets
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from cli_process import sweeper_cli
from conftest import ROOT

from tiny_checkpoints import build_tiny_checkpoint

ADDRESS_SPACE = 2 << 30
CPU_SECONDS = 10
SECRET = f"outside-secret-{secrets.token_hex(16)}"
"""Written into every file outside the sources: no byte of it may reach a study or the output."""


LIMITS = {resource.RLIMIT_AS: ADDRESS_SPACE, resource.RLIMIT_CPU: CPU_SECONDS}
"""The child's resource limits (a plan bomb is stopped by them, not by the machine)."""


def plan(spec: Path, **env: str) -> subprocess.CompletedProcess:
    return sweeper_cli("plan", str(spec), limits=LIMITS, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1", **env})


class Payload:
    """Unpickling (or importing the module written by `marker_code`) creates the marker file."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return open, (self.marker, "w")


def marker_code(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').write('ran')\n"


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> Path:
    return build_tiny_checkpoint("bert", tmp_path_factory.mktemp("tiny") / "bert")


@pytest.fixture
def outside(tmp_path) -> Path:
    """A file outside every source, holding SECRET."""
    path = tmp_path / "elsewhere" / "secret.txt"
    path.parent.mkdir()
    path.write_text(f"{SECRET}\n" * 4)
    return path


def spec_of(tmp_path: Path, *entries: tuple[str, Path], extra: str = "", head: str = "") -> Path:
    lines = "".join(f"    - name: {json.dumps(name)}\n      source: {source}\n" for name, source in entries)
    path = tmp_path / "spec.yaml"
    path.write_text(f"study: hostile\n{head}finetuning:\n  tasks: [wordnet-supersense-cls]\n  learning_rates: [0.001]\n"
                    f"  seeds: [0]\n  max_steps: 3\n  batch_size: 8\n  micro_batch_size: 8\n  max_length: 48\n"
                    f"  max_train_examples: 32\n  max_eval_examples: 16\n  checkpoints:\n{lines}{extra}")
    return path


def edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (folder / "config.json").write_text(json.dumps(config))


def link_out(folder: Path, name: str, target: Path) -> None:
    (folder / name).unlink(missing_ok=True)
    (folder / name).symlink_to(target)


def custom_model(folder: Path, marker: Path) -> None:
    edit_config(
        folder, model_type="evil_arch", auto_map={"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"}
    )
    (folder / "evil.py").write_text(marker_code(marker))


def custom_tokenizer(folder: Path, marker: Path) -> None:
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.update(tokenizer_class="EvilTokenizer", auto_map={"AutoTokenizer": ["evil_tok.EvilTokenizer", None]})
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "evil_tok.py").write_text(marker_code(marker))


def pickled_weights(folder: Path, marker: Path) -> None:
    import torch

    (folder / "model.safetensors").unlink()
    torch.save({"weight": Payload(str(marker))}, folder / "pytorch_model.bin")


def missing_shard(folder: Path, shard: str) -> None:
    (folder / "model.safetensors").rename(folder / "model-00001-of-00002.safetensors")
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": shard}}))


def truncate(path: Path) -> None:
    with open(path, "r+b") as handle:
        handle.truncate(path.stat().st_size // 2)


def huge_config(folder: Path) -> None:
    with open(folder / "config.json", "r+b") as handle:
        handle.truncate(3 << 30)  # sparse: 3 GiB that occupy no disk


HOSTILE = {  # id -> (make(folder, outside, marker), the reason's words)
    "weights linked out": (lambda f, o, m: link_out(f, "model.safetensors", o), "resolves outside the source folder"),
    "config linked out": (lambda f, o, m: link_out(f, "config.json", o), "resolves outside the source folder"),
    "tokenizer linked out": (lambda f, o, m: link_out(f, "tokenizer.json", o), "resolves outside the source folder"),
    "weights linked to a device": (lambda f, o, m: link_out(f, "model.safetensors", Path("/dev/zero")),
                                   "resolves outside the source folder"),
    "config of 3 GiB": (lambda f, o, m: huge_config(f), "config.json: is 3,221,225,472 bytes, more than"),
    "config nested 100,000 deep": (lambda f, o, m: (f / "config.json").write_text("[" * 100_000 + "]" * 100_000),
                                   "config.json: nests 100000 levels deep"),
    "config not JSON": (lambda f, o, m: (f / "config.json").write_bytes(b"\xff\xfe{"), "config.json: is not UTF-8"),
    "zero heads": (lambda f, o, m: edit_config(f, num_attention_heads=0), "num_attention_heads: must lie in [1,"),
    "infinite width": (lambda f, o, m: (f / "config.json").write_text(
        (f / "config.json").read_text().replace('"hidden_size": 64', '"hidden_size": Infinity')),
        "hidden_size: must be a whole number, got inf"),
    "negative layers": (lambda f, o, m: edit_config(f, num_hidden_layers=-1), "num_hidden_layers: must lie in [1,"),
    "fractional vocabulary": (lambda f, o, m: edit_config(f, vocab_size=1536.5), "vocab_size: must be a whole number"),
    "heads not dividing hidden": (lambda f, o, m: edit_config(f, num_attention_heads=3),
                                  "num_attention_heads: 3 heads do not divide hidden_size 64"),
    "kv heads not dividing heads": (lambda f, o, m: edit_config(f, num_key_value_heads=3),
                                    "num_key_value_heads: 3 key/value heads do not divide"),
    "no model_type": (lambda f, o, m: edit_config(f, model_type=None), "model_type: missing"),
    "architecture needing its own code": (lambda f, o, m: custom_model(f, m),
                                          "model_type: 'evil_arch' is not an architecture the installed transformers"),
    "safetensors cut short": (lambda f, o, m: truncate(f / "model.safetensors"),
                              "model.safetensors: tensor 'embeddings."),
    "safetensors of garbage": (lambda f, o, m: (f / "model.safetensors").write_bytes(b"\xff" * 4096),
                               "model.safetensors: not a safetensors file"),
    "shard missing": (lambda f, o, m: missing_shard(f, "model-00002-of-00002.safetensors"),
                      "names shard 'model-00002-of-00002.safetensors', which the folder does not hold"),
    "shard out of the folder": (lambda f, o, m: missing_shard(f, "../elsewhere/secret.txt"),
                                "not a file name of this folder"),
    "tokenizer with its own code": (lambda f, o, m: custom_tokenizer(f, m), "auto_map asks for the "
                                                                            "tokenizer's own code"),
    "pickle payload in pytorch_model.bin": (lambda f, o, m: pickled_weights(f, m),
                                            "pytorch_model.bin: its pickle names io.open"),
}


def assert_refused(done: subprocess.CompletedProcess, spec: Path, key: str, words: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
    assert "Traceback" not in done.stderr + done.stdout, done.stderr[-3000:]
    line = done.stderr.strip().splitlines()[-1]
    assert re.match(rf"spec error: {re.escape(str(spec))}:\d+: {re.escape(key)}: ", line), line
    assert words in line, line
    assert SECRET not in done.stdout + done.stderr


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_folder_is_refused_by_the_plan_naming_file_and_field(tmp_path, bert, outside, case):
    make, words = HOSTILE[case]
    folder, marker = tmp_path / "model", tmp_path / "payload-ran"
    shutil.copytree(bert, folder)
    make(folder, outside, marker)
    spec = spec_of(tmp_path, ("m", folder))
    done = plan(spec)
    assert_refused(done, spec, "finetuning.checkpoints[0].source", words)
    assert str(folder) in done.stderr.splitlines()[-1]  # the file is named
    assert not marker.exists(), "a payload of the folder ran"


def test_a_named_tokenizer_folder_with_custom_code_is_refused(tmp_path, bert):
    tokenizer, marker = tmp_path / "tok", tmp_path / "payload-ran"
    shutil.copytree(bert, tokenizer)
    custom_tokenizer(tokenizer, marker)
    spec = spec_of(tmp_path, ("m", bert), extra=f"      tokenizer: {tokenizer}\n")
    assert_refused(
        plan(spec), spec, "finetuning.checkpoints[0].tokenizer", "auto_map asks for the tokenizer's own code"
    )
    assert not marker.exists()


@pytest.mark.parametrize("first,second", [
    (unicodedata.normalize("NFC", "modèle"), unicodedata.normalize("NFD", "modèle")),
    ("Bert-Tiny", "bert-tiny"),
])
def test_names_equal_up_to_normalisation_or_case_are_refused(tmp_path, bert, first, second):
    other = tmp_path / "other"
    build_tiny_checkpoint("bert", other, seed=1)
    spec = spec_of(tmp_path, (first, bert), (second, other))
    assert_refused(plan(spec), spec, "finetuning.checkpoints[1].name", "up to Unicode normalisation or case")


def test_one_folder_under_two_names_is_refused(tmp_path, bert):
    copy = tmp_path / "copy"
    shutil.copytree(bert, copy)
    spec = spec_of(tmp_path, ("a", bert), ("b", copy))
    assert_refused(plan(spec), spec, "finetuning.checkpoints[1].source",
                   "holds the same weights and tokenizer as checkpoints[0] (a)")


@pytest.mark.parametrize("name", ["TPU", "gpu", "memory", "object_store_memory", "node:10.0.0.1",
                                  "accelerator_type:A100", "neuron_cores",
                                  "bundle_group_0_0123456789abcdef0123456789abcdef"])
def test_a_resource_ray_reserves_is_refused(tmp_path, bert, name):
    spec = spec_of(tmp_path, ("m", bert), head=f"resources:\n  custom_resources_per_trial: {{{json.dumps(name)}: 1}}\n")
    done = plan(spec)
    assert_refused(done, spec, f"resources.custom_resources_per_trial.{name}", "" if name == "gpu" else "Ray reserves")


def test_the_reserved_names_cover_the_installed_rays_accelerators():
    from ray_private import accelerator_resource_names
    from sweeper.spec.resources import custom_resource_problem

    for name in accelerator_resource_names():
        assert custom_resource_problem(name), name
    assert custom_resource_problem("trial_node") is None and custom_resource_problem("my_group_a") is None


def test_the_shipped_names_are_those_transformers_loads():
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

    from sweeper.plan.checkpoint_checks import shipped_model_types, shipped_tokenizer_classes

    assert shipped_model_types() == frozenset(MODEL_MAPPING_NAMES)
    assert {
        name.removesuffix("Fast") for name in TOKENIZER_MAPPING_NAMES.values() if name
    } <= shipped_tokenizer_classes()


def test_a_weights_only_pickle_passes_and_its_globals_are_read_not_run(tmp_path):
    import torch

    from sweeper.plan.checkpoint_checks import bin_problem

    torch.save(
        {"weight": torch.ones(2, 3), "bias": torch.zeros(3, dtype=torch.bfloat16)}, tmp_path / "pytorch_model.bin"
    )
    assert bin_problem(str(tmp_path), "pytorch_model.bin") is None
    marker = tmp_path / "ran"
    (tmp_path / "legacy.bin").write_bytes(pickle.dumps(Payload(str(marker))))
    assert "not a torch.save archive" in bin_problem(str(tmp_path), "legacy.bin")
    assert not marker.exists()


def test_the_workers_loads_refuse_a_folders_code_without_asking(tmp_path, bert, monkeypatch):
    """What a folder that got past the plan meets on a worker: transformers refuses its code with an
    error (trust_remote_code=False is passed), never prompts, never runs it."""
    import builtins

    import torch

    from trainables.backbones import load_hugging_face_model
    from trainables.tasks.data import task_tokenizer

    asked = []
    monkeypatch.setattr(builtins, "input", lambda *a: asked.append(a) or "y")
    tokenizer, model, marker = tmp_path / "tok", tmp_path / "model", tmp_path / "payload-ran"
    shutil.copytree(bert, tokenizer)
    (tokenizer / "config.json").unlink()  # as an imported checkpoint's tokenizer/ folder holds it
    custom_tokenizer(tokenizer, marker)
    monkeypatch.syspath_prepend(str(tokenizer))  # were its module imported, the marker would appear
    with pytest.raises(ValueError, match="custom code"):
        task_tokenizer(str(tokenizer))
    shutil.copytree(bert, model)
    custom_model(model, marker)
    monkeypatch.syspath_prepend(str(model))
    with pytest.raises((ValueError, KeyError)):
        load_hugging_face_model(model, torch.float32)
    assert not asked and not marker.exists()


def test_a_file_swapped_for_a_link_after_the_plan_is_refused_at_import(tmp_path, bert, outside):
    """The study's side of the rule: the import checks again, and copies nothing from outside."""
    from sweeper.plan.load import load_study
    from sweeper.plan.source_tree import OutsideSource
    from sweeper.run.checkpoint_import import import_external_checkpoints
    from sweeper.store.layout import StudyLayout

    folder = tmp_path / "model"
    shutil.copytree(bert, folder)
    planned = load_study(spec_of(tmp_path, ("m", folder))).plan
    link_out(folder, "tokenizer.json", outside)
    study = tmp_path / "study"
    with pytest.raises(OutsideSource, match="resolves outside the source folder"):
        import_external_checkpoints(list(planned.checkpoints), StudyLayout(str(study)))
    failed: dict = {}
    assert import_external_checkpoints(list(planned.checkpoints), StudyLayout(str(study)), failed) == {}
    assert "OutsideSource" in failed["m"] and "\n" not in failed["m"]
    assert_no_secret(study)
    assert not any(p.is_file() for p in study.rglob("*")), "a half-copied checkpoint stayed in the study"


def assert_no_secret(study: Path) -> None:
    for path in study.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert SECRET.encode() not in path.read_bytes(), path


def hub_cache_folder(root: Path, bert: Path, outside: Path) -> Path:
    """`root/models--org--tiny/snapshots/<commit>/` whose files are links into `../../blobs/<sha256>`,
    as huggingface_hub lays out its cache, plus a README that links out of the tree (not copied)."""
    model = root / "models--org--tiny"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot, blobs = model / "snapshots" / commit, model / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for file in bert.iterdir():
        data = file.read_bytes()
        blob = blobs / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / file.name).symlink_to(Path("..", "..", "blobs", blob.name))
    (snapshot / "README.md").symlink_to(outside)
    (model / "refs").mkdir()
    (model / "refs" / "main").write_text(commit)
    return snapshot


def test_a_hub_cache_folder_plans_under_the_limits_and_is_keyed_by_content(tmp_path, bert, outside):
    """Its links into ../../blobs/ are its own tree; a README linking out is not a file the study reads."""
    from sweeper.plan.load import load_study

    snapshot = hub_cache_folder(tmp_path / "hub", bert, outside)
    spec = spec_of(tmp_path, ("hub-tiny", snapshot))
    done = plan(spec)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "from elsewhere: hub-tiny: bert, " in done.stdout and SECRET not in done.stdout
    keyed = load_study(spec).plan.checkpoints[0].external.key
    assert keyed == load_study(spec_of(tmp_path, ("hub-tiny", bert))).plan.checkpoints[0].external.key


HUB_IMPORT = """
import sys
from sweeper.plan.load import load_study
from sweeper.run.checkpoint_import import import_external_checkpoints
from sweeper.store.layout import StudyLayout
failed = {}
plan = load_study(sys.argv[1]).plan
print(sorted(import_external_checkpoints(list(plan.checkpoints), StudyLayout(sys.argv[2]), failed)), failed)
"""


def test_a_hub_model_is_imported_from_its_cache_and_a_snapshot_linking_out_is_refused(tmp_path, bert, outside):
    """`hf:org/tiny` at a pinned commit, offline, from a hub cache built here: its snapshot's links
    into blobs/ are copied as files; the same cache with a weight linking out imports nothing."""
    cache = tmp_path / "hf" / "hub"
    snapshot = hub_cache_folder(cache, bert, outside)
    spec = spec_of(tmp_path, ("hub-tiny", "hf:org/tiny"), extra=f"      revision: '{snapshot.name}'\n")
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    study = tmp_path / "study"
    done = subprocess.run([sys.executable, "-c", HUB_IMPORT, str(spec), str(study)], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0 and "['hub-tiny'] {}" in done.stdout, done.stdout + done.stderr[-3000:]
    (folder,) = (study / "cache" / "checkpoints").iterdir()
    assert (folder / "model.safetensors").read_bytes() == (bert / "model.safetensors").read_bytes()
    assert not any(p.is_symlink() for p in folder.rglob("*")) and not (folder / "README.md").exists()

    link_out(snapshot, "model.safetensors", outside)
    shutil.rmtree(study)
    done = subprocess.run([sys.executable, "-c", HUB_IMPORT, str(spec), str(study)], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0 and "[] {'hub-tiny': " in done.stdout, done.stdout + done.stderr[-3000:]
    assert "not imported: OutsideSource: " in done.stdout
    assert "resolves outside the source folder" in done.stdout
    assert_no_secret(study)


def test_a_hub_models_config_is_checked_as_a_folders_is(tmp_path, bert, outside):
    cache = tmp_path / "hf" / "hub"
    snapshot = hub_cache_folder(cache, bert, outside)
    config = json.loads((snapshot / "config.json").read_text())
    (snapshot / "config.json").unlink()
    (snapshot / "config.json").write_text(json.dumps({**config, "num_attention_heads": 0}))
    spec = spec_of(tmp_path, ("hub-tiny", "hf:org/tiny"), extra=f"      revision: '{snapshot.name}'\n")
    assert_refused(plan(spec, HF_HOME=str(tmp_path / "hf")), spec, "finetuning.checkpoints[0].source",
                   "hf:org/tiny at 0123456789ab: config.json: num_attention_heads: must lie in [1,")
