"""A pretraining checkpoint on a full disk (issue #57): ENOSPC from a real tmpfs
(tests/support/small_disks.py) while local mode writes the checkpoint's weights or its training
state. The run's earlier checkpoint stays whole and is the one a resume takes, nothing of the
failed one is left, the error is one line naming the checkpoint, and the same save succeeds once
space is freed (trainables.pretrain_loop.publish_local_checkpoint, write_checkpoint_files)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from small_disks import fill, leftovers, tmpfs
from test_accumulation import planned_run

from sweeper.store.layout import TRAINING_STATE, RunLayout
from sweeper.store.permanent_errors import PermanentStorageError
from trainables.model import LlamaEncoderConfig, build_model
from trainables.pretrain_loop import (
    drop_unpublished_checkpoints,
    publish_local_checkpoint,
    read_training_state,
    write_checkpoint_files,
)




def trained(run):
    model = build_model(LlamaEncoderConfig(**run.model_config), seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randint(0, 512, (2, 8))).logits.sum().backward()
    optimizer.step()  # moments: the bulk of a training state
    return model, optimizer


def save(run, model, optimizer, step: int) -> None:
    log = [{"step": step, "loss": 2.0, "phase": "clm"}]
    publish_local_checkpoint(run, step, lambda folder: write_checkpoint_files(
        folder, model, None, optimizer.state_dict(), run, step, log, {"phase": "clm", "loss": 2.0}))


@pytest.mark.parametrize("fails_at", ["weights", "training state"])
def test_a_checkpoint_that_fills_the_disk_keeps_the_earlier_one_and_saves_once_space_is_freed(tmp_path, fails_at):
    tokenizer = tmp_path / "corpus" / "tokenizer"
    tokenizer.mkdir(parents=True)
    (tokenizer / "tokenizer_config.json").write_text("{}")
    with tmpfs(tmp_path / "disk", "4m") as disk:
        run = planned_run(40, save_every=10, run_dir=str(disk / "run"), corpus_dir=str(tokenizer.parent))
        Path(run.run_dir).mkdir()
        layout = RunLayout(run.run_dir)
        model, optimizer = trained(run)
        save(run, model, optimizer, 10)
        kept = {p.name: p.read_bytes() for p in Path(layout.checkpoint(10)).iterdir()}
        # Room for the small files; for the weights too when the training state is to fail.
        room = 16 * 1024 + (len(kept["model.safetensors"]) + 32 * 1024 if fails_at == "training state" else 0)
        assert room < len(kept[TRAINING_STATE]), "the training state must not fit"
        filler = fill(disk, leave=room)

        with pytest.raises(PermanentStorageError) as raised:
            save(run, model, optimizer, 20)
        assert str(raised.value) == f"{layout.checkpoint(20)}: no space left on the device (errno ENOSPC)"
        assert leftovers(disk) == [] and not Path(layout.checkpoint(20)).exists(), "nothing of the failed one"
        assert {p.name: p.read_bytes() for p in Path(layout.checkpoint(10)).iterdir()} == kept
        assert layout.latest_resumable() == (10, layout.checkpoint(10)), "a resume takes the earlier one"

        filler.unlink()
        killed = Path(run.run_dir, "sweeper-ckpt-1234-0badf00d")  # what a save killed half-way leaves
        killed.mkdir()
        (killed / "model.safetensors").write_bytes(b"\0" * 1024)
        drop_unpublished_checkpoints(run)  # the run's start
        assert leftovers(disk) == []
        save(run, model, optimizer, 20)
        assert layout.latest_resumable() == (20, layout.checkpoint(20)) and leftovers(disk) == []
        assert read_training_state(Path(layout.checkpoint(20)) / TRAINING_STATE)["step"] == 20
