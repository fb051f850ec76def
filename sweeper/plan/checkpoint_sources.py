"""Checkpoints from elsewhere (`finetuning.checkpoints`): resolved to what the plan keys and sizes.

Resolving an entry reads its `config.json` and names its weights, never loads them:
- its **key** (what its trial keys hash in place of a run key) says which weights and tokenizer
  these are: for a local folder the SHA-256 of its weight files, config.json and tokenizer files
  (the same weights at another path are the same checkpoint; edited weights are another); for an
  object-store prefix the listing of those files (names and sizes: a full download to hash them
  on every `sweeper plan` would cost more than it protects) and the config's text; for a hub
  model the repository and the commit its revision resolves to, so `revision: main` pins the
  commit of the day it was planned and a newer commit on the hub is a change the study reports;
- its **sizes** (hidden size, layers, heads, vocabulary, a llama-equivalent intermediate size)
  for `sweeper plan`'s cost and memory, from config.json alone.
A source that cannot be read is a spec problem (exit 2, naming the entry and the source); a hub
source is resolved over the network unless its revision is already a full commit id. A source's
files are hostile input (docs/security.md, "Checkpoints from elsewhere"): each one the key hashes
or the import copies must lie in the source's own tree (sweeper.plan.source_tree), and what would
fail on the cluster (config sizes, architecture, shards, a `.bin`'s pickle, a tokenizer's own
code) is refused here (sweeper.plan.checkpoint_checks). Names equal up to NFC and case, and two
entries of one content key, are refused (`resolve_all`).
"""
from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from sweeper.plan.checkpoint_checks import (
    bin_problem,
    config_problem,
    model_type_problem,
    safetensors_problem,
    shard_problem,
    tokenizer_problem,
)
from sweeper.plan.source_tree import MAX_JSON_BYTES, OutsideSource, check_inside, inside, parse_json, read_json
from sweeper.spec.checkpoints import HUB_PREFIX, CheckpointMeta, ExternalCheckpointSpec
from sweeper.contract.configs import stable_key
from sweeper.store import storage
from sweeper.store.cache_keys import TOKENIZER_FILES, file_digest

CONFIG_FILE = "config.json"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".safetensors.index.json", ".bin.index.json")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
NON_GATED_MLP = {"bert", "roberta", "xlm-roberta", "electra", "distilbert", "camembert", "deberta", "deberta-v2",
                 "mpnet", "nomic_bert", "gpt2"}
"""model_types whose feed-forward layer is two matrices (up, down) instead of a gated three."""


PACKING_TESTED = ("bert", "modernbert", "eurobert", "llama", "qwen3")
"""model_types whose packed rows tests/unit/trainables/test_backbones.py checks against padded ones. Every
trial still probes its checkpoint before it packs (trainables.backbones): this list only lets
`sweeper plan` say what to expect."""


class SourceProblem(ValueError):
    """Why an entry's source cannot be used: `key` is the entry's field at fault."""

    def __init__(self, key: str, reason: str):
        self.key, self.reason = key, reason
        super().__init__(f"{key}: {reason}")


@dataclass(frozen=True, kw_only=True, slots=True)
class ExternalCheckpoint:
    """A `finetuning.checkpoints` entry as the plan uses it."""

    name: str
    source: str
    tokenizer_source: str
    """Where its tokenizer is (the source itself unless the entry names another)."""
    revision: str | None
    """Hub sources: the commit the entry's revision resolved to."""
    key: str
    """What its trial keys hash in place of a run key (module docstring)."""
    tokenizer_key: str
    """Which tokenizer encodes its task data: the prepared data of two checkpoints sharing one is shared."""
    model_type: str | None
    sizes: dict = field(default_factory=dict, compare=False)
    """LlamaEncoderConfig-named sizes for the cost and memory estimates; empty when unknown."""
    meta: CheckpointMeta = field(default_factory=CheckpointMeta)
    identity: dict = field(default_factory=dict, compare=False, repr=False)
    """What the key hashes (kept to explain a change)."""


def hub_repo(source: str) -> str:
    return source[len(HUB_PREFIX):]


