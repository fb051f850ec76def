"""What would make a checkpoint from elsewhere fail on the cluster, found by `sweeper plan`.

Each check reads files as hostile input (sweeper.plan.source_tree) and executes nothing of the
folder's; each failure is one line naming the file and the field:
- config.json: every size the plan reads (`SIZE_FIELDS`) is a whole number in [1, MAX_SIZE]
  (no float, no NaN or Infinity, no negative layer count), attention heads divide the hidden
  size (unless `head_dim` says otherwise), key/value heads divide the heads;
- `model_type` is present and is one transformers' `AutoModel` ships (or the study's own
  `llama_encoder`): an architecture that needs the folder's own code (`auto_map`) is refused,
  as the study never runs it;
- weights: every shard a `*.index.json` names is a plain file name present in the folder; a
  `.safetensors` file's header describes the file (each tensor's byte range inside it); a
  `.bin` is a pickle that names only what PyTorch's weights-only loader accepts (its opcodes are
  read with `pickletools`, never executed);
- the tokenizer loads without custom code: a tokenizer_config.json whose `auto_map` asks for an
  `AutoTokenizer` of its own is refused unless its `tokenizer_class` is one transformers ships.

Which model types and tokenizer classes transformers ships is read from the installed
package's source (`transformers/models/auto/*.py`, parsed with `ast`): importing those modules
imports torch (several seconds, and the plan must not), and the names are literals there. Where
the installed version lays them out otherwise, the check is skipped (the trial then fails at load
and is recorded as failed).
"""
from __future__ import annotations

import ast
import importlib.util
import math
import os
import pickletools
import re
import zipfile
from functools import lru_cache

from sweeper.plan.source_tree import open_inside, parse_json, read_json

STUDY_MODEL_TYPE = "llama_encoder"
"""The study's own architecture (trainables.model.MODEL_TYPE), registered by `import trainables.model`."""
STUDY_AUTO_MAP = {"AutoConfig": "model.LlamaEncoderConfig", "AutoModel": "model.LlamaEncoderModel",
                  "AutoModelForMaskedLM": "model.LlamaEncoderForMaskedLM"}
"""The `auto_map` every checkpoint of the study's architecture carries in its config.json
(trainables.model.AUTO_MAP, which imports torch: the driver cannot read it from there; a unit
test holds the two equal). Anything else there was not written by the study (sweeper.run.own_checkpoints)."""
SIZE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size",
               "intermediate_size", "head_dim", "max_position_embeddings")
"""config.json fields the plan's estimates read (where present)."""
MAX_SIZE = 1 << 24
"""Largest size accepted in one of SIZE_FIELDS (16.7M: above any real vocabulary or width)."""
MAX_SAFETENSORS_HEADER = 1 << 20
"""Most bytes of a safetensors header read (a real one is some KiB: one short JSON entry a tensor)."""
MAX_PICKLE_BYTES = 64 << 20
"""Most bytes of a `.bin`'s pickle read to list what it names (a real one is some 100 KiB)."""
WEIGHTS_ONLY_GLOBALS = {"collections.OrderedDict", "collections.Counter", "torch.Size", "torch.Tensor", "torch.device",
                        "torch.nn.parameter.Parameter", "torch._tensor._rebuild_from_type_v2",
                        "torch.serialization._get_layout", "_codecs.encode", "builtins.bytearray", "builtins.set",
                        "builtins.complex"}
"""What torch's weights-only unpickler allows besides the patterns of `weights_only_name`."""
TORCH_DTYPE = re.compile(r"^(u?int\d+|float\d*|bfloat16|half|double|bool|complex\d+|float8_\w+|q?u?int\d+x?\d*|"
                         r"bits\w+|long|short|int|cfloat|cdouble|chalf|\w+Storage|per_(tensor|channel)_\w+)$")
STRING_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING", "BINSTRING", "STRING"}


def config_problem(config: dict) -> str | None:
    """`field: reason` for the first size of config.json that is not a sane whole number, or for
    heads that do not divide, or None."""
    sizes = {}
    for name in SIZE_FIELDS:
        if config.get(name) is None:  # absent: sized at run time (llama_equivalent_sizes)
            continue
        value = config[name]
        if isinstance(value, bool) or not isinstance(value, int):
            shown = value if isinstance(value, (int, float)) and math.isfinite(value) else repr(value)[:40]
            return f"{name}: must be a whole number, got {shown}"
        if not 1 <= value <= MAX_SIZE:
            return f"{name}: must lie in [1, {MAX_SIZE:,}], got {value if abs(value) < 10 ** 30 else 'a huge number'}"
        sizes[name] = value
    heads, hidden, kv = sizes.get("num_attention_heads"), sizes.get("hidden_size"), sizes.get("num_key_value_heads")
    if heads and hidden and "head_dim" not in sizes and hidden % heads:
        return f"num_attention_heads: {heads} heads do not divide hidden_size {hidden}"
    if heads and kv and heads % kv:
        return f"num_key_value_heads: {kv} key/value heads do not divide num_attention_heads {heads}"
    return None


