"""The pretraining loop Ray Train runs on each worker (or in-process in local mode).

One loop serves every objective: a run is a list of phases (`PretrainConfig.phases`, e.g. CLM
then MLM), the phase of a step is `run.phase_at(step)`, and its loss is the registered function
the phase names (`trainables.objectives.ObjectiveLoss`), under one warmup-stable-decay schedule.
Everything a resumed run needs is a function of the step or stored in the checkpoint: batch `s`
is window slice `s` of a fixed order, the loss draws are a function of (seed, step, row of the
global batch) (`objectives.RowDraws`), and the optimizer state and log travel in
`training_state.pt`. A restarted run therefore continues bit-for-bit where the checkpoint left
it, with the same phase boundaries.

Checkpoint layout (`sweeper.store.layout`), `<run_dir>/step-<N>/`: Hugging Face files (config.json,
model.safetensors, tokenizer, and model.py named by config.json's `auto_map`: the encoder's code,
so the folder also loads with `trust_remote_code=True` where `trainables` is not installed),
`training_state.pt`, `train_log.json`, and `sweeper_checkpoint.json` written last (the marker
that the directory is complete; it lists the other files and their sizes). With distributed
workers Ray Train persists the directory (to any storage URI) under
`storage_path/<run name>/step-<N>`, file by file in no set order, so a resume checks the list
(`RunLayout.latest_resumable`); in local mode the loop publishes it there itself
(sweeper.store.storage: an atomic rename on a disk, an upload with the marker last to an object
store). The run folder is a study location: a path, or a URI whose files the loop reads through
node-local copies. A checkpoint that does not fit (a full disk) leaves nothing of itself and the
earlier ones as they were, and fails the run with one line naming it (`publish_local_checkpoint`;
sweeper.store.permanent_errors).

A branch (`PretrainConfig.branch_from`, sweeper.plan.branches) is a run whose first steps are its
trunk's: with no checkpoint of its own it starts from the trunk's checkpoint at the branch step
as a resume would (weights, optimizer state, step) and trains on. The batches and draws of a step
depend on the step alone, so on CPU its weights are those of the same run trained from scratch,
byte for byte (tests/e2e/test_branching.py); on GPU up to kernel nondeterminism. The trunk saves
at each of its `branch_steps` and keeps those checkpoints whole.

One step is `trainables.train_step.train_step`: the worker's rows in micro-batches of
`micro_batch_size`, gradients accumulated and normalised over the whole global batch.

Under `resources.sharding: fsdp` a worker group builds, loads and gathers its model through
`trainables.sharding`: only rank 0 reads a checkpoint; the format is the single process's.

Retention (`retention`): the newest `keep_resume_checkpoints` checkpoints keep everything;
older evaluated checkpoints (checkpoint_steps and the final one) keep their weights but lose
`training_state.pt`; older resume-only ones are deleted. Local mode deletes them itself. With a
worker group Ray Train owns the folders and its run snapshot lists them (a rerun refuses a
snapshot naming a missing folder), so Ray deletes them (`ray_checkpoint_config`) and rank 0 only
drops the optimizer state of evaluated ones, inside folders Ray keeps.
"""
from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import shutil
import time
import zipfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch

from sweeper.contract.tracking import start_wandb
from sweeper.contract.configs import PretrainConfig
from sweeper.contract.registry import resolve
from sweeper.contract.schedules import wsd_lr
from sweeper.store import folders, storage
from sweeper.store.layout import (
    CHECKPOINT_MARKER,
    CORPUS_MARKER,
    TRAIN_LOG,
    TRAINING_STATE,
    RunLayout,
    checkpoint_folder_name,
    checkpoint_step,
)
from trainables import sharding
from trainables.corpus import PackedCorpus
from trainables.model import LlamaEncoderConfig, LlamaEncoderForMaskedLM, build_model
from trainables.objectives import LossContext, ObjectiveLoss, RowDraws
from trainables.preemption import Notice
from trainables.train_step import adamw, train_step

RETENTION_METRIC = "retention_priority"
"""Reported with every checkpoint: Ray keeps the highest (evaluated ones first, then the newest)."""
EVALUATED_PRIORITY = 10 ** 12


