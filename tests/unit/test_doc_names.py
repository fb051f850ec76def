"""Docs that cannot drift: every path, module and code name that README.md and docs/*.md cite in
backticks exists in the code base (a renamed module, file or function fails here, naming the page
and the citation).

What counts as a citation, in inline code (fenced blocks are checked by running them:
test_doc_examples.py):
- a path under one of the repository's folders (`sweeper/run/train_grid.py`, `docs/spec.md`), or a
  bare Python file name (`train_grid.py`): the file or folder exists (a bare name somewhere);
- a dotted module (`sweeper.plan.load`, `sweeper.plan.load.load_study`): the module's file
  exists and the rest are names it or its class defines;
- a code name (`load_study`, `StudyLayout`, `FinetuneProtocol.KEYED_IF_SET`): snake_case with an
  underscore or CamelCase: each part is a word of the project's source (its code, specs and
  configs, where spec keys and Parquet columns are spelled too), or a third-party name below.
Placeholders (`<run>`, `*`, `...`) and things with spaces are prose, not citations.
"""
from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
from conftest import ROOT

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FOLDERS = ("sweeper", "trainables", "tests", "docs", "scripts", "benchmarks", "cluster", "search_spaces")
SOURCES = ("sweeper", "trainables", "tests", "scripts", "benchmarks", "cluster", "search_spaces")
SOURCE_FILES = ("pyproject.toml", "constraints.txt", "Dockerfile", ".gitignore")
EXTERNAL = {
    # The authors' evaluation code (EncodEval), cited in docs/paper-protocol.md.
    "abstract_eval.py", "conll2003_en", "mnli_m", "msmarco_pairs",
    # Ray's internals, cited where a benchmark measured them; Kubernetes' and tokenizers' settings.
    "JobHead", "TuneController", "_actor_started", "serviceAccountName", "RAYON_NUM_THREADS",
    # Notation: the number of queries (docs/retrieval.md).
    "n_q",
    # Names of the libraries sweeper builds on, cited as theirs.
    "AutoModel", "AutoModelForMaskedLM", "AutoTokenizer", "LlamaModel", "DataCollatorWithPadding",
    "CachedMultipleNegativesRankingLoss", "FailureConfig", "train_test_split", "fully_shard",
    "get_cpu_capability", "worker_process_setup_hook", "from_pretrained", "trust_remote_code",
    "read_parquet", "scan_parquet", "hive_partitioning", "auto_map", "endpoint_override",
    "AwsStandardS3RetryStrategy",  # pyarrow's, measured against sweeper's in docs/benchmarks.md
}
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
SPAN = re.compile(r"`([^`\n]+)`")
CODE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(\(\))?$")


@cache
def source_words() -> frozenset:
    words: set[str] = set()
    paths = [p for folder in SOURCES for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in
             (".py", ".yaml", ".yml", ".json", ".sh", ".toml", ".txt", ".cfg")]
    for path in [*paths, *(ROOT / name for name in SOURCE_FILES)]:
        if path.resolve() == Path(__file__).resolve():
            continue  # this file names the stale names it tests
        words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", path.read_text(errors="replace")))
    return frozenset(words)


@cache
def python_files() -> frozenset:
    return frozenset(p.name for folder in SOURCES for p in (ROOT / folder).rglob("*.py"))


def module_problem(span: str) -> str | None:
    """A dotted module and the names after it: each defined (def, class, assignment, import) in
    the longest module the span starts with, or a submodule of a package."""
    parts = span.removesuffix("()").split(".")
    for end in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:end])
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                text = path.read_text()
                names = set(re.findall(r"^\s*(?:def|class)\s+(\w+)|^\s*(\w+)\s*[:=]", text, re.M))
                names = {name for pair in names for name in pair if name}
                names |= {n for line in re.findall(r"^\s*from\s+\S+\s+import\s+(.+)$", text, re.M)
                          for n in re.findall(r"\w+", line)}
                missing = [p for p in parts[end:] if p not in names]
                return f"{'.'.join(parts[:end])} defines no {'.'.join(missing)}" if missing else None
    return f"no module {'.'.join(parts[:2])}"


def path_problem(document, span: str) -> str | None:
    """A path, with a name in it after `:` or `::` (`trainables/objectives.py:ObjectiveLoss`), or
    after a module's dot (`tests/support/local_s3.free_ports`)."""
    path, _, name = span.split("#")[0].partition(":")
    name = name.lstrip(":")
    if not (ROOT / path).exists() and not (document.parent / path).exists():
        module, _, attribute = path.rpartition(".")
        if not (attribute and (ROOT / f"{module}.py").is_file()):
            return f"{path} does not exist"
        name = attribute
    return f"{path} names no {name}" if name and name not in source_words() else None


def problem(document, span: str) -> str | None:
    span = span.strip().rstrip(":,")
    if any(mark in span for mark in ("<", "*", "...", "{", " ", "=", "$")):
        return None
    if span.split("/")[0] in FOLDERS and "/" in span:
        return path_problem(document, span)
    if re.fullmatch(r"[\w-]+\.py", span):
        return None if span in python_files() or span in EXTERNAL else f"no file {span} in the code base"
    if span.startswith(("sweeper.", "trainables.")) and CODE_NAME.match(span):
        return module_problem(span)
    if CODE_NAME.match(span) and ("_" in span or re.search(r"[a-z][A-Z]", span)):
        parts = span.removesuffix("()").split(".")
        missing = [p for p in parts if p not in source_words() and p not in EXTERNAL]
        return f"{missing} named nowhere in the code" if missing else None
    return None


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: d.name)
def test_every_cited_path_module_and_name_exists(document):
    text = FENCE.sub("", document.read_text())
    problems = [f"`{span}`: {why}" for span in sorted(set(SPAN.findall(text))) if (why := problem(document, span))]
    assert not problems, f"{document.relative_to(ROOT)} cites what the code lacks: {problems}"


def test_a_stale_name_is_caught():
    """The two names issue #58 found stale (`load_spec`, run/`pretraining.py`) and a moved module fail."""
    readme = ROOT / "README.md"
    assert problem(readme, "load_spec") and problem(readme, "sweeper.run.pretraining")
    assert problem(readme, "sweeper/run/finetuning.py") and problem(readme, "sweeper.plan.load.load_spec")
    assert problem(readme, "sweeper.plan.load.load_study") is None and problem(readme, "train_grid.py") is None
