"""tests/specs/fsdp.yaml's study, run once by `sweeper run` on a 2-CPU head and read by two tests:
a CLM run sharded over a Train worker group of two with FSDP2 (gloo), a trial per checkpoint,
offline W&B from rank 0 and the driver, kept in an object store (moto's S3 server) whose URI
carries keys. The sharded run must train like the single-process run; the keys must be left
nowhere."""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass

import pytest
from transformers import AutoConfig, AutoModelForMaskedLM

from sweeper.store import folders, storage
from sweeper.store.layout import StudyLayout
from sweeper.store.results import TRIALS, read_table

from conftest import ROOT, run_sweeper
from in_process_run import trained_in_process
from local_s3 import holding, objects_under

from test_secrets import KEY, SECRET, aws_environment  # noqa: F401 (what the unit tests share; the autouse fixture)

importlib.import_module("trainables.model")  # registers the architecture with AutoModel

pytestmark = pytest.mark.e2e
FSDP = ROOT / "tests" / "specs" / "fsdp.yaml"


@dataclass(frozen=True)
class FinishedStudy:
    uri: str
    """With `KEY:SECRET@`, as `--storage` was given."""
    output: str
    """The driver's stdout and stderr (worker logs included: Ray forwards them to the driver)."""


@pytest.fixture(scope="module")
def fsdp_study(ray_head_two_cpus, object_store, tmp_path_factory) -> FinishedStudy:
    """fsdp.yaml with `storage:` naming the bucket without keys (a spec names none:
    sweeper.spec.names), run with `--storage` carrying them."""
    uri = object_store("fsdp/study").replace("testing:testing@", f"{KEY}:{SECRET}@")
    spec = tmp_path_factory.mktemp("fsdp") / "fsdp.yaml"
    spec.write_text(FSDP.read_text() + f'storage: "{storage.strip_credentials(uri)}"\n')
    result = run_sweeper("run", str(spec), "--storage", uri, address=ray_head_two_cpus[0])
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return FinishedStudy(uri, result.stdout + result.stderr)


def test_fsdp2_sharded_run_matches_the_single_process_run(fsdp_study, ray_head_two_cpus, tmp_path):
    """A real Train worker group (~40 s of fixed cost): two workers with `fully_shard` see the two
    halves of each global batch and must train like the single-process run: the same loss curve and
    weights. To first order: the float32 gradients differ by reduction order only, ~sqrt(512) *
    2**-24 ~ 1.4e-6 of their clipped norm (<= 1); AdamW's update moves by at most ~1.3 / eps = 1.3e5
    times a gradient's change, over learning rates summing to 8.5e-3: <= 1.5e-3 in L2 over all
    weights, against 1.6 of movement from the initial weights, and a loss (~6.6) by <= its
    gradient's norm (~0.7) times that (measured: 6e-7 in L2, losses 3e-8 apart).
    The sharded study lives in an object store (Train persists the worker group's checkpoints
    through the store's filesystem) and runs through `sweeper run`. The single-process run is the
    same spec's run with `pretraining_workers: 0`, trained by the study's own local-mode task body
    (`fit_run`: Train's local mode, in this process) into a local folder, on the corpus the sharded
    study prepared (the same key: one preparation)."""
    local_spec = tmp_path / "local.yaml"
    # No W&B for the reference (tracking shapes no weight): the sharded study's is checked below.
    local_spec.write_text("".join(line for line in FSDP.read_text().replace(
        "pretraining_workers: 2", "pretraining_workers: 0").splitlines(keepends=True)
        if not line.startswith("tracking:")))
    sharded_study = fsdp_study.uri  # with its keys, as the driver was given it
    assert read_table(StudyLayout(sharded_study), TRIALS).num_rows == 2
    # Offline W&B: the pretraining curve from rank 0, the trials from the driver (in the node's
    # scratch folder when the study is in an object store).
    assert list((folders.scratch_dir(storage.join(sharded_study, "pretraining", "nano-clm-20"), "") / "wandb")
                .glob("offline-run-*/run-*.wandb"))
    assert list((folders.scratch_dir(sharded_study, "") / "wandb").glob("offline-run-*/run-*.wandb"))

    config = trained_in_process(local_spec, sharded_study, str(tmp_path / "local"), ray_head_two_cpus[0])

    logs, weights = {}, {}
    for name, run_dir in (("fsdp", storage.join(sharded_study, "pretraining", "nano-clm-20")),
                          ("local", config.run_dir)):
        final = folders.local_copy(storage.join(run_dir, "step-20"), "sweeper_checkpoint.json")
        assert json.loads((final / "config.json").read_text())["architectures"] == ["LlamaEncoderForMaskedLM"]
        logs[name] = [row["loss"] for row in json.loads((final / "train_log.json").read_text())]
        weights[name] = AutoModelForMaskedLM.from_pretrained(final).state_dict()
        for step in (10, 20):
            assert storage.read_json(storage.join(run_dir, f"step-{step}", "sweeper_checkpoint.json"))["step"] == step
            # Optimizer state stays with the newest checkpoint only (keep_resume_checkpoints: 1).
            assert storage.exists(storage.join(run_dir, f"step-{step}", "training_state.pt")) == (step == 20)
    assert storage.exists(storage.join(sharded_study, "pretraining", "nano-clm-20", "sweeper_done.json"))
    assert len(logs["fsdp"]) == len(logs["local"]) == 4
    assert all(abs(a - b) < 1e-3 * abs(b) for a, b in zip(logs["fsdp"], logs["local"])), logs  # <= 2e-4
    from trainables.model import build_model

    initial = build_model(AutoConfig.from_pretrained(final), seed=0).state_dict()  # the spec's seed

    def distance(x, y):
        return float(sum(((x[k] - y[k]) ** 2).sum() for k in y) ** 0.5)

    assert distance(weights["fsdp"], weights["local"]) < 1e-2 * distance(weights["local"], initial)  # <= 1e-3


def test_a_study_with_keys_in_its_uri_leaves_them_nowhere(fsdp_study):
    """Tracking on, `--storage` with keys, a worker group: afterwards neither the key nor the secret
    is in any object of the study, in any W&B offline file, or in the driver's output (the run in
    Train's local mode: tests/e2e/test_cpt.py)."""
    assert KEY not in fsdp_study.output and SECRET not in fsdp_study.output, "credentials are never printed"
    objects = objects_under(fsdp_study.uri)
    assert any(name.startswith("results/trials/") for name in objects), sorted(objects)
    assert holding(objects, KEY, SECRET) == []
    spec_copy = objects["spec.yaml"].decode()
    assert f'storage: "{storage.strip_credentials(fsdp_study.uri)}"' in spec_copy, spec_copy

    scratch = folders.scratch_dir(fsdp_study.uri, "")
    local = {str(path): path.read_bytes() for path in scratch.rglob("*") if path.is_file()}
    assert [name for name in local if "offline-run-" in name], "W&B wrote its offline files here"
    assert holding(local, "sweeper-tests"), "the runs' configs went to W&B (stripped)"
    assert holding(local, KEY, SECRET) == []