def model_type_problem(config: dict) -> str | None:
    """`model_type: reason` when config.json names no architecture transformers ships, or None."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type.strip():
        return ("model_type: missing (transformers reads the architecture from it; a folder saved by "
                "`save_pretrained` has one)")
    shipped = shipped_model_types()
    if shipped and model_type not in shipped and model_type != STUDY_MODEL_TYPE:
        needs = " (its auto_map asks for the folder's own code, which the study never runs)" \
            if isinstance(config.get("auto_map"), dict) else ""
        return (f"model_type: {model_type[:80]!r} is not an architecture the installed transformers ships{needs}; "
                "use a checkpoint of a supported family or convert it")
    return None


def shard_problem(folder: str, index: str, files: set[str]) -> str | None:
    """`<index>: reason` when a shard index names a shard that is not a plain file of the folder."""
    try:
        data = read_json(folder, index)
    except ValueError as error:
        return f"{index}: {error}"
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        return f"{index}: holds no weight_map (parameter -> shard file)"
    for shard in sorted({str(name) for name in weight_map.values()}):
        if "/" in shard or "\\" in shard or shard in ("", ".", ".."):
            return f"{index}: names shard {shard[:120]!r}, not a file name of this folder"
        if shard not in files:
            return f"{index}: names shard {shard[:120]!r}, which the folder does not hold"
    return None


def safetensors_problem(folder: str, name: str) -> str | None:
    """`<name>: reason` when a `.safetensors` file's header (an 8-byte length, then JSON naming
    each tensor's byte range) does not describe the file: cut short, not safetensors, a range past
    its end. Read bounded (MAX_SAFETENSORS_HEADER), the tensors themselves never read."""
    try:
        with open_inside(folder, name) as handle:
            size = os.fstat(handle.fileno()).st_size
            length = int.from_bytes(handle.read(8), "little")
            if size < 8 or not 2 <= length <= min(MAX_SAFETENSORS_HEADER, size - 8):
                return f"{name}: not a safetensors file (its header length {length:,} does not fit its {size:,} bytes)"
            header = parse_json(handle.read(length))
    except ValueError as error:  # OutsideSource among them
        return f"{name}: not a safetensors file: {error}"
    except OSError as error:
        return f"{name}: cannot be read: {error.strerror or error}"
    if not isinstance(header, dict):
        return f"{name}: not a safetensors file (its header is not a mapping)"
    data = size - 8 - length
    for tensor, info in header.items():
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if tensor == "__metadata__":
            continue
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
                and 0 <= offsets[0] <= offsets[1] <= data):
            return f"{name}: tensor {str(tensor)[:80]!r} lies outside the file (cut short, or not safetensors)"
    return None


def weights_only_name(full: str) -> bool:
    """Whether torch's weights-only unpickler accepts the global `full` (module.name)."""
    module, _, name = full.rpartition(".")
    return (full in WEIGHTS_ONLY_GLOBALS or module == "torch._utils" and name.startswith("_rebuild_")
            or module in ("torch", "torch.storage") and bool(TORCH_DTYPE.match(name)))


def pickle_globals(stream) -> list[str]:
    """The globals one pickle in `stream` names (GLOBAL, INST, STACK_GLOBAL), its opcodes read
    and never executed; '?' for a STACK_GLOBAL whose names are not plain strings."""
    named, pushed, memo = [], [], {}
    for opcode, arg, _ in pickletools.genops(stream):
        op = opcode.name
        if op in ("GLOBAL", "INST"):
            named.append(arg.replace(" ", "."))
        elif op == "STACK_GLOBAL":
            module, name = (pushed[-2:] + [None, None])[:2] if len(pushed) >= 2 else (None, None)
            named.append(f"{module}.{name}" if isinstance(module, str) and isinstance(name, str) else "?")
        if op == "MEMOIZE":
            memo[len(memo)] = pushed[-1] if pushed else None
        elif op in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[arg] = pushed[-1] if pushed else None
        elif op in ("GET", "BINGET", "LONG_BINGET"):
            pushed.append(memo.get(arg))
        elif op in STRING_OPS:
            pushed.append(arg if isinstance(arg, str) else arg.decode("latin-1") if isinstance(arg, bytes) else None)
        elif op != "FRAME":
            pushed.append(None)
        del pushed[:-2]
    return named


