"""Tokenise every fine-tuning task once, before the grid: one Ray task per (tokenizer, task).

Every trial reads the prepared folder (`<study>/cache/tasks/<task>-<tokenizer>-len<L>-...`);
none tokenises. The folder name says everything that shapes its content: the tokenizer, the
max length, the example caps and the encoding settings the task's family declares
(`FamilyInfo.encoding_settings`, e.g. QA's doc_stride), so a change of any of them prepares a
new folder and never serves a stale one. A study sweeping max_length (or QA's doc_stride)
prepares one folder per value its trials use: `data_variant` of the trial's protocol says which.
"""
from __future__ import annotations

import ray

from sweeper.plan.study_plan import task_points
from sweeper.spec import registry
from sweeper.spec.registry import get_task
from sweeper.spec.configs import FinetuneProtocol, TaskInfo, stable_key
from sweeper.spec.study import StudySpec
from sweeper.store import folders
from sweeper.store.layout import CORPUS_MARKER, StudyLayout


def prepare_task(task: TaskInfo, family: str, tokenizer_folder: tuple[str, str], max_length: int, out_dir: str,
                 max_train, max_eval, settings: dict) -> dict:
    """Ray task: tokenise one task with the tokenizer in the `tokenizer/` sub-folder of the
    complete folder `tokenizer_folder` = (location, its marker): a prepared corpus, or an
    imported checkpoint (sweeper.run.external)."""
    from trainables.tasks.data import prepare_task_data

    location, marker = tokenizer_folder
    tokenizer_dir = folders.local_copy(location, marker, only="tokenizer")
    return prepare_task_data(task, family, str(tokenizer_dir), max_length, out_dir, max_train, max_eval, settings)


def encoding_settings(protocol: FinetuneProtocol, task: str) -> dict:
    """The settings of the task's family that change its tokenised data, as the protocol has them."""
    family = registry.family_of(get_task(task).family)
    return {key: protocol.family_settings[key] for key in family.encoding_settings}


def data_variant(task: str, protocol: FinetuneProtocol, encoding_keys: tuple[str, ...] | None = None) -> tuple:
    """What, besides the tokenizer and the example caps, shapes the task's prepared data under this
    protocol: the max length and the family's encoding settings (`encoding_keys`, resolved on the
    driver, where a plugin's tasks are registered; looked up when not given)."""
    if encoding_keys is None:
        return (protocol.max_length, *encoding_settings(protocol, task).values())
    return (protocol.max_length, *(protocol.family_settings[key] for key in encoding_keys))


def task_folder_name(task: str, tokenizer: str | None, protocol: FinetuneProtocol) -> str:
    return (f"{task}-{stable_key({'tokenizer': tokenizer}) if tokenizer else 'study'}-len{protocol.max_length}-"
            f"{protocol.max_train_examples or 'all'}-{protocol.max_eval_examples or 'all'}"
            + "".join(f"-{key}{value}" for key, value in encoding_settings(protocol, task).items()))


def task_data_dir(task_dirs: dict, tokenizer: str | None, task: str, protocol: FinetuneProtocol,
                  encoding_keys: tuple[str, ...] | None = None) -> str:
    """The prepared folder a trial of `task` with `protocol` reads: `(tokenizer, task, variant)`
    where `prepare_tasks` gave one, else `(tokenizer, task)` (a map built by hand, one variant)."""
    return (task_dirs.get((tokenizer, task, data_variant(task, protocol, encoding_keys)))
            or task_dirs[(tokenizer, task)])


def corpus_tokenizers(corpus_dirs: dict) -> dict:
    """Tokenizer key -> (prepared corpus, its marker): the tokenizers `prepare_tasks` reads from corpora."""
    return {key: (folder, CORPUS_MARKER) for key, folder in corpus_dirs.items()}


def prepare_tasks(spec: StudySpec, layout: StudyLayout, tokenizer_folders: dict) -> dict[tuple, str]:
    """Tokenise each task once per tokenizer (tokenizer key -> (folder, marker) of the complete
    folder whose `tokenizer/` it is, `tokenizer_folders`) and data variant (max length, encoding settings: one unless swept), in parallel
    Ray tasks; return (tokenizer key, task, variant) -> prepared folder, and (tokenizer key, task) ->
    the folder of the task's first variant."""
    ft = spec.finetuning
    variants = {task: {data_variant(task, protocol): protocol for _, protocol in task_points(spec, task)}
                for task in ft.tasks}
    dirs = {(tokenizer, task, variant): layout.task_cache(task_folder_name(task, tokenizer, protocol))
            for tokenizer in tokenizer_folders for task in ft.tasks for variant, protocol in variants[task].items()}
    remote = ray.remote(prepare_task).options(num_cpus=1)
    metas = ray.get([
        remote.remote(get_task(task), registry.family_of(get_task(task).family).implementation, tokenizer_folders[tokenizer],
                      protocol.max_length, out, protocol.max_train_examples, protocol.max_eval_examples,
                      encoding_settings(protocol, task))
        for (tokenizer, task, variant), out in dirs.items() for protocol in [variants[task][variant]]
    ])
    for meta in metas:
        print(f"[finetune] task {meta['task']}: {meta['sizes']} examples, {meta['summary']}", flush=True)
    first = {(tokenizer, task): dirs[(tokenizer, task, next(iter(variants[task])))]
             for tokenizer in tokenizer_folders for task in ft.tasks}
    return {**dirs, **first}
