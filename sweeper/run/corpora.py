"""The corpus stage on the driver: which prepared corpora a study needs, where each lives, the
check of its source before anything starts, and the Ray tasks that prepare them.

A corpus folder is keyed by everything that shapes its token stream (source, by name and by
content, text column, tokenizer, and for a tokenizer trained here its vocabulary, sample size and
training code version, the effective token limit, max_documents): a spec or a source that
changes any of them prepares a new corpus, and a study's corpus is reused only by runs that read
the same stream.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

from sweeper.plan.input_paths import corpus_problem
from sweeper.plan.study_plan import StudyPlan
from sweeper.plan.checkpoint_sources import SourceProblem, resolve_hub_revision
from sweeper.contract.text_sources import source_identity
from sweeper.contract.configs import CorpusConfig, stable_key
from sweeper.contract.heavy_imports import imports_frozen
from sweeper.spec.reading import SpecError
from sweeper.spec.study import StudySpec
from sweeper.store import storage
from sweeper.store.cache_keys import TOKENIZER_FOLDER, tokenizer_digest
from sweeper.store.layout import CORPUS_MARKER, StudyLayout

ORDER_BLOCK_WINDOWS = 1 << 16
"""Windows the sample order permutes together (trainables.corpus.ORDER_BLOCK_WINDOWS): a token
limit is rounded up to whole blocks, so a corpus grown for a longer run keeps the sample order
of the shorter one's."""
TRAINED_TOKENIZER = "train-wordpiece"
TOKENIZER_TRAINING = 1
"""Version of trainables.tokenizer's WordPiece training (its settings and the renumbering of its
vocabulary): raise it when the training changes, so corpora prepared before train a new tokenizer."""
TOKENIZER_DONE = "tokenizer_config.json"
"""Written last into a corpus's `tokenizer/` (trainables.corpus_prep.TOKENIZER_DONE)."""
TOKENIZER_KEY_FILE = "tokenizer_key.json"
"""In a corpus folder: the key of its tokenizer's inputs (`share_tokenizer`)."""
LEGACY_STARTED = ((CORPUS_MARKER,), (TOKENIZER_FOLDER, TOKENIZER_DONE))
"""A corpus folder holding either was begun: its tokenizer is published (trainables.corpus_prep)."""
NEED_MARGIN = 0.05
"""Tokens read beyond what the longest run needs (before rounding up to whole blocks)."""


def needed_tokens(spec: StudySpec, plan: StudyPlan) -> int:
    """Tokens the longest run reads, continued pretraining included (it reads on in the same order)."""
    return max(((run.steps_before + run.total_steps) * run.tokens_per_step for run in plan.runs), default=0)


def effective_max_tokens(spec: StudySpec, plan: StudyPlan) -> int:
    """`data.max_tokens`, else the need plus NEED_MARGIN, rounded up to whole order blocks."""
    wanted = spec.data.max_tokens or math.ceil(needed_tokens(spec, plan) * (1 + NEED_MARGIN))
    block = ORDER_BLOCK_WINDOWS * max((run.seq_len for run in plan.runs), default=1)
    return max(1, math.ceil(wanted / block)) * block


def corpus_config(spec: StudySpec, plan: StudyPlan, tokenizer: str | None) -> CorpusConfig:
    """The study's corpus (`tokenizer` None), or the same text for a CPT source's tokenizer."""
    data = spec.data
    return CorpusConfig(source=data.corpus, text_column=data.text_column, tokenizer=tokenizer or data.tokenizer,
                        vocab_size=data.vocab_size, max_documents=data.max_documents,
                        max_tokens=effective_max_tokens(spec, plan),
                        tokenizer_sample_documents=data.tokenizer_sample_documents, mask_token=data.mask_token)


def corpus_dir(layout: StudyLayout, config: CorpusConfig) -> str:
    """`cache/corpus-<key>`: the key covers every input of the corpus preparation and of its
    tokenizer, and no more (a hub tokenizer's corpus does not change with data.vocab_size;
    data.sample_lengths is no input: samples are cut from the stream as it is read).

    A corpus a study began under the narrower key of earlier versions (`legacy_corpus_key`) is
    kept: preparing it again would train another tokenizer (WordPiece training is not the same
    from one process to the next), and the study's checkpoints carry the one they trained with."""
    legacy = layout.corpus(legacy_corpus_key(config))
    reserved = config.mask_token != "added" and config.tokenizer != TRAINED_TOKENIZER  # not in the legacy key
    if not reserved and any(storage.exists(storage.join(legacy, *done)) for done in LEGACY_STARTED):
        return legacy
    return layout.corpus(stable_key(corpus_identity(config)))


def legacy_corpus_key(config: CorpusConfig) -> str:
    """The key of corpora prepared before it covered the source's content and the tokenizer's
    inputs (the source by name, the limits, a trained tokenizer's vocabulary and sample size)."""
    shape = {"source": config.source, "text_column": config.text_column, "tokenizer": config.tokenizer,
             "max_tokens": config.max_tokens, "max_documents": config.max_documents}
    if config.tokenizer == TRAINED_TOKENIZER:
        shape |= {"vocab_size": config.vocab_size, "tokenizer_sample_documents": config.tokenizer_sample_documents}
    return stable_key(shape)


