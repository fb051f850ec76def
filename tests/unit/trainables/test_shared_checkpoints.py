"""Checkpoints others can load: a folder saved as pretraining saves it (`save_hf`, both its plain
and its FSDP branch) carries its modeling code, so a process that cannot import `trainables` loads
it with `trust_remote_code=True` and computes what the study's model computes; without that flag
transformers refuses with its own message; and with `import trainables.model` the locally registered
classes load, as before, without running anything of the folder."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM
from transformers.dynamic_module_utils import get_imports, get_relative_imports

from trainables import model as model_module
from trainables.model import LlamaEncoderConfig, LlamaEncoderForMaskedLM, LlamaEncoderModel, build_model
from trainables.pretrain_loop import save_hf
from trainables.tokenizer import train_wordpiece_tokenizer

TINY = dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2)
SAVE_PATHS = ("plain", "fsdp")
"""save_hf's two branches: the model itself (local mode, DDP) and a gathered state (FSDP2)."""
HF_FILES = {"config.json", "model.safetensors", "model.py"}
EXPECTED_AUTO_MAP = {"AutoConfig": "model.LlamaEncoderConfig", "AutoModel": "model.LlamaEncoderModel",
                     "AutoModelForMaskedLM": "model.LlamaEncoderForMaskedLM"}
TEXT = "the cat sat on the mat"

# What a colleague's process runs: torch and transformers installed, this project not. `python -I -S`
# reads no PYTHON* variable, puts neither the working directory nor site-packages on sys.path and
# processes no .pth file (this project's editable install is one); site-packages alone goes back.
CHILD = r"""
import importlib.util, json, sys
args = json.loads(sys.argv[1])
sys.path += args["site_packages"]
assert importlib.util.find_spec("trainables") is None and importlib.util.find_spec("sweeper") is None
import torch
from pathlib import Path
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

torch.set_num_threads(args["threads"])
inputs = load_file(args["inputs"])
report = {"refused": [], "classes": [], "code_cached_before_trust": None}
for folder in args["folders"].values():
    for auto in (AutoModel, AutoModelForMaskedLM):
        for flag in ({}, {"trust_remote_code": False}):
            try:
                auto.from_pretrained(folder, **flag)
                report["refused"].append(None)
            except Exception as error:
                report["refused"].append([type(error).__module__, type(error).__name__, str(error)])
report["code_cached_before_trust"] = sorted(str(p) for p in Path(args["hf_home"]).rglob("*.py")
                                            if p.name == "model.py")
outputs = {}
for name, folder in args["folders"].items():
    backbone = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    masked_lm = AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True).eval()
    report["classes"] += [f"{type(m).__module__}.{type(m).__name__}" for m in (backbone, masked_lm)]
    with torch.no_grad():
        mask = inputs["attention_mask"]
        outputs[f"{name}/hidden"] = backbone(inputs["input_ids"], attention_mask=mask).last_hidden_state
        outputs[f"{name}/logits"] = masked_lm(inputs["input_ids"], attention_mask=mask).logits
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    outputs[f"{name}/tokens"] = torch.tensor(tokenizer(args["text"])["input_ids"])
report["project_modules"] = sorted(m for m in sys.modules if m.split(".")[0] in ("trainables", "sweeper"))
save_file(outputs, args["outputs"])
Path(args["report"]).write_text(json.dumps(report))  # not stdout: transformers' prompt is printed there
"""


