"""Tokenise every fine-tuning task once, before the grid: one Ray task per (tokenizer, task).

Every trial reads the prepared folder (`<study>/cache/tasks/<task>-<tokenizer>-len<L>-...`);
none tokenises. The folder name says everything that shapes its content: the tokenizer, the
max length, the example caps and the encoding settings the task's family declares
(`FamilyInfo.encoding_settings`, e.g. QA's doc_stride), so a change of any of them prepares a
new folder and never serves a stale one.
"""
from __future__ import annotations

import ray

from sweeper import registry, storage
from sweeper.catalog import get_task
from sweeper.configs import TaskInfo, stable_key
from sweeper.layout import CORPUS_MARKER, StudyLayout
from sweeper.spec import StudySpec


def prepare_task(task: TaskInfo, family: str, corpus_dir: str, max_length: int, out_dir: str, max_train, max_eval,
                 settings: dict) -> dict:
    """Ray task: tokenise one task with the tokenizer of the prepared corpus at `corpus_dir`."""
    from trainables.tasks.data import prepare_task_data

    tokenizer_dir = storage.local_copy(corpus_dir, CORPUS_MARKER, only="tokenizer")
    return prepare_task_data(task, family, str(tokenizer_dir), max_length, out_dir, max_train, max_eval, settings)


def encoding_settings(spec: StudySpec, task: str) -> dict:
    """The settings of the task's family that change its tokenised data."""
    family = registry.FAMILIES[get_task(task).family]
    return {key: getattr(spec.finetuning, key) for key in family.encoding_settings}


def task_folder_name(spec: StudySpec, task: str, tokenizer: str | None) -> str:
    ft = spec.finetuning
    return (f"{task}-{stable_key({'tokenizer': tokenizer}) if tokenizer else 'study'}-len{ft.max_length}-"
            f"{ft.max_train_examples or 'all'}-{ft.max_eval_examples or 'all'}"
            + "".join(f"-{key}{value}" for key, value in encoding_settings(spec, task).items()))


def prepare_tasks(spec: StudySpec, layout: StudyLayout, corpus_dirs: dict) -> dict[tuple, str]:
    """Tokenise each task once per tokenizer (the tokenizer of each prepared corpus in
    `corpus_dirs`) and max length, in parallel Ray tasks; return (tokenizer key, task) ->
    prepared folder."""
    ft = spec.finetuning
    dirs = {(tokenizer, task): layout.task_cache(task_folder_name(spec, task, tokenizer))
            for tokenizer in corpus_dirs for task in ft.tasks}
    remote = ray.remote(prepare_task).options(num_cpus=1)
    metas = ray.get([
        remote.remote(get_task(task), registry.FAMILIES[get_task(task).family].implementation, corpus_dirs[tokenizer],
                      ft.max_length, out, ft.max_train_examples, ft.max_eval_examples, encoding_settings(spec, task))
        for (tokenizer, task), out in dirs.items()
    ])
    for meta in metas:
        print(f"[finetune] task {meta['task']}: {meta['sizes']} examples, {meta['summary']}", flush=True)
    return dirs
