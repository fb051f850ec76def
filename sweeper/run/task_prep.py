"""Tokenise every fine-tuning task once, before the grid: one Ray task per (tokenizer, task).

Every trial reads the prepared folder (`<study>/cache/tasks/<task>-len<L>-<key>`); none
tokenises. The key covers everything that shapes the folder's content (`task_data_identity`):
the tokenizer's content hash (its files as the corpus or imported checkpoint holds them, so
a tokenizer retrained with another vocabulary or from other documents prepares new data even
under the same tokenizer key), the task's definition and source data (the shipped or local files'
content, or a hub data set's commit), the family's implementation, the data format version, the
max length, the example caps, the encoding settings the task's family declares
(`FamilyInfo.encoding_settings`, e.g. QA's doc_stride) and `finetuning.scoring` where it is not
`standard` (the authors' inputs and labels). A change of any of them prepares a new
folder and never serves a stale one; the trial checks, besides, that its checkpoint carries the
tokenizer the data was encoded with (trainables.finetune_loop). A study sweeping max_length (or
QA's doc_stride) prepares one folder per value its trials use: `data_variant` of the trial's
protocol says which.
"""
from __future__ import annotations

from pathlib import Path

import ray

from sweeper.plan.study_plan import task_points
from sweeper.run.checkpoint_import import one_line
from sweeper.contract.text_sources import SHIPPED_FILES, builtin_path, hub_dataset_revision
from sweeper.contract import registry
from sweeper.contract.heavy_imports import imports_frozen
from sweeper.contract.registry import get_task
from sweeper.contract.configs import FinetuneProtocol, TaskInfo, stable_key
from sweeper.spec.study import StudySpec
from sweeper.store import folders, storage
from sweeper.store.cache_keys import TOKENIZER_FOLDER, content_digest, tokenizer_digest
from sweeper.store.layout import CORPUS_MARKER, StudyLayout

TASK_DATA_FORMAT = 1
"""Version of the task preparation (trainables.tasks: splits, sampling, the files written):
raise it when the preparation changes, so folders prepared before are prepared again."""


def prepare_task(task: TaskInfo, family: str, tokenizer_folder: tuple[str, str], max_length: int, out_dir: str,
                 max_train, max_eval, settings: dict, keyed: dict | None = None) -> dict:
    """Ray task: tokenise one task with the tokenizer in the `tokenizer/` sub-folder of the
    complete folder `tokenizer_folder` = (location, its marker): a prepared corpus, or an
    imported checkpoint (sweeper.run.checkpoint_import). `keyed`: the tokenizer's content hash and the
    source the folder's key was made from (`task_data_identity`), checked against the tokenizer
    read here and recorded in the folder's meta."""
    with imports_frozen():
        from trainables.tasks.data import prepare_task_data

    location, marker = tokenizer_folder
    tokenizer_dir = folders.local_copy(location, marker, only=TOKENIZER_FOLDER)
    keyed = keyed or {}
    if keyed.get("tokenizer") not in (None, tokenizer_digest(str(tokenizer_dir))):
        raise RuntimeError(f"the tokenizer in {storage.display(location)} changed after the task data of {task.name} "
                           "was named (another corpus was prepared at the same place?): run the study again")
    return prepare_task_data(task, family, str(tokenizer_dir), max_length, out_dir, max_train, max_eval, settings,
                             revision=(keyed.get("source") or {}).get("revision"),
                             record={"tokenizer_digest": keyed["tokenizer"]} if "tokenizer" in keyed else None)


def task_source_identity(task: TaskInfo) -> dict:
    """What the task's rows are, as its prepared folder's key hashes them: the SHA-256 of the
    shipped file or of the local file(s) it reads, or its hub data set's id and the commit the
    hub names now (pinned for the preparation: `revision`; None offline, where the id alone keys it)."""
    source = task.source
    if source in SHIPPED_FILES:
        return {"sha256": content_digest(str(builtin_path(source)))}
    path = Path(source)
    if path.is_file():
        return {"sha256": content_digest(str(path))}
    if path.is_dir():  # a split per file at the top (sweeper.contract.text_sources.iter_rows)
        return {"files": {f.name: content_digest(str(f)) for f in sorted(path.iterdir()) if f.is_file()}}
    repo = source.partition(":")[0]
    return {"hub": source, "revision": hub_dataset_revision(repo)}


def encoding_settings(protocol: FinetuneProtocol, task: str) -> dict:
    """The settings of the task's family that change its tokenised data, as the protocol has them,
    and `scoring` (`finetuning.scoring`: the authors' inputs and labels differ from the standard
    ones), which every family receives."""
    family = registry.family_of(get_task(task).family)
    return {**{key: protocol.family_settings[key] for key in family.encoding_settings}, "scoring": protocol.scoring}


def keyed_settings(settings: dict) -> dict:
    """The encoding settings as a folder's key hashes them: `scoring` only away from `standard`,
    so the folders prepared before the setting existed keep their names (and arrays)."""
    return {key: value for key, value in settings.items() if key != "scoring" or value != "standard"}


def data_variant(task: str, protocol: FinetuneProtocol, encoding_keys: tuple[str, ...] | None = None) -> tuple:
    """What, besides the tokenizer and the example caps, shapes the task's prepared data under this
    protocol: the max length and the family's encoding settings (`encoding_keys`, resolved on the
    driver, where a plugin's tasks are registered; looked up when not given)."""
    if encoding_keys is None:  # `scoring` is left out: a study has one, never swept
        encoding_keys = registry.family_of(get_task(task).family).encoding_settings
    return (protocol.max_length, *(protocol.family_settings[key] for key in encoding_keys))