def llama_equivalent_sizes(config: dict) -> dict:
    """The sizes the estimates read, from a Hugging Face config.json: a non-gated feed-forward of
    width I costs what a gated one of width 2I/3 does. Empty when a field is missing."""
    try:
        hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
        sizes = {"hidden_size": hidden, "num_hidden_layers": int(config["num_hidden_layers"]),
                 "num_attention_heads": heads, "num_key_value_heads": int(config.get("num_key_value_heads") or heads),
                 "vocab_size": int(config["vocab_size"]), "intermediate_size": int(config["intermediate_size"])}
    except (KeyError, TypeError, ValueError, OverflowError):
        return {}
    if config.get("model_type") in NON_GATED_MLP:
        sizes["intermediate_size"] = max(1, round(2 * sizes["intermediate_size"] / 3))
    return sizes


@lru_cache(maxsize=64)
def _folder_digest(folder: str, names: tuple[str, ...], stats: tuple) -> str:
    """SHA-256 over the named files' content (one process hashes a folder once per content:
    `stats`, each file's size and mtime, is in the cache key)."""
    # Each file hashed at its real path once checked to lie in the folder's tree (a link swapped in
    # since the listing is refused, OutsideSource); the import hashes its copy again.
    return stable_key({name: file_digest(inside(folder, name)) for name in names})


def content_fingerprint(location: str, names: list[str]) -> dict:
    """What identifies these files of a folder: their content hash (local) or listing (object store)."""
    if not names:
        return {}
    if storage.is_remote(location):
        sizes = storage.file_sizes(location)
        return {"files": {name: sizes[name] for name in names}}
    stats = tuple((name, stat.st_size, stat.st_mtime_ns)
                  for name in names for stat in [os.stat(os.path.join(location, name))])
    return {"sha256": _folder_digest(location, tuple(names), stats)}


def fingerprint(key: str, location: str, names: list[str]) -> dict:
    """`content_fingerprint` of an entry's folder; SourceProblem when a file left its tree meanwhile."""
    try:
        return content_fingerprint(location, names)
    except OutsideSource as problem:
        raise SourceProblem(key, str(problem)) from None


def tokenizer_names(files: dict[str, int]) -> list[str]:
    return sorted(name for name in files if name in TOKENIZER_FILES)


def weight_names(files: dict[str, int]) -> list[str]:
    return sorted(name for name in files if "/" not in name and name.endswith(WEIGHT_SUFFIXES))


def is_read_by_study(name: str) -> bool:
    """Whether a top-level file of that name is one a plan hashes or an import copies."""
    return name == CONFIG_FILE or name.endswith(WEIGHT_SUFFIXES) or name in TOKENIZER_FILES


def copied_names(files: dict[str, int], weights: list[str]) -> list[str]:
    """The files the import copies from a local folder: config.json (none in a tokenizer-only
    folder), the weights and the tokenizer files."""
    return sorted({*([CONFIG_FILE] if CONFIG_FILE in files else []), *weights, *tokenizer_names(files)})


def keyed_files(files: dict[str, int], own_tokenizer: bool) -> list[str]:
    """The files of a source folder its key hashes: config.json, the weights and (when the entry
    names no other tokenizer) its tokenizer files."""
    return sorted([CONFIG_FILE, *weight_names(files), *(tokenizer_names(files) if own_tokenizer else [])])


def listing(key: str, location: str) -> dict[str, int]:
    """Relative name -> size of the files of a local or object-store folder; SourceProblem when
    it cannot be listed or holds nothing, or (local) when a file named as the study would read it
    (config.json, weights, tokenizer files) is not a regular file inside the folder's tree."""
    where = storage.display(location)
    try:
        files = storage.file_sizes(location)
        if not storage.is_remote(location) and os.path.isdir(location):
            with os.scandir(location) as entries:
                check_inside(location, sorted(entry.name for entry in entries if is_read_by_study(entry.name)))
    except OutsideSource as problem:
        raise SourceProblem(key, str(problem)) from None
    except OSError as error:
        raise SourceProblem(key, f"cannot read {where}: {storage.redact(str(error).splitlines()[0])}") from None
    if not files:
        raise SourceProblem(key, f"{where} does not exist or holds no files")
    return files


