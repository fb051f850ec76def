"""The study folder: every file and folder a study holds, named in one place (Ray- and torch-free).

    <study>/spec.yaml                      the spec the study was last run with
           specs/<n>-<hash>.yaml           every spec the study ran, numbered in the order they ran
           specs/<n>-<hash>.plan.json      what that spec planned: trial keys and cells, runs, settings
           plan.json                       planned trial keys and run keys (reports, status)
           resolved.json                   resolved fine-tuning settings (change detection)
           environments.json               the software and hardware each `sweeper run` ran on (store.environments)
           live.json                       the driver's heartbeat: pid, host, trials in flight
           trial_interruptions.json        trials run again after a preemption or lost node (status)
           lease.json                      the single-writer lease of the running driver (sweeper.run.lease)
           logs/ray-debug.log              Ray's and Tune's notices kept off the console (sweeper.run.console)
           report.md, figures/*.png        `sweeper report`
           results/<table>/...             the Parquet store (sweeper.store.results)
           quarantine/<table>/...          damaged store files set aside, each with a .why.txt note
           tune/                           Ray Tune's state while a shard runs
           optuna/journal.log              search: optuna: one Optuna study per (checkpoint, task) cell
                                           (Optuna's JournalFileBackend; `optuna-dashboard` opens it)
           cache/corpus-<key>/             prepared corpus: tokenizer + token shards (key: what shapes the
                                           stream, the source's content and the tokenizer's inputs included),
               tokenizer_key.json          its tokenizer's inputs: a longer corpus of the study takes its tokenizer
           cache/tasks/<task>-len<L>-<key>/ a task tokenised once per tokenizer and data variant (key: the
                                           tokenizer's content hash, the task and its source data, ...)
           cache/checkpoints/<name>-<key>/ a checkpoint from elsewhere (key: its files' content or hub commit)
           pretraining/<run>/              one run (RunLayout)
               sweeper_run.json            the run's key and identity when it was started
               sweeper_done.json           written when the run finished (its key)
               sweeper_failed.json         written when the run failed (its key, the error)
               progress.json               where the run is (status, kill tests)
               interruptions.json          preemptions, lost nodes, failures before its end
               step-<N>/                   a checkpoint: Hugging Face files, tokenizer,
                   training_state.pt       optimizer state and log (resume only)
                   train_log.json          the loss log up to N (read by the driver)
                   sweeper_checkpoint.json written last: the checkpoint is complete (it lists
                                           every other file and its size: Ray Train uploads a
                                           worker group's checkpoint file by file, in no set order)

A location is a path or an object-store URI (sweeper.store.storage). The driver hands workers concrete
locations (a run folder, a checkpoint folder, a cache folder); the file names inside a run and a
checkpoint are the constants below, which the worker loops import from here.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sweeper.store import storage

CHECKPOINT_MARKER = "sweeper_checkpoint.json"
"""Written last into a checkpoint folder: the folder is complete."""
TRAINING_STATE = "training_state.pt"
"""Optimizer state, step and log of a checkpoint; read only to resume (tensors only)."""
TRAIN_LOG = "train_log.json"
CORPUS_MARKER = "corpus_meta.json"
"""Written last into a prepared corpus folder."""
TASK_MARKER = "meta.json"
"""Written last into a prepared task folder."""


def checkpoint_folder_name(step: int) -> str:
    return f"step-{step}"


def checkpoint_step(folder_name: str) -> int:
    """The step of a checkpoint folder's name (`checkpoint_folder_name`'s inverse)."""
    return int(folder_name.removeprefix("step-"))


@dataclass(frozen=True, slots=True)
class RunLayout:
    """One pretraining run's folder."""

    root: str

    @property
    def started(self) -> str:
        return storage.join(self.root, "sweeper_run.json")

    @property
    def done(self) -> str:
        return storage.join(self.root, "sweeper_done.json")

    @property
    def failed(self) -> str:
        return storage.join(self.root, "sweeper_failed.json")

    @property
    def progress(self) -> str:
        return storage.join(self.root, "progress.json")

    @property
    def interruptions_file(self) -> str:
        return storage.join(self.root, "interruptions.json")

    def interruptions(self, damaged: Callable[[str, str], None] | None = None) -> list[dict]:
        """What stopped the run before its end, oldest first: {"kind": "preemption" (a notice, the
        training loop's record), "failure" (an error, the driver's) or "node lost" (its node gone
        with no notice, the driver's), "at": epoch seconds, ...}."""
        return storage.read_json(self.interruptions_file, damaged=damaged, kind=list) or []

    def record_interruption(self, kind: str, **fields) -> None:
        """Append one to `interruptions()`. One writer at a time: the loop while the run trains,
        the driver once its process has ended."""
        storage.write_json(self.interruptions_file,
                           [*self.interruptions(), {"kind": kind, "at": time.time(), **fields}])

    def checkpoint(self, step: int) -> str:
        return storage.join(self.root, checkpoint_folder_name(step))

    def saved_checkpoints(self) -> dict[int, str]:
        """step -> folder of every complete checkpoint (its marker written)."""
        return storage.step_folders(self.root, CHECKPOINT_MARKER)

    def files_arrived(self, folder: str, present: dict[str, int] | None = None) -> bool | None:
        """Whether every file the marker in the checkpoint `folder` lists is there at its listed
        size: a marker can land before the files it lists (Ray Train uploads a worker group's
        checkpoint file by file, in no set order). None when the marker lists no files (written
        before markers did; such a checkpoint was published in one piece or is an older one).
        `present`: the folder's `storage.file_sizes`, when the caller has listed it already."""
        listed = storage.read_json(storage.join(folder, CHECKPOINT_MARKER), default={}, kind=dict).get("files")
        if listed is None:
            return None
        if not isinstance(listed, dict):  # a marker of another shape: its files cannot be checked
            return None
        present = storage.file_sizes(folder) if present is None else present
        return all(present.get(name) == size for name, size in listed.items())

    def latest_resumable(self, newer_than: int = -1) -> tuple[int, str] | None:
        """(step, folder) of the newest checkpoint after `newer_than` that a run can resume from:
        its files all arrived (`files_arrived`) and its training state kept (an older evaluated
        checkpoint drops it)."""
        for step, folder in sorted(self.saved_checkpoints().items(), reverse=True):
            if step <= newer_than:
                break
            present = storage.file_sizes(folder)
            if TRAINING_STATE in present and self.files_arrived(folder, present) is not False:
                return step, folder
        return None

    def marker_of(self, location: str, run_key: str, damaged: Callable[[str, str], None] | None = None) -> bool:
        """Whether the marker file at `location` was written for this run key (not for a former
        configuration of the same run name). A damaged marker (empty, not JSON) counts as absent
        and is told to `damaged(location, why)` (storage.read_json): a run whose done marker is
        damaged is not done, and resumes from its last checkpoint."""
        marker = storage.read_json(location, default={}, damaged=damaged, kind=dict)
        return isinstance(marker, dict) and marker.get("run_key") == run_key

    def is_done(self, run_key: str, damaged: Callable[[str, str], None] | None = None) -> bool:
        return self.marker_of(self.done, run_key, damaged)

    def has_failed(self, run_key: str, damaged: Callable[[str, str], None] | None = None) -> bool:
        return self.marker_of(self.failed, run_key, damaged)


