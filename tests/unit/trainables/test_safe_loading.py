"""A checkpoint's `training_state.pt` is data, never code: a planted pickle payload is refused with
an error naming the file, and nothing in it runs; a genuine state written in the loop's format loads."""
from __future__ import annotations

import pickle

import pytest
import torch

from sweeper.store.layout import TRAINING_STATE
from trainables.pretrain_loop import restore_training_state

from test_objectives import planned_run


class Payload:
    """Unpickling this creates `marker` (the stand-in for any code an attacker would run)."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return open, (self.marker, "w")


def tiny_model_and_optimizer(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 3)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


@pytest.mark.parametrize("how", ["pickle", "torch.save"])
def test_a_planted_payload_is_refused_and_never_runs(tmp_path, how):
    checkpoint = tmp_path / "step-20"
    checkpoint.mkdir()
    marker = tmp_path / "payload-ran"
    planted = {"optimizer": Payload(str(marker)), "step": 20, "log": []}
    if how == "pickle":
        (checkpoint / TRAINING_STATE).write_bytes(pickle.dumps(planted, protocol=2))
    else:
        torch.save(planted, checkpoint / TRAINING_STATE)
    # The payload is live: an unrestricted unpickler runs it.
    probe = tmp_path / "probe"
    pickle.loads(pickle.dumps(Payload(str(probe)))).close()
    assert probe.exists()

    model, optimizer = tiny_model_and_optimizer()
    with pytest.raises(RuntimeError) as refused:
        restore_training_state(checkpoint, model, optimizer, planned_run(40, 0), world=1)
    message = str(refused.value)
    assert str(checkpoint / TRAINING_STATE) in message
    assert "not a genuine training state" in message and "nothing in it was executed" in message
    assert not marker.exists(), "the payload ran"


def test_a_genuine_training_state_in_the_loops_format_loads(tmp_path):
    model, optimizer = tiny_model_and_optimizer()
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()  # moments and step counts: the state a resumed run needs
    log = [{"step": 10, "loss": 2.5, "phase": "clm"}, {"step": 20, "loss": 2.1, "phase": "mlm"}]
    torch.save({"optimizer": optimizer.state_dict(), "step": 20, "log": log}, tmp_path / TRAINING_STATE)

    fresh_model, fresh_optimizer = tiny_model_and_optimizer()
    step, restored_log, window = restore_training_state(tmp_path, fresh_model, fresh_optimizer, planned_run(40, 0),
                                                         world=1)
    assert (step, restored_log, window) == (20, log, {}), "a state without a log window opens an empty one"
    saved, restored = optimizer.state_dict()["state"], fresh_optimizer.state_dict()["state"]
    assert saved.keys() == restored.keys()
    for index in saved:
        for name in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(saved[index][name], restored[index][name])