def read_folder(key: str, location: str) -> tuple[dict, dict[str, int]]:
    """(config.json as a dict, relative name -> size of the files) of a local or object-store
    folder, config.json read as hostile input (sweeper.plan.source_tree: inside the folder's tree,
    bounded in size and depth) and its sizes and architecture checked (sweeper.plan.checkpoint_checks)."""
    files, where = listing(key, location), storage.display(location)
    if CONFIG_FILE not in files:
        raise SourceProblem(key, f"{where} holds no {CONFIG_FILE} (a Hugging Face model folder has one)")
    try:
        if storage.is_remote(location):
            if files[CONFIG_FILE] > MAX_JSON_BYTES:
                raise ValueError(f"is {files[CONFIG_FILE]:,} bytes, more than the {MAX_JSON_BYTES:,} read of such "
                                 "a file")
            config = parse_json(storage.read_bytes(storage.join(location, CONFIG_FILE)))
        else:
            config = read_json(location, CONFIG_FILE)
    except OSError as error:
        raise SourceProblem(key, f"{where}/{CONFIG_FILE}: cannot be read: {str(error).splitlines()[0][:200]}") from None
    except ValueError as error:
        raise SourceProblem(key, f"{where}/{CONFIG_FILE}: {error}") from None
    if not isinstance(config, dict):
        raise SourceProblem(key, f"{where}/{CONFIG_FILE}: does not hold a mapping")
    check_config(key, f"{where}/{CONFIG_FILE}", config)
    return config, files


def check_config(key: str, where: str, config: dict) -> None:
    """SourceProblem naming `where` and the field when config.json's sizes or architecture would fail."""
    if problem := config_problem(config) or model_type_problem(config):
        raise SourceProblem(key, f"{where}: {problem}")


def check_local_files(key: str, location: str, files: dict[str, int], weights: list[str], tokenizer: bool) -> None:
    """SourceProblem when a file the key hashes and the import copies is not a regular file
    inside the folder's tree, a shard index names a shard the folder lacks, a `.bin` is not
    loadable weights-only, or the tokenizer asks for its own code (local folders; an object store
    has no links, and its files are checked where they are read)."""
    where, names = storage.display(location), copied_names(files, weights)
    try:
        check_inside(location, names)
    except OutsideSource as problem:
        raise SourceProblem(key, f"{problem}") from None
    present = set(files)
    for name in weights:
        problem = (shard_problem(location, name, present) if name.endswith(".index.json")
                   else bin_problem(location, name) if name.endswith(".bin") else safetensors_problem(location, name))
        if problem:
            raise SourceProblem(key, f"{where}/{problem}")
    if tokenizer and (problem := tokenizer_problem(location, present)):
        raise SourceProblem(key, f"{where}/{problem}")


@lru_cache(maxsize=64)
def resolve_hub_revision(key: str, repo: str, revision: str | None) -> str:
    """The commit `revision` (default main) names on the hub; a full commit id as it is."""
    if revision and COMMIT.match(revision):
        return revision
    try:
        from huggingface_hub import HfApi

        return HfApi().model_info(repo, revision=revision or "main", timeout=20).sha
    except Exception as error:  # offline, unknown repository, refused token: all say the same to the user
        reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
        raise SourceProblem(key, (
            f"cannot resolve {HUB_PREFIX}{repo} at revision {revision or 'main'} on the Hugging Face hub from here "
            f"({reason}); plan where the hub is reachable, give `revision:` a full commit id, or use a local "
            "folder holding the model")) from None


def hub_config(repo: str, revision: str) -> dict:
    """config.json of a hub model at a commit, from the local hub cache or the hub; {} when
    neither has it (the plan then sizes the checkpoint at run time)."""
    try:
        from huggingface_hub import hf_hub_download

        path = Path(hf_hub_download(repo, CONFIG_FILE, revision=revision))
    except Exception:  # sizes are an estimate's input: unknown is an answer
        return {}
    try:
        config = read_json(str(path.parent), path.name)
    except ValueError as error:  # the hub cache's copy, read as any config.json
        raise SourceProblem("source", f"{HUB_PREFIX}{repo} at {revision[:12]}: {CONFIG_FILE}: {error}") from None
    if not isinstance(config, dict):
        raise SourceProblem("source", f"{HUB_PREFIX}{repo} at {revision[:12]}: {CONFIG_FILE}: does not hold a mapping")
    check_config("source", f"{HUB_PREFIX}{repo} at {revision[:12]}: {CONFIG_FILE}", config)
    return config