def forward(model: LlamaEncoderForMaskedLM, inputs: dict) -> dict:
    with torch.no_grad():
        return {"hidden": model.model(**inputs).last_hidden_state, "logits": model(**inputs).logits}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(model, its outputs on a fixed padded batch, its tokenizer, {save path: folder}, files save_hf wrote)."""
    root = tmp_path_factory.mktemp("shared")
    model = build_model(LlamaEncoderConfig(**TINY), seed=0).eval()
    tokenizer = train_wordpiece_tokenizer([TEXT, "a dog on a log"] * 10, vocab_size=300)
    generator = torch.Generator().manual_seed(0)
    inputs = {"input_ids": torch.randint(5, 300, (2, 12), generator=generator),
              "attention_mask": torch.ones(2, 12, dtype=torch.long)}
    inputs["attention_mask"][1, 8:] = 0  # a padded row: the mask path too
    folders, written = {}, {}
    for name in SAVE_PATHS:
        folder = root / name
        save_hf(model, folder, model.state_dict() if name == "fsdp" else None)
        written[name] = {p.name for p in folder.iterdir()}
        tokenizer.save_pretrained(folder)  # as save_checkpoint copies the corpus's tokenizer beside
        folders[name] = folder
    return model, inputs, tokenizer, folders, written


@pytest.fixture(scope="module")
def colleague(saved, tmp_path_factory):
    """(report, outputs) of the clean process (CHILD) that loaded both folders."""
    _, inputs, _, folders, _ = saved
    work = tmp_path_factory.mktemp("colleague")
    save_file(inputs, str(work / "inputs.safetensors"))
    paths = sysconfig.get_paths()
    args = {"site_packages": sorted({paths["purelib"], paths["platlib"]}), "threads": torch.get_num_threads(),
            "inputs": str(work / "inputs.safetensors"), "outputs": str(work / "outputs.safetensors"),
            "report": str(work / "report.json"),
            "folders": {name: str(folder) for name, folder in folders.items()}, "hf_home": str(work / "hf"),
            "text": TEXT}
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "HF_MODULES_CACHE")}
    env.update(HF_HOME=args["hf_home"], HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", CHILD, json.dumps(args)], cwd=work, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(Path(args["report"]).read_text()), load_file(args["outputs"])


def test_the_saved_folder_carries_self_contained_code_and_its_auto_map(saved):
    model, _, _, folders, written = saved
    source = Path(model_module.__file__)
    configs = {}
    for name, folder in folders.items():
        assert written[name] == HF_FILES, name
        configs[name] = json.loads((folder / "config.json").read_text())
        assert configs[name]["auto_map"] == EXPECTED_AUTO_MAP
        assert configs[name]["architectures"] == ["LlamaEncoderForMaskedLM"]  # not FSDP's renamed class
        copy = folder / "model.py"
        assert copy.read_bytes() == source.read_bytes()
        # What transformers' loader requires installed (get_imports) and copies beside (relative imports).
        assert set(get_imports(copy)) - set(sys.stdlib_module_names) == {"torch", "transformers"}
        assert get_relative_imports(copy) == []
    assert configs["plain"] == configs["fsdp"]
    plain, fsdp = (load_file(str(folders[name] / "model.safetensors")) for name in SAVE_PATHS)
    assert plain.keys() == fsdp.keys() and all(torch.equal(plain[key], fsdp[key]) for key in plain)


@pytest.mark.slow  # a clean interpreter loads both folders (`colleague`): 10-11 s of the quick tier
def test_a_process_without_the_project_loads_it_with_trust_remote_code(saved, colleague):
    model, inputs, tokenizer, _, _ = saved
    report, outputs = colleague
    assert report["project_modules"] == []
    assert all(cls.startswith("transformers_modules.") for cls in report["classes"]), report["classes"]
    assert [cls.rsplit(".", 1)[-1] for cls in report["classes"]] == \
           ["LlamaEncoderModel", "LlamaEncoderForMaskedLM"] * len(SAVE_PATHS)
    expected = forward(model, inputs)
    for name in SAVE_PATHS:
        for kind in ("hidden", "logits"):
            got = outputs[f"{name}/{kind}"]
            assert got.dtype == torch.float32 and got.shape == expected[kind].shape
            # Same float32 weights, same code, same kernels and threads: equal, or sums of <= 64 O(1) terms
            # in another order (64 * 2**-24 ~ 4e-6).
            assert torch.allclose(got, expected[kind], rtol=0, atol=1e-5), (got - expected[kind]).abs().max()
        assert outputs[f"{name}/tokens"].tolist() == tokenizer(TEXT)["input_ids"]


@pytest.mark.slow  # a clean interpreter loads both folders (`colleague`): 10-11 s of the quick tier
def test_without_trust_remote_code_transformers_refuses_and_runs_nothing(colleague):
    report, _ = colleague
    assert len(report["refused"]) == 2 * 2 * len(SAVE_PATHS)  # folders x Auto classes x (unset, False)
    for refusal in report["refused"]:
        assert refusal is not None, "loaded without trust_remote_code"
        module, name, message = refusal
        assert (module, name) == ("builtins", "ValueError")
        assert "contains custom code" in message and "pass the argument `trust_remote_code=True`" in message
    assert report["code_cached_before_trust"] == [], "the folder's code was copied before it was trusted"


def test_with_trainables_imported_the_local_classes_load_and_the_folder_code_never_runs(saved, tmp_path):
    model, inputs, _, folders, _ = saved
    # A folder whose model.py was replaced: the study's loads must not run it.
    planted = tmp_path / "planted"
    shutil.copytree(folders["plain"], planted)
    marker = tmp_path / "planted-code-ran"
    (planted / "model.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    assert type(AutoConfig.from_pretrained(planted)) is LlamaEncoderConfig
    for flag in ({}, {"trust_remote_code": True}):  # the local class wins either way
        backbone = AutoModel.from_pretrained(planted, **flag).eval()
        masked_lm = AutoModelForMaskedLM.from_pretrained(planted, **flag).eval()
        assert type(backbone) is LlamaEncoderModel and type(masked_lm) is LlamaEncoderForMaskedLM
    continued = LlamaEncoderForMaskedLM.from_pretrained(planted)  # how continued pretraining loads its source
    assert not marker.exists()
    expected = forward(model, inputs)
    for loaded in (masked_lm, continued):
        assert torch.equal(forward(loaded.eval(), inputs)["logits"], expected["logits"])
    assert masked_lm.config.auto_map == EXPECTED_AUTO_MAP  # kept, so a re-save shares as well