class Bounded:
    """A read-only stream that ends after `limit` bytes (ValueError past it)."""

    def __init__(self, handle, limit: int):
        self.handle, self.left = handle, limit

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0 and n != 0:
            raise ValueError(f"its pickle is longer than the {MAX_PICKLE_BYTES:,} bytes read")
        data = self.handle.read(self.left if n < 0 else min(n, self.left))
        self.left -= len(data)
        return data

    def readline(self) -> bytes:
        line = self.handle.readline(self.left)
        self.left -= len(line)
        return line


def bin_problem(folder: str, name: str) -> str | None:
    """`<name>: reason` when a `.bin` weight file is not a pickle PyTorch's weights-only loader
    accepts: not a torch.save zip archive, or a pickle naming anything besides tensors."""
    try:
        with open_inside(folder, name) as handle:
            if not zipfile.is_zipfile(handle):
                return (f"{name}: not a torch.save archive (a legacy or foreign pickle): save it again with "
                        "torch.save, or as safetensors")
            handle.seek(0)
            with zipfile.ZipFile(handle) as archive:
                pickles = [i for i in archive.infolist()
                           if i.filename.endswith("/data.pkl") or i.filename == "data.pkl"]
                if len(pickles) != 1:
                    return f"{name}: holds {len(pickles)} data.pkl, not the one of a torch.save archive"
                with archive.open(pickles[0]) as member:
                    named = pickle_globals(Bounded(member, MAX_PICKLE_BYTES))
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, RuntimeError) as error:  # ValueError: also OutsideSource
        reason = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        return f"{name}: cannot be read as weights: {reason}"
    refused = sorted({n for n in named if not weights_only_name(n)})
    if refused:
        return (f"{name}: its pickle names {', '.join(r[:80] for r in refused[:3])}, which PyTorch's weights-only "
                "loader refuses (code, not tensors): nothing in it was run; use safetensors weights")
    return None


def tokenizer_problem(folder: str, files: set[str]) -> str | None:
    """`tokenizer_config.json: reason` when the tokenizer asks for code of its own that
    transformers does not ship (`auto_map`), or the file cannot be read."""
    if "tokenizer_config.json" not in files:
        return None
    try:
        config = read_json(folder, "tokenizer_config.json")
    except ValueError as error:
        return f"tokenizer_config.json: {error}"
    if not isinstance(config, dict):
        return "tokenizer_config.json: does not hold a mapping"
    auto_map = config.get("auto_map")
    custom = auto_map.get("AutoTokenizer") if isinstance(auto_map, dict) else auto_map
    if not custom:
        return None
    declared = config.get("tokenizer_class")
    shipped = shipped_tokenizer_classes()
    if isinstance(declared, str) and (not shipped or declared.removesuffix("Fast") in shipped):
        return None  # transformers loads its own class of that name and leaves the folder's code alone
    return (f"tokenizer_config.json: auto_map asks for the tokenizer's own code ({str(custom)[:120]}) and "
            f"tokenizer_class {str(declared)[:60]!r} is not one transformers ships; the study never runs a "
            "folder's code: give `tokenizer:` a folder with a standard tokenizer")


def transformers_source(name: str) -> str | None:
    """The text of `transformers/models/auto/<name>` as installed, or None."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        with open(os.path.join(spec.submodule_search_locations[0], "models", "auto", name), encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def literal_pairs(source: str | None, variable: str) -> dict:
    """`variable = OrderedDict([(key, value), ...])` of a transformers source: key -> the string
    constants of its value."""
    if source is None:
        return {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == variable for t in node.targets) \
                and isinstance(node.value, ast.Call) and node.value.args and isinstance(node.value.args[0], ast.List):
            pairs = {}
            for item in node.value.args[0].elts:
                if isinstance(item, ast.Tuple) and len(item.elts) == 2 and isinstance(item.elts[0], ast.Constant):
                    pairs[item.elts[0].value] = {c.value for c in ast.walk(item.elts[1])
                                                 if isinstance(c, ast.Constant) and isinstance(c.value, str)}
            return pairs
    return {}


@lru_cache(maxsize=1)
def shipped_model_types() -> frozenset[str]:
    """The model types `AutoModel` of the installed transformers loads without remote code
    (empty: cannot tell)."""
    return frozenset(literal_pairs(transformers_source("modeling_auto.py"), "MODEL_MAPPING_NAMES"))


@lru_cache(maxsize=1)
def shipped_tokenizer_classes() -> frozenset[str]:
    """The tokenizer class names (without `Fast`) the installed transformers ships (empty: cannot tell)."""
    pairs = literal_pairs(transformers_source("tokenization_auto.py"), "TOKENIZER_MAPPING_NAMES")
    names = {name.removesuffix("Fast") for values in pairs.values() for name in values}
    return frozenset(names | {"TokenizersBackend", "PreTrainedTokenizer"} if names else ())