def resolve_external(entry: ExternalCheckpointSpec) -> ExternalCheckpoint:
    """The plan's view of one entry; SourceProblem when its source cannot be used."""
    tokenizer_source = entry.tokenizer or entry.source
    if entry.is_hub:
        repo = hub_repo(entry.source)
        revision = resolve_hub_revision("source", repo, entry.revision)
        config = hub_config(repo, revision)
        identity = {"hub": repo, "revision": revision}
    else:
        config, files = read_folder("source", entry.source)
        weights = weight_names(files)
        if not weights:
            raise SourceProblem("source", f"{storage.display(entry.source)} holds no weight files "
                                          f"(*.safetensors or *.bin beside {CONFIG_FILE})")
        if entry.tokenizer is None and not tokenizer_names(files):
            raise SourceProblem("source", f"{storage.display(entry.source)} holds no tokenizer files "
                                          f"({', '.join(TOKENIZER_FILES[:2])}, ...): name one with `tokenizer:`")
        keyed = keyed_files(files, entry.tokenizer is None)
        if not storage.is_remote(entry.source):
            check_local_files("source", entry.source, files, weights, tokenizer=entry.tokenizer is None)
        identity = {"weights": fingerprint("source", entry.source, keyed)}
        revision = None
    if entry.tokenizer is None:
        tokenizer_identity = {"with": identity}
    elif entry.tokenizer.startswith(HUB_PREFIX):
        repo = hub_repo(entry.tokenizer)
        tokenizer_identity = {"hub": repo, "revision": resolve_hub_revision("tokenizer", repo, None)}
    else:
        files = listing("tokenizer", entry.tokenizer)
        if not tokenizer_names(files):
            raise SourceProblem("tokenizer", f"{storage.display(entry.tokenizer)} holds no tokenizer files "
                                             f"({', '.join(TOKENIZER_FILES[:3])}, ...)")
        if not storage.is_remote(entry.tokenizer):
            check_local_files("tokenizer", entry.tokenizer, files, [], tokenizer=True)
        tokenizer_identity = {"tokenizer": fingerprint("tokenizer", entry.tokenizer, tokenizer_names(files))}
    identity = {**identity, **({"tokenizer": tokenizer_identity} if entry.tokenizer is not None else {})}
    return ExternalCheckpoint(
        name=entry.name, source=entry.source, tokenizer_source=tokenizer_source, revision=revision,
        key=stable_key({"external": identity}), tokenizer_key="tok-" + stable_key(tokenizer_identity),
        model_type=config.get("model_type"), sizes=llama_equivalent_sizes(config), meta=entry.meta, identity=identity)


def folded(name: str) -> str:
    """A checkpoint name as compared for collisions: NFC-normalised and case-folded (two names
    that print alike, or differ in case only, would name one folder on some disks)."""
    return unicodedata.normalize("NFC", name).casefold()


def resolve_all(entries: list[ExternalCheckpointSpec]) -> list[ExternalCheckpoint]:
    """Every entry resolved, in spec order; SourceProblem with the entry's index in its key. Two
    names equal once `folded`, or two entries of equal content (their keys equal: the same weights
    and tokenizer under two names) are refused: each would be fine-tuned and reported twice."""
    names: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if (first := names.setdefault(folded(entry.name), i)) != i:
            raise SourceProblem(f"finetuning.checkpoints[{i}].name", (
                f"{entry.name!r} is checkpoints[{first}]'s name {entries[first].name!r} up to Unicode normalisation "
                "or case: give each checkpoint a name of its own"))
    resolved, keys = [], {}
    for i, entry in enumerate(entries):
        try:
            external = resolve_external(entry)
        except SourceProblem as problem:
            raise SourceProblem(f"finetuning.checkpoints[{i}].{problem.key}", problem.reason) from None
        if (first := keys.setdefault(external.key, i)) != i:
            raise SourceProblem(f"finetuning.checkpoints[{i}].source", (
                f"holds the same weights and tokenizer as checkpoints[{first}] ({entries[first].name}): one checkpoint "
                "under two names would be fine-tuned and reported twice; list it once"))
        resolved.append(external)
    return resolved