@dataclass(frozen=True, slots=True)
class StudyLayout:
    """Every location of one study, from its root (a path or a URI)."""

    root: str

    def path(self, *parts: str) -> str:
        return storage.join(self.root, *parts)

    def without_credentials(self) -> StudyLayout:
        """This study's layout with its root's `key:secret@` left out: the copy that may leave
        the driver (a shard shipped to the workers; sweeper.store.storage)."""
        return StudyLayout(storage.strip_credentials(self.root))

    @property
    def spec(self) -> str:
        return self.path("spec.yaml")

    @property
    def specs(self) -> str:
        """Every spec the study ran, kept (sweeper.store.spec_history); `spec` is the latest's copy."""
        return self.path("specs")

    def spec_copy(self, entry: str) -> str:
        """One kept spec (`entry`: `<n>-<hash>`), credentials left out as in `spec`."""
        return self.path("specs", f"{entry}.yaml")

    def spec_plan(self, entry: str) -> str:
        """What the kept spec `entry` planned when it ran."""
        return self.path("specs", f"{entry}.plan.json")

    @property
    def plan(self) -> str:
        return self.path("plan.json")

    @property
    def resolved(self) -> str:
        return self.path("resolved.json")

    @property
    def environments(self) -> str:
        """What each `sweeper run` of the study ran on (sweeper.store.environments)."""
        return self.path("environments.json")

    @property
    def live(self) -> str:
        return self.path("live.json")

    @property
    def trial_interruptions(self) -> str:
        """Fine-tuning trials run again after a preemption or a lost node, one entry each
        (sweeper.run.recording)."""
        return self.path("trial_interruptions.json")

    @property
    def lease(self) -> str:
        """Held by the one `sweeper run` writing the study (sweeper.run.lease)."""
        return self.path("lease.json")

    @property
    def ray_debug_log(self) -> str:
        """Ray's and Tune's log lines that `sweeper run` keeps off the console (sweeper.run.console)."""
        return self.path("logs", "ray-debug.log")

    @property
    def report(self) -> str:
        return self.path("report.md")

    @property
    def figures(self) -> str:
        return self.path("figures")

    @property
    def results(self) -> str:
        return self.path("results")

    def table(self, name: str) -> str:
        return self.path("results", name)

    @property
    def quarantine(self) -> str:
        """Damaged store files set aside: `<table>/<partition>/<part>` and its `.why.txt` note."""
        return self.path("quarantine")

    @property
    def tune(self) -> str:
        return self.path("tune")

    @property
    def optuna_journal(self) -> str:
        """Optuna's journal of the study's TPE searches, one Optuna study per (checkpoint, task)
        cell (sweeper.run.search). The results store stays the record; the journal is reconciled
        with it when a search resumes."""
        return self.path("optuna", "journal.log")

    def corpus(self, key: str | None) -> str:
        """A prepared corpus, keyed by what shapes its token stream (sweeper.run.corpora.corpus_dir)."""
        return self.path("cache", "corpus" if key is None else f"corpus-{key}")

    def external_checkpoint(self, name: str, key: str) -> str:
        """A checkpoint from elsewhere as the study imported it (sweeper.run.checkpoint_import): its weights
        and tokenizer, under the name and key that say which they are."""
        return self.path("cache", "checkpoints", f"{name}-{key}")

    def task_cache(self, folder_name: str) -> str:
        """A task's prepared data, named by what shapes it (sweeper.run.task_prep.task_folder_name)."""
        return self.path("cache", "tasks", folder_name)

    @property
    def pretraining(self) -> str:
        return self.path("pretraining")

    def run(self, run_name: str) -> RunLayout:
        return RunLayout(self.path("pretraining", run_name))

    def checkpoint(self, run_name: str, step: int) -> str:
        return self.run(run_name).checkpoint(step)

    def superseded_run(self, run_name: str, old_key: str, at: int) -> str:
        """Where a run whose configuration changed is moved (kept, never deleted)."""
        return self.path("pretraining", f"{run_name}.superseded-{old_key}-{at}")