def write_progress(run: PretrainConfig, row: dict) -> None:
    """`<run_dir>/progress.json`: where the run is, for `sweeper status` (and tests that kill its
    process or drain its node)."""
    import ray

    progress = {**row, "total_steps": run.total_steps, "pid": os.getpid(),
                "node_id": ray.get_runtime_context().get_node_id(), "updated_at": time.time()}
    storage.write_json(RunLayout(run.run_dir).progress, progress, indent=None)


def evaluated_steps(run: PretrainConfig) -> set[int]:
    """Checkpoints that are fine-tuned: the intermediate ones and the final one."""
    return set(run.checkpoint_steps) | {run.total_steps}


def kept_steps(run: PretrainConfig) -> set[int]:
    """Checkpoints retention never deletes: the evaluated ones and those other runs branch from."""
    return evaluated_steps(run) | set(run.branch_steps)


def saved_steps(run: PretrainConfig, upto: int) -> list[int]:
    """Steps the run saves a checkpoint at, up to `upto` (the plan; the same on every restart)."""
    kept = kept_steps(run)
    return [s for s in range(1, upto + 1) if s in kept or (run.save_every and s % run.save_every == 0)]


def retention(saved: list[int], evaluated: set[int], keep: int,
              branch: set[int] | frozenset[int] = frozenset()) -> tuple[set[int], set[int]]:
    """(checkpoints to delete, checkpoints whose training state to drop) among `saved`: the
    newest `keep` are resume points and keep everything; of the older ones, evaluated ones keep
    their weights (fine-tuning reads them), resume-only ones are no longer needed, and those
    other runs branch from (`branch`) keep everything (a branch starts from their state)."""
    older = sorted(saved)[:-keep] if keep > 0 else sorted(saved)
    return ({s for s in older if s not in evaluated and s not in branch},
            {s for s in older if s in evaluated and s not in branch})


def ray_checkpoint_config(run: PretrainConfig):
    """What Ray Train keeps of a worker group's checkpoints: the top `num_to_keep` by
    `RETENTION_METRIC` plus always the latest. Evaluated checkpoints rank first, so all of them
    stay; the `keep - 1` newest resume-only ones fill the rest, and the latest is kept anyway.
    Until every evaluated step is reached, its free slots keep a few more resume-only ones; at
    the end (the final checkpoint is evaluated and the latest) it is `retention`'s set."""
    from ray.train import CheckpointConfig

    return CheckpointConfig(num_to_keep=len(kept_steps(run)) + run.keep_resume_checkpoints - 1,
                            checkpoint_score_attribute=RETENTION_METRIC, checkpoint_score_order="max")


def retention_priority(run: PretrainConfig, step: int) -> int:
    return step + (EVALUATED_PRIORITY if step in kept_steps(run) else 0)


def apply_retention(run: PretrainConfig, done: int) -> None:
    """After the checkpoint at `done` is published (rank 0). Local mode: delete and strip per
    `retention`. Worker group: Ray deletes (`ray_checkpoint_config`); drop the training state of
    evaluated checkpoints only, in folders Ray keeps anyway."""
    layout = RunLayout(run.run_dir)
    evaluated = evaluated_steps(run)
    if run.workers == 0:
        present = {s: loc for s, loc in layout.saved_checkpoints().items() if s <= done}
        drop, strip = retention(list(present), evaluated, run.keep_resume_checkpoints, set(run.branch_steps))
        for step in sorted(drop):
            storage.remove(storage.join(present[step], CHECKPOINT_MARKER))  # incomplete first, then gone
            storage.remove_tree(present[step])
    else:
        _, strip = retention(saved_steps(run, done), evaluated, run.keep_resume_checkpoints, set(run.branch_steps))
    for step in sorted(strip):
        storage.remove(storage.join(layout.checkpoint(step), TRAINING_STATE))


def unwrap(model):
    return getattr(model, "module", model)


def sharded(run: PretrainConfig, world: int) -> bool:
    return world > 1 and run.sharding == "fsdp"


