"""Schedule the pretraining grid on Ray Train, one `TorchTrainer.fit()` per run.

Each run's fit is launched from a Ray task, so runs proceed in parallel as far as the cluster's
resources allow. With `pretraining_workers: 0` the fit is Train's local mode, in that task's
process (no worker-group start, ~40 s saved per run on a laptop); with N workers Train starts a
worker group (DDP) and persists checkpoints to `storage_path/<run name>`, deleting the
superseded resume-only ones itself (`keep_resume_checkpoints`). Either way the run's
checkpoints land in the run's folder (sweeper.store.layout), and Train resumes a rerun of the same
name from the latest one. The loop receives a typed `PretrainConfig` (sweeper.contract.configs). The
study may live in an object store: Train is handed the store's pyarrow filesystem, and the
run's markers are single objects (sweeper.store.storage).

With `pretraining.share_prefixes` (the default) a run whose first steps are another run's
(sweeper.plan.branches) is a branch: its trunk saves and keeps a whole checkpoint at the branch
step, and the branch starts from it as soon as it is written, beside its trunk. A branch with
checkpoints of its own resumes from them; one whose trunk failed before the branch step fails
with that reason; one whose trunk finished, or trained past the branch step, without that
checkpoint (trained before the branch was planned: a study extended) starts from the latest training state a finished
run keeps within the steps it shares with the branch, or, with none, trains from scratch and says so. Once every branch
from a step is done and its trunk too, that checkpoint's training state is dropped.
"""
from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import asdict

import ray
import ray.train

from sweeper.plan.branches import Branch, shared_prefixes, shared_with
from sweeper.plan.runs import PretrainingRun
from sweeper.contract.configs import InitSource, PretrainConfig
from sweeper.contract.heavy_imports import imports_frozen
from sweeper.spec.study import StudySpec
from sweeper.store import storage
from sweeper.store.layout import TRAIN_LOG, TRAINING_STATE, RunLayout, StudyLayout
from sweeper.store.permanent_errors import cause_line
from sweeper.store.results import PRETRAINING, write_rows


INTERRUPTION_BUDGETS = {"failure": "max_failures", "preemption": "max_preemptions", "node lost": "max_preemptions"}
"""What stops a run before its end (its `interruptions.json` kinds) -> the `resources` setting
that caps its relaunches. A lost node (raylet and workers gone at once, no notice: Ray's
NodeDiedError) is not the run's fault, as a preemption is not: a spot node reclaimed with no
notice that Ray saw is one. Only errors of the run's own (an exception, its process killed on a
node that lives on) spend `max_failures`."""


def interruption_kind(error: Exception) -> str:
    """How a run's task that raised `error` was stopped: "node lost" when Ray could not reach its
    node's raylet to learn how its worker ended (NodeDiedError: the node is dead or unreachable),
    else "failure" (an exception of the run's, or its process killed on a node that lives on:
    WorkerCrashedError, an out-of-memory kill)."""
    return "node lost" if isinstance(error, ray.exceptions.NodeDiedError) else "failure"


def budget_spent(counts: Counter, kind: str) -> tuple[str, int]:
    """(the `resources` setting that caps `kind`, the interruptions of a run counted against it)."""
    setting = INTERRUPTION_BUDGETS[kind]
    return setting, sum(n for other, n in counts.items() if INTERRUPTION_BUDGETS[other] == setting)


