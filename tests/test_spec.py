"""Spec errors: file, line, key path, reason; exit status 2; no Ray process started."""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sweeper.spec import SpecError, load_spec

ROOT = Path(__file__).parent.parent
GOOD = (ROOT / "search_spaces" / "smoke.yaml").read_text()


def with_change(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new, 1)


MALFORMED = [
    ("unknown top key", GOOD + "\nfinetunning: {}\n", "finetunning", "did you mean 'finetuning'"),
    ("unknown nested key", with_change("  seq_len: 64", "  seq_length: 64"), "data.seq_length", "did you mean 'seq_len'"),
    ("wrong type", with_change("  steps: 40", "  steps: forty"), "pretraining.steps", "expected an integer"),
    ("mask ratio out of range", with_change("mask_ratio: [0.4]", "mask_ratio: [1.4]"),
     "pretraining.runs[0].mask_ratio[0]", "outside (0, 1)"),
    ("clm share out of range", with_change("clm_fraction: [0.5]", "clm_fraction: [1.5]"),
     "pretraining.runs[2].clm_fraction[0]", "outside [0, 1]"),
    ("checkpoint beyond budget", with_change("checkpoint_steps: [20]", "checkpoint_steps: [400]"),
     "pretraining.runs[0].checkpoint_steps[0]", "before the run's budget"),
    ("negative steps", with_change("  steps: 40", "  steps: -5"), "pretraining.steps", "must be positive"),
    ("empty grid", with_change("  seeds: [0, 1]", "  seeds: []"), "finetuning.seeds", "empty grid"),
    ("unknown task", with_change("[wordnet-supersense-cls, ", "[wordnet-supersense-clf, "),
     "finetuning.tasks[0]", "did you mean 'wordnet-supersense-cls'"),
    ("unknown preset", with_change("  preset: nano", "  preset: 601m"), "model.preset", "unknown preset"),
    ("unknown objective", with_change("- objective: mlm", "- objective: mlmx"),
     "pretraining.runs[0].objective", "is not one of"),
    ("malformed yaml", with_change("  seq_len: 64", "  seq_len: [64"), "", "malformed YAML"),
    ("missing required", "study: x\nfinetuning: {tasks: [sst2]}\n", "pretraining", "required key is missing"),
]


@pytest.mark.parametrize("name,text,key,reason", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_spec_names_file_key_and_reason(tmp_path, name, text, key, reason):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    message = str(caught.value)
    assert str(path) in message and key in message and reason in message


def test_error_carries_the_yaml_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(with_change("mask_ratio: [0.4]", "mask_ratio: [1.4]"))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "1.4" in text)
    assert caught.value.line == line and f"bad.yaml:{line}:" in str(caught.value)


def test_cli_exits_2_and_starts_no_ray(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(with_change("  steps: 40", "  steps: forty"))
    code = textwrap.dedent(f"""
        import sys
        from sweeper.cli import main
        status = main(["run", {str(path)!r}, "--storage", {str(tmp_path / 'study')!r}])
        assert "ray" not in sys.modules, "Ray was imported for a bad spec"
        sys.exit(status)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2, result.stderr
    assert "pretraining.steps" in result.stderr and "bad.yaml" in result.stderr
    assert not (tmp_path / "study").exists()


def test_shipped_specs_load():
    for path in (ROOT / "search_spaces").glob("*.yaml"):
        load_spec(path)