def configure(model, run: PretrainConfig) -> None:
    """What precedes DDP or sharding: training mode, activation checkpointing, compilation.
    `model`: a `LlamaEncoderForMaskedLM` or a `trainables.causal_mlm.CausalLMForMaskedLM`."""
    model.train()  # from_pretrained returns eval mode; checkpointing acts in training mode only
    if run.activation_checkpointing:
        if model.activation_checkpointing_enable({"use_reentrant": False}) is False:
            print(f"[pretrain {run.name}] activation checkpointing: {type(model.config).__name__} does not "
                  "support it; training without", flush=True)
    if run.compile:
        # In place, block by block: state-dict names stay Hugging Face's, and FSDP2 then
        # shards compiled blocks (its recommended order).
        for block in (model.blocks() if native(run) else model.model.layers):
            block.compile()


def native(run: PretrainConfig) -> bool:
    """A Hugging Face causal LM trained as its own model (trainables.causal_mlm), not converted."""
    return run.init.kind == "hf-native"


def prepared_model(resume: Path | None, run: PretrainConfig, vocab_size: int, world: int, device: torch.device):
    """The model this worker trains: the checkpoint's weights (`resume`) or the run's initial
    ones, on `device`; alone, replicated by DDP (Ray's `prepare_model`), or sharded by FSDP2,
    where only rank 0 reads them (`trainables.sharding`)."""
    def load_full() -> LlamaEncoderForMaskedLM:
        if resume and native(run):
            from trainables.causal_mlm import masked_lm_from_checkpoint

            return masked_lm_from_checkpoint(resume)
        return LlamaEncoderForMaskedLM.from_pretrained(resume) if resume else initial_model(run, vocab_size)

    if sharded(run, world):
        if native(run):
            raise ValueError(f"{run.name}: a causal LM trained as its own model (hf_init: native) is not sharded "
                             "by FSDP2: use sharding: ddp")
        return sharding.sharded_model(load_full, device, lambda model: configure(model, run))
    model = load_full().to(device)
    if native(run):
        from trainables.causal_mlm import attention_check

        # Every rank probes the same weights the same way: all reach the same verdict.
        print(f"[pretrain {run.name}] {attention_check(model, device)}", flush=True)
    configure(model, run)
    if world <= 1:
        return model
    import ray.train.torch

    return ray.train.torch.prepare_model(model)


def full_states(model, optimizer, run: PretrainConfig, world: int) -> tuple[dict | None, dict]:
    """(model, optimizer) state dicts as one process holds them. Sharded: gathered to rank 0 on
    the CPU (a collective: every rank calls it; the other ranks get empty dicts)."""
    if not sharded(run, world):
        return None, optimizer.state_dict()
    return sharding.gathered_states(model, optimizer)


def write_training_state(directory: Path, optimizer_state: dict, step: int, log: list[dict],
                         window: dict | None = None) -> None:
    """`training_state.pt`: the optimizer state (FQN-keyed if sharded), the step, the log and the
    open log window's loss sums (`window`: a preemption's save falls between log steps)."""
    # Through a Python file: a full disk is then an OSError (ENOSPC) behind torch's error, where
    # torch's own file writer says only "unexpected pos" (torch 2.13).
    with open(Path(directory) / TRAINING_STATE, "wb") as handle:
        torch.save({"optimizer": optimizer_state, "step": step, "log": log, **({"window": window} if window else {})},
                   handle)


def save_hf(model, directory: Path, state: dict | None) -> None:
    """Hugging Face files: config.json (with `auto_map`), model.safetensors and model.py (a copy of
    trainables/model.py: `save_pretrained` shares the registered custom code, trainables.model). A
    sharded model is saved from its gathered state through a plain `LlamaEncoderForMaskedLM`
    (FSDP2 renames the module's class, which would leak into config.json's `architectures`), so
    both branches write the same files."""
    if state is None:
        model = unwrap(model)
        # A natively continued causal LM saves as its own family (trainables.causal_mlm).
        getattr(model, "causal_lm", model).save_pretrained(directory)
        return
    with torch.device("meta"):
        plain = LlamaEncoderForMaskedLM(model.config)
    plain.load_state_dict(state, assign=True)
    plain.save_pretrained(directory)


def checkpoint_marker(run: PretrainConfig, step: int, metrics: dict) -> dict:
    """The marker of the checkpoint at `step` (what the driver reads without torch)."""
    return {
        "run_name": run.name, "run_key": run.run_key, "step": step, "tokens_seen": run.tokens_seen(step),
        "objective": run.objective, "phase": metrics["phase"], "clm_fraction": run.clm_fraction,
        "mask_ratio": run.mask_ratio, "switch_step": run.switch_step, "total_steps": run.total_steps,
        "loss": metrics["loss"], "phases": [asdict(phase) for phase in run.phases],
        **({"attention": metrics["attention"]} if "attention" in metrics else {}),
    }