def pretrain_config(run: PretrainingRun, spec: StudySpec, layout: StudyLayout, corpus_dir: str,
                    runs_by_name: dict[str, PretrainingRun], branch: Branch | None = None,
                    branch_steps: tuple[int, ...] = ()) -> PretrainConfig:
    """Everything the worker loop reads, typed (workers never import the driver). Its locations
    carry no credentials (`storage.strip_credentials`): workers reach the bucket through their
    own provider chain. `branch`: the run starts from its trunk's checkpoint at the branch step;
    `branch_steps`: the steps its own branches start from (saved and kept whole)."""
    pre, res = spec.pretraining, spec.resources
    if run.init_from_run:
        source = runs_by_name[run.init_from_run]
        init = InitSource(kind="study",
                          location=storage.strip_credentials(layout.checkpoint(source.name, source.total_steps)))
    elif run.init_from_hf:
        init = InitSource(kind="hf-native" if run.hf_init == "native" else "hf", location=run.init_from_hf)
    else:
        init = InitSource(kind="scratch")
    return PretrainConfig(
        name=run.name, run_key=run.run_key, objective=run.objective, mask_ratio=run.mask_ratio,
        clm_fraction=run.clm_fraction, switch_step=run.switch_step,
        run_dir=storage.strip_credentials(layout.run(run.name).root),
        corpus_dir=storage.strip_credentials(corpus_dir), model_config=run.model_config, init=init, phases=run.phases,
        total_steps=run.total_steps, checkpoint_steps=run.checkpoint_steps,
        global_batch_size=run.global_batch_size, seq_len=run.seq_len, sample_lengths=spec.data.sample_lengths,
        peak_lr=run.peak_lr, optimizer=run.optimizer, warmup_steps=run.warmup_steps, decay_steps=run.decay_steps,
        seed=run.seed, data_seed=spec.data.order_seed, replicate=run.replicate, data_offset_steps=run.steps_before,
        log_every=pre.log_every, save_every=pre.save_every, workers=res.pretraining_workers,
        threads=max(1, int(res.cpus_per_worker)), sharding=res.sharding,
        compile=res.gpus_per_worker > 0 if pre.compile is None else pre.compile, lm_loss=pre.lm_loss,
        micro_batch_size=pre.micro_batch_size, activation_checkpointing=pre.activation_checkpointing,
        keep_resume_checkpoints=pre.keep_resume_checkpoints,
        use_gpu=res.gpus_per_worker > 0, tracking=spec.tracking,
        branch_from=storage.strip_credentials(layout.checkpoint(branch.trunk, branch.step)) if branch else None,
        branch_step=branch.step if branch else 0, branch_steps=branch_steps,
    )


def train_worker_loop(loop_config: dict) -> None:
    """Body of each Ray Train worker (in local mode, of fit_run's own process): the run's loop."""
    with imports_frozen():
        from trainables.pretrain_loop import train_loop_per_worker
    train_loop_per_worker(loop_config)


def fit_run(run: PretrainConfig, resources: dict) -> dict:
    """Body of the Ray task that owns one run: build the TorchTrainer and fit it."""
    from ray.train import ControllerError, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    with imports_frozen():
        from trainables.pretrain_loop import ray_checkpoint_config

    storage.make_dirs(run.run_dir)
    # Train (worker group) tees a worker's prints to its logger as well: every line twice on the
    # console. Train passes this on to its controller and workers.
    os.environ.setdefault("RAY_TRAIN_ENABLE_PRINT_PATCH", "0")
    # Train writes `storage_path/<name>/`: the run folder, on the study's filesystem.
    filesystem, runs_path = storage.filesystem(storage.parent(run.run_dir))
    workers = run.workers
    scaling = ScalingConfig(
        num_workers=workers, use_gpu=run.use_gpu and workers > 0,
        resources_per_worker={"CPU": resources["cpus_per_worker"], "GPU": resources["gpus_per_worker"],
                              **resources.get("custom_per_worker", {})}
        if workers > 0 else None,
    )

    def trainer():
        return TorchTrainer(
            train_worker_loop, train_loop_config={"run": run}, scaling_config=scaling,
            run_config=RunConfig(
                name=run.name, storage_path=runs_path,
                storage_filesystem=filesystem if storage.is_remote(run.run_dir) else None,
                # Train counts a drained node's group apart from errors (trainables.preemption);
                # callers that name no budget for it get none.
                failure_config=FailureConfig(max_failures=resources["max_failures"],
                                             max_preemption_failures=resources.get("max_preemptions", 0)),
                # A worker group's checkpoints are Ray's to delete (its run snapshot lists them):
                # evaluated ones and the newest resume ones stay (trainables.pretrain_loop.retention).
                checkpoint_config=ray_checkpoint_config(run),
            ),
        )

    started = time.time()
    for attempt in range(1, resources["max_failures"] + 2):
        try:
            trainer().fit()
            break
        except ControllerError as error:
            # Train's controller itself failed (seen on Ray 2.60: restarting a killed worker
            # group, the new group's actor was destroyed with the old placement group), which
            # FailureConfig does not retry. A new trainer resumes from the last checkpoint, as a
            # rerun of the study would.
            if attempt > resources["max_failures"]:
                raise
            print(f"[pretrain {run.name}] Ray Train's controller failed ({str(error).strip().splitlines()[0][:200]}); "
                  f"fitting again from the last checkpoint (retry {attempt}/{resources['max_failures']})", flush=True)
    outcome = {"run_name": run.name, "wall_time_s": time.time() - started}
    if workers == 0 and run.total_steps not in RunLayout(run.run_dir).saved_checkpoints():
        # Local mode returns early only on a preemption notice, its resume state saved.
        outcome["preempted_at"] = max(RunLayout(run.run_dir).saved_checkpoints(), default=0)
    return outcome