def corpus_identity(config: CorpusConfig) -> dict:
    """What shapes a prepared corpus: its source (by name and by content: `source_identity`), the
    text column, the limits, and its tokenizer (`tokenizer_identity`)."""
    shape = {"source": storage.strip_credentials(config.source), "text_column": config.text_column,
             "tokenizer": config.tokenizer, "max_tokens": config.max_tokens, "max_documents": config.max_documents,
             "source_content": source_identity(config.source),
             "tokenizer_content": tokenizer_identity(config.tokenizer)}
    if config.tokenizer == TRAINED_TOKENIZER:
        shape |= {"vocab_size": config.vocab_size, "tokenizer_sample_documents": config.tokenizer_sample_documents}
    if config.mask_token != "added" and config.tokenizer != TRAINED_TOKENIZER:  # a hub tokenizer's mask
        shape["mask_token"] = config.mask_token  # keyed away from its default: earlier corpora keep their keys
    return shape


def tokenizer_identity(tokenizer: str) -> dict:
    """What makes the corpus's tokenizer besides the corpus: for one trained here, the version of
    its training code; for a local folder, its files' content; for a hub tokenizer, the commit its
    main branch names now (None where the hub cannot be reached from here)."""
    if tokenizer == TRAINED_TOKENIZER:
        return {"training": TOKENIZER_TRAINING}
    if Path(tokenizer).expanduser().is_dir():
        return {"sha256": tokenizer_digest(str(Path(tokenizer).expanduser()))}
    try:
        return {"hub_revision": resolve_hub_revision("tokenizer", tokenizer, None)}
    except SourceProblem:
        return {"hub_revision": None}


def tokenizer_key(config: CorpusConfig) -> str:
    """What makes the corpus's tokenizer: its corpus's identity less the token limit (the
    tokenizer learns from the first documents, whatever the length of the stream)."""
    return stable_key({key: value for key, value in corpus_identity(config).items() if key != "max_tokens"})


def share_tokenizer(layout: StudyLayout, config: CorpusConfig, folder: str) -> None:
    """Give the corpus at `folder`, before it is prepared, the tokenizer of the study's corpus
    made from the same tokenizer inputs (another token limit: a longer run was added), so the
    runs of a study share one tokenizer: WordPiece training is not the same from one process to
    the next. Each corpus records its tokenizer key (`TOKENIZER_KEY_FILE`) for those after it."""
    key, done = tokenizer_key(config), storage.join(folder, TOKENIZER_FOLDER, TOKENIZER_DONE)
    if not storage.exists(done):
        for recorded in storage.find_files(layout.path("cache"), f"corpus-*/{TOKENIZER_KEY_FILE}"):
            source = storage.join(storage.parent(recorded), TOKENIZER_FOLDER)
            if storage.read_json(recorded, default={}).get("key") != key or not storage.exists(
                    storage.join(source, TOKENIZER_DONE)):
                continue
            names = sorted(storage.file_sizes(source), key=lambda name: name == TOKENIZER_DONE)  # its marker last
            for name in names:
                storage.write_bytes(storage.join(folder, TOKENIZER_FOLDER, name),
                                    storage.read_bytes(storage.join(source, name)))
            break
    storage.write_json(storage.join(folder, TOKENIZER_KEY_FILE), {"key": key})


def check_corpus_source(spec: StudySpec, spec_path: Path) -> None:
    """A corpus that cannot be read (missing, unknown file type, no such text column) is a spec
    error (`file:line: data.corpus: reason`, exit 2), found before the study starts anything. A local
    corpus was checked when the spec was loaded (sweeper.plan.input_paths); this reads a hub or
    object-store corpus too, which needs the network a driver has."""
    problem = corpus_problem(spec)
    if problem is None:
        return
    key, reason = problem
    raise SpecError(str(spec_path), key, reason, line=line_of(spec_path, key.removeprefix("data.")))


def line_of(spec_path: Path, key: str) -> int | None:
    """The line of the first `key:` in the spec file (for the error's `file:line`)."""
    try:
        for number, line in enumerate(Path(spec_path).read_text().splitlines(), start=1):
            if re.search(rf"(^|[\s{{,]){key}\s*:", line):
                return number
    except OSError:
        pass
    return None


def prepare_corpus_task(config: CorpusConfig, out_dir: str) -> dict:
    with imports_frozen():
        from trainables.corpus_prep import prepare_corpus
    return prepare_corpus(config, out_dir)


def prepare_corpora(spec: StudySpec, plan: StudyPlan, layout: StudyLayout) -> dict[str | None, str]:
    """One prepared corpus per tokenizer the runs need (once ever), each prepared by a Ray task
    that runs its Ray Data job. The task takes no CPU: the job's tokenising actors take them all."""
    import ray

    tokenizers = sorted({run.tokenizer for run in plan.runs}, key=lambda t: (t is not None, t or ""))
    remote = ray.remote(prepare_corpus_task).options(num_cpus=0)
    folders, futures = {}, {}
    for tokenizer in tokenizers:
        config = corpus_config(spec, plan, tokenizer)
        folders[tokenizer] = corpus_dir(layout, config)
        share_tokenizer(layout, config, folders[tokenizer])
        futures[tokenizer] = remote.remote(config, folders[tokenizer])
    for tokenizer, future in futures.items():
        meta = ray.get(future)
        print(f"[corpus] {meta['documents']:,} documents, {meta['tokens']:,} tokens in {meta.get('shards', 1)} "
              f"shard(s), vocabulary {meta['vocab_size']:,} ({tokenizer or spec.data.tokenizer})", flush=True)
        if tokenizer is None and meta["vocab_size"] > spec.data.vocab_size:
            raise RuntimeError(f"the tokenizer has {meta['vocab_size']} tokens but data.vocab_size is "
                               f"{spec.data.vocab_size}: raise data.vocab_size")
    return folders