def write_checkpoint_files(folder: Path, model, model_state: dict | None, optimizer_state: dict,
                           run: PretrainConfig, step: int, log: list[dict], metrics: dict,
                           window: dict | None = None) -> None:
    """Rank 0's files of the checkpoint at `step`, into `folder`, the marker last."""
    save_hf(model, folder, model_state)
    shutil.copytree(folders.local_copy(run.corpus_dir, CORPUS_MARKER, only="tokenizer"), folder, dirs_exist_ok=True)
    write_training_state(folder, optimizer_state, step, log, window)
    (folder / TRAIN_LOG).write_text(json.dumps(log))  # read by the driver, no torch needed
    marker = {**checkpoint_marker(run, step, metrics), "files": storage.file_sizes(str(folder))}
    (folder / CHECKPOINT_MARKER).write_text(json.dumps(marker, indent=1))


def publish_local_checkpoint(run: PretrainConfig, step: int, write: Callable[[Path], None]) -> None:
    """Local mode: the checkpoint at `step`, written by `write(folder)` into a new folder (beside
    the run's checkpoints on a disk, so publishing is one rename; else in this node's temporary
    folder) and published whole. A write that fails leaves no part of it (folders.new_folder),
    and the run's earlier checkpoints as they were; a full disk is a PermanentStorageError
    naming the checkpoint."""
    location = RunLayout(run.run_dir).checkpoint(step)
    beside = None if storage.is_remote(run.run_dir) else Path(run.run_dir)
    with folders.new_folder(beside, "sweeper-ckpt-", location if beside else folders.built_in_temp(location)) as tmp:
        write(tmp)
        # A folder of this step left by a run that died after publishing has the same content.
        folders.publish_tree(tmp, location, CHECKPOINT_MARKER)


def drop_unpublished_checkpoints(run: PretrainConfig) -> None:
    """Local mode on a disk, before training: remove the folders saves killed half-way left in the
    run folder (`sweeper-ckpt-*`, never published: a resume never reads them), so they take no
    space. No other process writes there meanwhile: the driver launches a local-mode run again
    only once its process has ended."""
    if run.workers == 0 and not storage.is_remote(run.run_dir):
        for folder in Path(run.run_dir).glob("sweeper-ckpt-*"):
            shutil.rmtree(folder, ignore_errors=True)


def save_checkpoint(model, optimizer, run: PretrainConfig, step: int, log: list[dict], metrics: dict,
                    window: dict | None = None) -> None:
    import ray.train

    context = ray.train.get_context()
    rank = context.get_world_rank()
    model_state, optimizer_state = full_states(model, optimizer, run, context.get_world_size())

    def write(folder: Path) -> None:
        if rank == 0:
            write_checkpoint_files(folder, model, model_state, optimizer_state, run, step, log, metrics, window)

    # With a worker group (even of one) Ray persists checkpoints; local mode persists nothing.
    if run.workers == 0:
        publish_local_checkpoint(run, step, write)
        ray.train.report(metrics)
        return
    name = checkpoint_folder_name(step)
    where = folders.built_in_temp(RunLayout(run.run_dir).checkpoint(step))
    with folders.new_folder(None, "sweeper-ckpt-", where) as tmp:
        write(tmp)
        checkpoint = ray.train.Checkpoint.from_directory(str(tmp)) if rank == 0 else None
        ray.train.report(metrics, checkpoint=checkpoint, checkpoint_dir_name=name)


