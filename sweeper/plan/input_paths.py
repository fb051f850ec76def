"""The spec's input paths, checked where the study is planned (`sweeper plan` and `run`, through
`load_study(..., machine=True)`), so an absent one is a spec error (`file:line: key: reason`,
exit 2) before anything is written:
- `data.corpus` (a study that pretrains): a local file or folder must exist and read (a known file
  type, its first row holding `data.text_column`: the driver's check at `run`, made earlier);
- `data.tokenizer` written as a path (`/...`, `./...`, `~/...`) must be a folder;
- each task's rows (`source`, `train_source` of a task a plugin registers) written as a path.
The checkpoints from elsewhere and `init_from: hf:<folder>` are read when the plan resolves them
(sweeper.plan.checkpoint_sources, sweeper.plan.hf_init). Hub ids and object-store URIs need a
network this check does not assume: `sweeper run` reads the corpus's on the driver
(sweeper.run.corpora.check_corpus_source), a task's when it is prepared.
"""
from __future__ import annotations

from pathlib import Path

from sweeper.contract.registry import get_task
from sweeper.contract.text_sources import SHIPPED_FILES, kind_of, looks_like_path, source_problem
from sweeper.spec.study import StudySpec
from sweeper.store import storage

PATH_PREFIXES = ("/", "./", "../", "~", "file://")
"""How a tokenizer or a task's source says it is a path (a bare name may be a hub id)."""


def is_local(source: str) -> bool:
    """Whether a corpus source is read from this machine's disk (the shipped corpus included)."""
    if source.startswith("hf://") or storage.is_remote(source):
        return False
    return source in SHIPPED_FILES or looks_like_path(source) or Path(source).expanduser().exists()


def written_as_path(source: str) -> bool:
    return source.startswith(PATH_PREFIXES) or kind_of(source) is not None


def corpus_problem(spec: StudySpec) -> tuple[str, str] | None:
    """(key, reason) when the corpus cannot be read (missing, unknown file type, no such text
    column), else None. Reads the first row of the first file only."""
    problem = source_problem(spec.data.corpus, spec.data.text_column)
    if problem is None:
        return None
    column = f"column {spec.data.text_column!r}" in problem or "one column" in problem
    return ("data.text_column" if column else "data.corpus"), problem


def local_path(source: str) -> Path:
    return Path(storage.normalize(source) if source.startswith("file://") else source).expanduser()


def input_path_problems(spec: StudySpec) -> list[tuple[str, str]]:
    """(key, reason) for each input path of the spec that cannot be read here (module docstring)."""
    problems = []
    if spec.pretraining.runs:  # an evaluation-only study reads no corpus and trains no tokenizer
        if is_local(spec.data.corpus) and (problem := corpus_problem(spec)):
            problems.append(problem)
        tokenizer = spec.data.tokenizer
        if written_as_path(tokenizer) and not local_path(tokenizer).is_dir():
            what = "is a file, not a folder" if local_path(tokenizer).exists() else "does not exist"
            problems.append(("data.tokenizer", (f"{tokenizer!r} {what} (a local tokenizer folder, "
                                                "or a Hugging Face tokenizer name)")))
    for i, task in enumerate(spec.finetuning.tasks):
        info = get_task(task)
        for field_name in ("source", "train_source"):
            source = getattr(info, field_name)
            if source and source not in SHIPPED_FILES and written_as_path(source) and not local_path(source).exists():
                problems.append((f"finetuning.tasks[{i}]", (f"task {task!r} reads its rows from {source!r} (its "
                                                            f"registered {field_name}), which does not exist")))
    return problems