def record_finished_run(study: str, layout: StudyLayout, run: PretrainingRun, wall_time_s: float) -> None:
    """Write the run's training log to the pretraining table, then mark it done."""
    run_layout = layout.run(run.name)
    log = storage.read_json(storage.join(run_layout.checkpoint(run.total_steps), TRAIN_LOG))
    write_rows(layout, PRETRAINING, [
        {"study": study, "run_name": run.name, "run_key": run.run_key, "objective": run.objective,
         "replicate": run.replicate, **row}
        for row in log
    ])
    storage.remove(run_layout.failed)
    storage.write_json(run_layout.done, {
        "run_key": run.run_key, "wall_time_s": wall_time_s, "identity": run.identity,
        "run": {k: v for k, v in asdict(run).items() if k != "identity"}})


class PretrainingGrid:
    """The pretraining grid as a non-blocking state machine, driven by the pipeline loop
    (sweeper.run.pipeline) so fine-tuning can run beside it.

    `start()` launches every run whose inputs are ready (a continued-pretraining run waits for
    its source); `poll()` records the runs that finished or failed since and launches the runs
    they unblock; `checkpoint_ready()` says whether a checkpoint can be fine-tuned yet; `failed`
    names the runs that will never write their missing checkpoints. Each run is fitted in its
    own Ray task, in parallel as far as the cluster's resources allow."""

    def __init__(self, spec: StudySpec, runs: list[PretrainingRun], layout: StudyLayout, corpus_dirs: dict,
                 retry_failed: bool = False):
        self.spec, self.layout, self.corpus_dirs = spec, layout, corpus_dirs
        self.by_name = {run.name: run for run in runs}
        self.done = {run.name for run in runs if layout.run(run.name).is_done(run.run_key)}
        self.failed = {run.name for run in runs if run.name not in self.done
                       and layout.run(run.name).has_failed(run.run_key) and not retry_failed}
        self.waiting = [run for run in runs if run.name not in self.done | self.failed]
        # Shared prefixes (sweeper.plan.branches): a branch waits for its trunk's checkpoint at
        # the branch step, which the trunk saves and keeps whole (PretrainConfig.branch_steps).
        self.branches = shared_prefixes(spec, runs)
        self.branch_steps: dict[str, set[int]] = {}
        for branch in self.branches.values():
            self.branch_steps.setdefault(branch.trunk, set()).add(branch.step)
        self.released: set[tuple[str, int]] = set()  # (trunk, step) whose training state is dropped
        # Branches with checkpoints of their own resume from them, their trunk's no longer needed.
        self.resumed = {run.name for run in self.waiting
                        if run.name in self.branches and layout.run(run.name).saved_checkpoints()}
        self.total = len(self.waiting)
        self.futures: dict = {}
        self.listings: dict[str, tuple[float, set[int]]] = {}  # run name -> (listed at, complete steps)
        res = spec.resources
        self.resources = {"cpus_per_worker": res.cpus_per_worker, "gpus_per_worker": res.gpus_per_worker,
                          "max_failures": res.max_failures, "max_preemptions": res.max_preemptions,
                          "custom_per_worker": dict(res.custom_resources_per_worker)}
        self.local = local = res.pretraining_workers == 0
        # A local-mode run has no Train worker group to restart: `record` relaunches its task after
        # an error (a crashed process, an exception: `max_failures`), a preemption notice or the
        # loss of its node (`max_preemptions`), counted apart, and the loop resumes from the run's
        # newest checkpoint. Ray's own task retries would count them all alike.
        self.configs: dict[str, PretrainConfig] = {}
        self.interruptions: dict[str, Counter] = {}  # run name -> {"failure": n, "preemption": m, "node lost": k}
        self.task = ray.remote(fit_run).options(
            num_cpus=res.cpus_per_worker if local else 0, num_gpus=res.gpus_per_worker if local else 0,
            max_retries=0,
            # Local mode reads the corpus and writes checkpoints in this task's process: it goes
            # where a worker would (a worker group's workers take the resources themselves).
            resources=dict(res.custom_resources_per_worker) if local else None,
        )
        print(f"[pretrain] {len(runs)} runs: {len(self.done)} already done, {len(self.failed)} failed before "
              f"(--retry-failed reruns them), {len(self.waiting)} to train", flush=True)

    @property
    def finished(self) -> bool:
        return not self.waiting and not self.futures

    def start(self) -> None:
        for run in list(self.waiting):
            if run.init_from_run in self.failed:
                self.waiting.remove(run)
                self.failed.add(run.name)
                print(f"[pretrain] {run.name} skipped: its source {run.init_from_run} failed", flush=True)
            elif run.init_from_run is None or run.init_from_run in self.done:
                branch = self.branches.get(run.name)
                if branch is not None and run.name not in self.resumed and not self.trunk_ready(branch):
                    if branch.trunk in self.failed:
                        self.fail_branch(run, branch)
                        continue
                    if branch.trunk not in self.done and not self.trunk_past(branch):
                        continue  # its trunk has not reached the branch step yet
                    branch = self.kept_start(run, branch)
                self.waiting.remove(run)
                storage.write_json(
                    self.layout.run(run.name).started, {"run_key": run.run_key, "identity": run.identity}
                )
                self.configs[run.name] = pretrain_config(
                    run, self.spec, self.layout, self.corpus_dirs[run.tokenizer], self.by_name, branch,
                    tuple(sorted(self.branch_steps.get(run.name, ()))))
                self.futures[self.task.remote(self.configs[run.name], self.resources)] = run

    def trunk_ready(self, branch: Branch) -> bool:
        """Whether the trunk's checkpoint at the branch step is complete, training state included."""
        return (branch.step in self.complete_steps(self.by_name[branch.trunk])
                and storage.exists(storage.join(self.layout.checkpoint(branch.trunk, branch.step), TRAINING_STATE)))

    def trunk_past(self, branch: Branch) -> bool:
        """Whether the trunk has a complete checkpoint after the branch step: it will not save one
        there (it was resumed past that step when the branch was added), so waiting is no use."""
        return any(step > branch.step for step in self.complete_steps(self.by_name[branch.trunk]))

    def kept_start(self, run: PretrainingRun, planned: Branch) -> Branch | None:
        """A branch whose trunk finished, or trained past the branch step, without its training
        state there (it was trained before the study had this branch, or the state was dropped
        once the branches of then were done): the latest training state a finished run keeps at or before the steps it
        shares with `run` (the trunk's own at an earlier step, or another run's), which starts it
        as exactly (sweeper.plan.branches); None, said, when there is none and it trains from scratch."""
        shared = shared_with(list(self.by_name.values()), run.name)
        kept = [(step, other) for other, steps in shared.items() if other in self.done
                for step, folder in self.layout.run(other).saved_checkpoints().items()
                if 0 < step <= steps and storage.exists(storage.join(folder, TRAINING_STATE))]
        went = "finished" if planned.trunk in self.done else "trained past that step"
        if not kept:
            print(f"[pretrain] {run.name} trains from scratch: its trunk {planned.trunk} {went} without a resumable "
                  f"checkpoint at step {planned.step:,} (trained before it had this branch), and no finished run that "
                  "trains its first steps as it does keeps one there or earlier", flush=True)
            return None
        step, other = max(kept, key=lambda found: (found[0], found[1] == planned.trunk))
        # Recorded as its branch, so that a planned branch point found here keeps its state until
        # this run is done too (`release_branch_points`); no other state is ever dropped for it.
        self.branches[run.name] = Branch(run.name, other, step)
        again = f"; {planned.step - step:,} shared steps trained again" if step < planned.step else ""
        print(f"[pretrain] {run.name} starts from {other}'s kept training state at step {step:,} (its trunk "
              f"{planned.trunk} {went} without one at step {planned.step:,}{again})", flush=True)
        return self.branches[run.name]

    def fail_branch(self, run: PretrainingRun, branch: Branch) -> None:
        """A branch whose trunk failed before the branch step: failed too, with the reason."""
        message = f"its trunk {branch.trunk} failed before step {branch.step}, where this run starts from it"
        storage.write_json(self.layout.run(run.name).failed, {"run_key": run.run_key, "error": message,
                                                               "failed_at": time.time()})
        self.waiting.remove(run)
        self.failed.add(run.name)
        print(f"[pretrain] {run.name} FAILED: {message}", flush=True)

    def release_branch_points(self) -> None:
        """Drop the training state (the optimizer's, the bulk) of a finished trunk's checkpoint
        once every branch from it is done: the weights stay, as an evaluated checkpoint's do."""
        for trunk, steps in self.branch_steps.items():
            if trunk not in self.done:
                continue
            for step in steps - {self.by_name[trunk].total_steps}:
                if (trunk, step) not in self.released and all(
                        b.run in self.done for b in self.branches.values() if (b.trunk, b.step) == (trunk, step)):
                    storage.remove(storage.join(self.layout.checkpoint(trunk, step), TRAINING_STATE))
                    self.released.add((trunk, step))

    @property
    def awaiting_trunks(self) -> bool:
        """A waiting run is a branch (it may start once its trunk passes the branch step)."""
        return any(run.name in self.branches for run in self.waiting)

    def poll(self, timeout: float | None = 0.0) -> None:
        """Record what finished (waiting up to `timeout` s for a run to end; None: until one
        does), launch what it unblocks."""
        if not self.futures:
            return
        ready, _ = ray.wait(list(self.futures), num_returns=1, timeout=timeout)
        if ready:  # and whatever else ended meanwhile
            ready, _ = ray.wait(list(self.futures), num_returns=len(self.futures), timeout=0)
        for future in ready:
            self.record(future, self.futures.pop(future))
        if ready or self.awaiting_trunks:
            self.start()

    def relaunched(self, run: PretrainingRun, kind: str, what: str, **fields) -> bool:
        """Count an interruption of `run` (`kind`: one of INTERRUPTION_BUDGETS) in the run folder
        and, within its budget (local mode; a worker group's are Ray Train's), launch it again
        from its newest checkpoint. Whether it was."""
        if kind != "preemption":  # a preemption is recorded by the loop that saw the notice
            self.layout.run(run.name).record_interruption(kind, **fields)
        counts = self.interruptions.setdefault(run.name, Counter())
        counts[kind] += 1
        setting, spent = budget_spent(counts, kind)
        if not self.local or spent > self.resources[setting]:
            return False
        print(f"[pretrain] {run.name} {what}; training on from its newest checkpoint ({kind}; {spent} of "
              f"{self.resources[setting]}: resources.{setting})", flush=True)
        self.futures[self.task.remote(self.configs[run.name], self.resources)] = run
        return True

    def spent_on_notices(self, run: PretrainingRun) -> str:
        """Why a run stopped by a notice or a lost node once too often is failed."""
        counts = self.interruptions[run.name]
        return (f"preempted {counts['preemption']} times and lost its node {counts['node lost']} times, more than "
                f"resources.max_preemptions ({self.resources['max_preemptions']}) in all")

    def fail(self, run: PretrainingRun, message: str) -> None:
        failed_file = self.layout.run(run.name).failed
        storage.write_json(failed_file, {"run_key": run.run_key, "error": message, "failed_at": time.time()})
        self.failed.add(run.name)
        print(f"[pretrain] {run.name} FAILED: {message.splitlines()[0][:300]} "
              f"(details in {storage.display(failed_file)})", flush=True)

    def record(self, future, run: PretrainingRun) -> None:
        try:
            outcome = ray.get(future)
        except Exception as error:  # the other runs go on; every failure is reported
            message = storage.redact(f"{type(error).__name__}: {str(error).strip()[-2000:]}")
            if isinstance(getattr(error, "cause", None), ray.train.PreemptionError):
                # A worker group past Train's max_preemption_failures: no failure of its own.
                self.fail(run, f"preempted more than resources.max_preemptions "
                               f"({self.resources['max_preemptions']}) times: {message}")
                return
            if (line := cause_line(error)) is not None:
                # A full disk (or a forbidden folder) fails every relaunch the same way: the run
                # fails at once, the others go on; its checkpoints stay for `--retry-failed`.
                self.fail(run, f"{line}; not relaunched (every try would meet it): once it is mended (space "
                               "freed), `sweeper run --retry-failed` resumes the run from its last checkpoint")
                self.layout.run(run.name).record_interruption("failure", error=line)
                return
            if interruption_kind(error) == "node lost":  # not the run's fault: no failure
                step = max(self.layout.run(run.name).saved_checkpoints(), default=0)
                saved = f"its last saved state is step {step}" if step else "nothing saved yet: from scratch"
                if not self.relaunched(run, "node lost", f"lost its node ({saved})",
                                       step=step, error=message.splitlines()[0][:300]):
                    self.fail(run, f"{self.spent_on_notices(run)}: {message}" if self.local else message)
                return
            if not self.relaunched(run, "failure", f"failed ({message.splitlines()[0][:200]})", error=message):
                self.fail(run, message)
            return
        if "preempted_at" in outcome:  # the loop recorded the notice in the run folder
            step = outcome["preempted_at"]
            if not self.relaunched(run, "preemption", f"was preempted (resume state at step {step})", step=step):
                self.fail(run, self.spent_on_notices(run))
            return
        record_finished_run(self.spec.study, self.layout, run, outcome["wall_time_s"])
        self.done.add(run.name)
        self.release_branch_points()
        finished = self.total - len(self.waiting) - len(self.futures)
        print(f"[pretrain] {run.name} done in {outcome['wall_time_s']:.0f}s ({finished}/{self.total})", flush=True)

    def checkpoint_ready(self, run: PretrainingRun, step: int) -> bool:
        """Whether step `step` of `run` can be fine-tuned now."""
        return run.name in self.done or step in self.complete_steps(run)

    def complete_steps(self, run: PretrainingRun, max_age_s: float = 2.0) -> set[int]:
        """Steps of `run` whose checkpoint is complete, listed at most every `max_age_s` per run:
        the pipeline loop asks once per unwritten checkpoint on each pass, and in an object store
        a listing is a request. Local
        mode publishes a checkpoint with one atomic rename, so every marker counts. Ray Train
        uploads a worker group's checkpoint file by file in no set order: its newest marker counts
        once the files it lists have arrived, the older ones because a later upload began after
        theirs ended (the report of a step returns after its upload)."""
        listed_at, ready = self.listings.get(run.name, (0.0, set()))
        if time.time() - listed_at > max_age_s:
            run_layout = self.layout.run(run.name)
            saved = run_layout.saved_checkpoints()
            ready = set(saved)
            if (
                self.spec.resources.pretraining_workers > 0
                and saved
                and not run_layout.files_arrived(saved[max(saved)])
            ):
                ready.discard(max(saved))
            self.listings[run.name] = (time.time(), ready)
        return ready