def resume_point(run: PretrainConfig):
    """(context yielding the checkpoint to resume from or None for a fresh start, the steps of
    the checkpoints Ray Train must be told of, oldest first). The checkpoint is the newest
    complete one in the run folder, or Ray's after a worker-group restart if that is as new.

    Ray's can be older: a worker reports a checkpoint once its upload is done, and Train's
    controller registers the reports one per poll of the workers (every 2 s), in order, so a
    worker killed in between is handed back an older one, and every checkpoint after Ray's
    (`ray_step`) is in the run folder but unknown to Ray. Resuming from the newest saves that
    work; each unknown one is then registered with Ray, oldest first, or its retention
    (`ray_checkpoint_config`) would never delete the resume-only ones among them and would count
    the evaluated ones short."""
    import ray.train

    checkpoint = ray.train.get_checkpoint()
    ray_step = checkpoint_step(Path(checkpoint.path).name) if checkpoint is not None else -1
    layout = RunLayout(run.run_dir)
    newer = layout.latest_resumable(newer_than=ray_step)
    if newer is not None:
        # Every report before the newest returned after its upload: those folders are complete.
        unknown = [step for step in sorted(layout.saved_checkpoints()) if ray_step < step <= newer[0]] \
            if run.workers > 0 else []
        return contextlib.nullcontext(folders.local_copy(newer[1], CHECKPOINT_MARKER)), unknown
    if checkpoint is None and run.branch_from:
        return contextlib.nullcontext(folders.local_copy(branch_point(run), CHECKPOINT_MARKER)), []
    return (checkpoint.as_directory() if checkpoint is not None else contextlib.nullcontext(None)), []


def branch_point(run: PretrainConfig) -> str:
    """The trunk's checkpoint a branch starts from, checked: complete, at the branch step, with
    its training state (sweeper.run schedules a branch only once it is)."""
    marker = storage.read_json(storage.join(run.branch_from, CHECKPOINT_MARKER))
    if marker is None or marker.get("step") != run.branch_step or TRAINING_STATE not in marker.get("files", {}):
        raise RuntimeError(f"{run.name} branches from {storage.display(run.branch_from)} at step {run.branch_step}, "
                           "which is not a complete checkpoint of that step with its training state")
    return run.branch_from


def register_with_ray(run: PretrainConfig, step: int) -> None:
    """Report the checkpoint at `step`, already in Ray's run folder, without uploading it again
    (every rank calls this, as every report)."""
    import ray.train

    context = ray.train.get_context()
    marker = storage.read_json(storage.join(RunLayout(run.run_dir).checkpoint(step), CHECKPOINT_MARKER))
    name = checkpoint_folder_name(step)
    checkpoint = None
    if context.get_world_rank() == 0:
        ray_storage = context.get_storage()
        checkpoint = ray.train.Checkpoint(path=f"{ray_storage.experiment_fs_path}/{name}",
                                          filesystem=ray_storage.storage_filesystem)
    ray.train.report({"step": step, "phase": marker["phase"], "loss": marker["loss"],
                      RETENTION_METRIC: retention_priority(run, step)}, checkpoint=checkpoint,
                     checkpoint_dir_name=name, checkpoint_upload_mode=ray.train.CheckpointUploadMode.NO_UPLOAD)


def read_training_state(path: Path, mmap: bool = False) -> dict:
    """`training_state.pt`, refused unless it holds tensors, numbers, strings, lists and dicts only:
    no pickled code runs on load. `mmap`: tensors are views of the mapped file (read when touched)."""
    try:
        # A torch.save file is a zip archive; mapping one that is not would fail before the refusal.
        return torch.load(path, weights_only=True, mmap=mmap and zipfile.is_zipfile(path))
    except pickle.UnpicklingError as error:  # torch's refusal of anything else
        # Torch's own message suggests weights_only=False: name only what it refused.
        found = re.search(r"WeightsUnpickler error: (.*)", str(error))
        refused = found.group(1).split(" was not an allowed")[0].split(" Please")[0].rstrip(". ") if found \
            else "refused by torch.load(weights_only=True)"
        raise RuntimeError(
            f"{path} is not a genuine training state: it holds objects other than tensors and plain data "
            "(numbers, strings, lists, dicts), and only those are loaded, so nothing in it was executed "
            f"({refused}). Something other than the sweeper wrote it; delete its checkpoint folder to "
            "resume from an earlier checkpoint.") from None


