"""A study with keys in its URI, on a real local Ray head and moto's S3 server: split from
tests/unit/store/test_secrets.py."""
from __future__ import annotations

from pathlib import Path
import sys

import pytest

from sweeper.store import folders, storage

from conftest import run_sweeper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "store"))
from test_secrets import KEY, SECRET, aws_environment  # noqa: E402,F401 (what the unit tests share; the autouse fixture)


SPEC = """
study: secrets
storage: "{storage}"   # the bucket without keys: a spec names none (sweeper.spec.names)
model: {{preset: nano}}
data: {{vocab_size: 1024, seq_len: 64, max_documents: 300}}
pretraining:
  steps: 20
  global_batch_size: 4
  warmup_steps: 2
  decay_steps: 4
  log_every: 10
  runs:
    - {{objective: clm, checkpoint_steps: [10]}}
finetuning:
  tasks: [wordnet-supersense-cls]
  learning_rates: [0.001]
  seeds: [0]
  batch_size: 8
  micro_batch_size: 8
  max_steps: 2
  max_length: 32
  max_train_examples: 32
  max_eval_examples: 16
resources:
  pretraining_workers: 0
tracking: {{wandb: true, mode: offline, project: sweeper-tests}}
"""


def files_holding(found: dict[str, bytes], *needles: str) -> list[str]:
    return sorted(name for name, data in found.items() if any(n.encode() in data for n in needles))


@pytest.mark.e2e
def test_a_study_with_keys_in_its_uri_leaves_them_nowhere(ray_head, tmp_path, object_store):
    """Tracking on, `--storage` with keys: afterwards neither the key
    nor the secret is in any object of the study, in any W&B offline file, or in the driver's
    output (worker logs included: Ray forwards them to the driver)."""
    study = object_store("secrets/study").replace("testing:testing@", f"{KEY}:{SECRET}@")
    spec = tmp_path / "secrets.yaml"
    spec.write_text(SPEC.format(storage=storage.strip_credentials(study)))
    result = run_sweeper("run", str(spec), "--storage", study, address=ray_head[0])
    output = result.stdout + result.stderr
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert KEY not in output and SECRET not in output, "credentials are never printed"

    fs, root = storage.filesystem(storage.strip_credentials(study))
    import pyarrow.fs as pafs

    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    objects = {}
    for info in infos:
        if info.type == pafs.FileType.File:
            with fs.open_input_stream(info.path) as stream:
                objects[info.path] = stream.read()
    assert any(name.endswith("/results/trials") or "/results/trials/" in name for name in objects), sorted(objects)
    assert files_holding(objects, KEY, SECRET) == []
    spec_copy = objects[f"{root}/spec.yaml"].decode()
    assert f'storage: "{storage.strip_credentials(study)}"' in spec_copy, spec_copy

    scratch = folders.scratch_dir(study, "")
    local = {str(path): path.read_bytes() for path in scratch.rglob("*") if path.is_file()}
    assert [name for name in local if "offline-run-" in name], "W&B wrote its offline files here"
    assert files_holding(local, "sweeper-tests"), "the runs' configs went to W&B (stripped)"
    assert files_holding(local, KEY, SECRET) == []