def task_data_identity(task: str, tokenizer: str, protocol: FinetuneProtocol) -> dict:
    """Everything that shapes a task's prepared data, `tokenizer` being the tokenizer's content
    hash (sweeper.store.cache_keys.tokenizer_digest): the folder name's key hashes it."""
    info = get_task(task)
    return {"format": TASK_DATA_FORMAT, "task": info.identity(), "source": task_source_identity(info),
            "family": registry.family_of(info.family).implementation, "tokenizer": tokenizer,
            "max_length": protocol.max_length, "max_train": protocol.max_train_examples,
            "max_eval": protocol.max_eval_examples, "settings": keyed_settings(encoding_settings(protocol, task))}


def task_folder_name(task: str, tokenizer: str, protocol: FinetuneProtocol) -> str:
    """`<task>-len<L>-<key>`: the key hashes `task_data_identity`."""
    return f"{task}-len{protocol.max_length}-{stable_key(task_data_identity(task, tokenizer, protocol))}"


def task_data_dir(task_dirs: dict, tokenizer: str | None, task: str, protocol: FinetuneProtocol,
                  encoding_keys: tuple[str, ...] | None = None) -> str:
    """The prepared folder a trial of `task` with `protocol` reads: `(tokenizer, task, variant)`
    where `prepare_tasks` gave one, else `(tokenizer, task)` (a map built by hand, one variant)."""
    return (task_dirs.get((tokenizer, task, data_variant(task, protocol, encoding_keys)))
            or task_dirs[(tokenizer, task)])


def corpus_tokenizers(corpus_dirs: dict) -> dict:
    """Tokenizer key -> (prepared corpus, its marker): the tokenizers `prepare_tasks` reads from corpora."""
    return {key: (folder, CORPUS_MARKER) for key, folder in corpus_dirs.items()}


def prepare_tasks(spec: StudySpec, layout: StudyLayout, tokenizer_folders: dict,
                  failed: dict[tuple, str] | None = None) -> dict[tuple, str]:
    """Tokenise each task once per tokenizer (tokenizer key -> (folder, marker) of the complete
    folder whose `tokenizer/` it is, `tokenizer_folders`) and data variant (max length, encoding
    settings: one unless swept), in parallel Ray tasks; return (tokenizer key, task, variant) ->
    prepared folder, and (tokenizer key, task) -> the folder of the task's first variant. The
    folders are named by the tokenizers' content, read here: the folders exist before the tasks
    are prepared (a corpus is prepared, a checkpoint imported, before the fine-tuning starts).

    With `failed` given, a preparation that fails (a tokenizer that does not load, say) leaves
    its folders out and puts (tokenizer key, task) -> one line of reason there, instead of
    raising: the trials that would read it are recorded as failed by the caller."""
    ft = spec.finetuning
    variants = {task: {data_variant(task, protocol): protocol for _, protocol in task_points(spec, task)}
                for task in ft.tasks}
    digests = {tokenizer: tokenizer_digest(storage.join(location, TOKENIZER_FOLDER))
               for tokenizer, (location, _) in tokenizer_folders.items()}
    dirs = {(tokenizer, task, variant): layout.task_cache(task_folder_name(task, digests[tokenizer], protocol))
            for tokenizer in tokenizer_folders for task in ft.tasks for variant, protocol in variants[task].items()}
    for task in ft.tasks:
        source = task_source_identity(get_task(task))
        if "hub" in source and source["revision"] is None:
            print(f"[finetune] task {task}: the hub cannot be reached from here to pin {source['hub']} to a commit; "
                  "its prepared data is keyed by the data set's name alone", flush=True)
    remote = ray.remote(prepare_task).options(num_cpus=1)
    # One Ray task per folder: tokenizers of equal content (a checkpoint's and the corpus's) share it.
    jobs = {out: (tokenizer, task, variants[task][variant]) for (tokenizer, task, variant), out in dirs.items()}
    refs = {out: remote.remote(get_task(task), registry.family_of(get_task(task).family).implementation,
                               tokenizer_folders[tokenizer], protocol.max_length, out, protocol.max_train_examples,
                               protocol.max_eval_examples, encoding_settings(protocol, task),
                               {"tokenizer": digests[tokenizer], "source": task_source_identity(get_task(task))})
            for out, (tokenizer, task, protocol) in jobs.items()}
    for out, ref in refs.items():
        try:
            meta = ray.get(ref)
        except ray.exceptions.RayError as error:
            if failed is None:
                raise
            tokenizer, task, _ = jobs[out]
            failed[(tokenizer, task)] = reason = one_line(getattr(error, "cause", None) or error)
            print(f"[finetune] task {task}: not prepared with tokenizer {tokenizer}: {reason}", flush=True)
            continue
        print(f"[finetune] task {meta['task']}: {meta['sizes']} examples, {meta['summary']}", flush=True)
    if failed:
        dirs = {point: out for point, out in dirs.items() if point[:2] not in failed}
    first = {(tokenizer, task): dirs[(tokenizer, task, next(iter(variants[task])))]
             for tokenizer in tokenizer_folders for task in ft.tasks if (tokenizer, task) not in (failed or {})}
    return {**dirs, **first}