def restore_training_state(directory: Path, model, optimizer, run: PretrainConfig,
                           world: int) -> tuple[int, list[dict], dict]:
    """Load the optimizer state of `directory`'s `training_state.pt`; returns (step, log, the open
    log window's loss sums). Sharded: rank 0 alone maps the file and hands every rank its slices
    (`trainables.sharding`)."""
    path = Path(directory) / TRAINING_STATE
    if not sharded(run, world):
        state = read_training_state(path)
        optimizer.load_state_dict(state["optimizer"])
    else:
        mapped = {}  # rank 0's view of the file; the other ranks read nothing

        def progress() -> dict:
            mapped.update(read_training_state(path, mmap=True))
            return {"step": mapped["step"], "log": mapped["log"], "window": mapped.get("window", {})}

        state = sharding.from_rank0(progress)
        sharding.restore_optimizer(model, optimizer, mapped.get("optimizer"))
        mapped.clear()
    print(f"[pretrain {run.name}] resumed from step {state['step']}", flush=True)
    return state["step"], state["log"], state.get("window") or {}


def initial_model(run: PretrainConfig, vocab_size: int) -> LlamaEncoderForMaskedLM:
    """Fresh weights, or the decayed checkpoint continued pretraining starts from."""
    if run.init.kind == "study":
        # Weights only: a continued run starts a fresh optimizer.
        weights = folders.local_copy(run.init.location, CHECKPOINT_MARKER, skip=(TRAINING_STATE,))
        return LlamaEncoderForMaskedLM.from_pretrained(weights)
    if run.init.kind == "hf":
        from trainables.convert import encoder_from_causal_lm

        return encoder_from_causal_lm(run.init.location, vocab_size)
    if native(run):
        from trainables.causal_mlm import masked_lm_from_causal_lm

        return masked_lm_from_causal_lm(run.init.location, vocab_size)
    return build_model(LlamaEncoderConfig(**run.model_config), run.seed)


def begin_step(run: PretrainConfig, step: int, optimizer, losses: dict[str, ObjectiveLoss]):
    """`step`'s phase, its loss function (resolved once into `losses`) and its learning rate,
    which the optimizer is set to: what every step of the loop does before its batch (and
    benchmarks/gpu_step.py's loop, which times the step without Ray)."""
    phase = run.phase_at(step)
    if phase.loss not in losses:
        losses[phase.loss] = resolve(phase.loss)
    lr = wsd_lr(step, peak_lr=run.peak_lr, total_steps=run.total_steps,
                warmup_steps=run.warmup_steps, decay_steps=run.decay_steps)
    for group in optimizer.param_groups:
        group["lr"] = lr
    return phase, losses[phase.loss], lr


def train_loop_per_worker(loop_config: dict) -> None:
    """Ray Train's entry point; `loop_config["run"]` is the run's `PretrainConfig`."""
    import ray.train

    from transformers.utils import logging as hf_logging

    run: PretrainConfig = loop_config["run"]
    hf_logging.disable_progress_bar()  # one progress line per log step is ours
    torch.set_num_threads(run.threads)
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = torch.device("cuda" if torch.cuda.is_available() and run.use_gpu else "cpu")
    corpus = PackedCorpus(run.corpus_dir, run.seq_len, run.data_seed, run.replicate, run.sample_lengths)
    drop_unpublished_checkpoints(run)
    resume_context, unknown_to_ray = resume_point(run)
    with resume_context as resume:
        model = prepared_model(resume, run, corpus.meta["vocab_size"], world, device)
        optimizer = adamw(model.parameters(), run.peak_lr, run.optimizer.torch_kwargs(), device)
        start, log, window = restore_training_state(resume, model, optimizer, run, world) if resume else (0, [], {})
        if run.branch_from and start == run.branch_step:  # its own checkpoints are all later
            log = []  # the trunk's steps: this run logs from its branch step on
        for step in unknown_to_ray:
            register_with_ray(run, step)
    if start and rank == 0:
        # A run killed between a checkpoint and its retention (below) applies it now: after the
        # final checkpoint no later step would.
        apply_retention(run, start)
    losses: dict[str, ObjectiveLoss] = {}  # phase.loss -> its function, imported once
    tracker = None
    if rank == 0:
        tracker = start_wandb(run.tracking, name=run.name, run_id=run.run_key, location=run.run_dir,
                              config={k: v for k, v in asdict(run).items() if k != "tracking"})
    with Notice(distributed=run.workers > 0) as notice:
        train_steps(run, model, optimizer, corpus, start, log, window, losses, tracker, notice, device)
    if tracker is not None:
        tracker.finish()


def train_steps(run: PretrainConfig, model, optimizer, corpus: PackedCorpus, start: int, log: list[dict],
                window: dict, losses: dict[str, ObjectiveLoss], tracker, notice: Notice, device: torch.device) -> None:
    """Steps `start` to the run's end, saving as planned; on a preemption notice, a resume state
    at the step boundary where it is seen (once): local mode then stops, a worker group trains on
    until Ray Train stops it (trainables.preemption)."""
    import ray.train

    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    share = run.global_batch_size // world  # this rank's rows: [rank * share, (rank + 1) * share)
    mask_token_id, vocab_size = corpus.meta["mask_token_id"], unwrap(model).config.vocab_size
    kept = kept_steps(run)
    autocast_dtype = torch.bfloat16 if device.type == "cuda" else None
    window_started, window_tokens = time.time(), 0
    # A resume state saved on a notice between log steps carries the open window's loss sums, so
    # the next log row is the undisturbed run's.
    loss_sum, loss_count = window.get("loss_sum", 0.0), window.get("loss_count", 0)
    noticed = False
    for step in range(start, run.total_steps):
        phase, loss, lr = begin_step(run, step, optimizer, losses)
        # A continued run reads on from where its source stopped: no batch is seen twice.
        data_step = run.data_offset_steps + step
        batch = corpus.batch(data_step, run.global_batch_size, rank, world).to(device)
        # Draws are a function of (seed, data step, row of the global batch): the same in any
        # split into workers and micro-batches, and again after a resume. PackedCorpus gives
        # rank r the rows [r * share, (r + 1) * share) of the global batch.
        context = LossContext(draws=RowDraws(run.seed, data_step, first_row=rank * share, device=device),
                              mask_token_id=mask_token_id, vocab_size=vocab_size, lm_loss=run.lm_loss)
        result = train_step(model, optimizer, batch, loss, phase.settings, context,
                            micro_batch_size=run.micro_batch_size, grad_clip=run.optimizer.grad_clip,
                            autocast_dtype=autocast_dtype)
        loss_sum, loss_count = loss_sum + result.loss, loss_count + 1
        window_tokens += batch.input_ids.numel() * world
        done = step + 1
        saving = done in kept or (run.save_every and done % run.save_every == 0)
        if done % run.log_every == 0 or saving:
            elapsed = time.time() - window_started
            row = {"step": done, "phase": phase.objective, "loss": loss_sum / loss_count, "lr": lr,
                   "tokens_seen": run.tokens_seen(done), "tokens_per_s": window_tokens / max(elapsed, 1e-9)}
            log.append(row)
            if rank == 0:
                print(f"[pretrain {run.name}] step {done}/{run.total_steps} {phase.objective} "
                      f"loss {row['loss']:.3f} lr {lr:.2e} {row['tokens_per_s']:,.0f} tok/s", flush=True)
                # Where this process started (0 or the resumed step): stdout of a restarted Ray
                # worker can miss the driver, the run folder cannot.
                write_progress(run, {**row, "started_from": start})
                if tracker is not None:
                    tracker.log(row, step=done)
            window_started, window_tokens, loss_sum, loss_count = time.time(), 0, 0.0, 0
        if saving:
            save_checkpoint(model, optimizer, run, done, log,
                            {"step": done, "phase": phase.objective, "loss": log[-1]["loss"],
                             RETENTION_METRIC: retention_priority(run, done),
                             **({"attention": unwrap(model).attention} if native(run) else {})})
            if rank == 0:  # the newer checkpoint is persisted: Ray's report returns after the upload
                apply_retention(run, done)
        if noticed or done == run.total_steps or notice.pending() is None:
            continue
        noticed = True
        if not saving:
            save_checkpoint(model, optimizer, run, done, log,
                            {"step": done, "phase": phase.objective, "loss": result.loss,
                             RETENTION_METRIC: retention_priority(run, done)},
                            window={"loss_sum": loss_sum, "loss_count": loss_count})
            if rank == 0:
                apply_retention(run, done)
        if rank == 0:
            RunLayout(run.run_dir).record_interruption("preemption", step=done, reason=notice.reason)
            print(f"[pretrain {run.name}] preemption notice ({notice.reason}): resume state saved at step {done}"
                  + ("" if run.workers > 0 else ", stopping"), flush=True)
        if run.workers == 0:
            return  # the driver relaunches the run, from this step
