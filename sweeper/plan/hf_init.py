"""Continued pretraining from a Hugging Face causal LM (`init_from: hf:<path or name>`): what
the plan knows of it from its config.json alone, no weights and no torch.

- whether transformers ships its family as a causal LM (`model_type` in transformers'
  `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`, read from the installed package's source, so `sweeper
  plan` imports neither transformers nor torch): no remote code is ever run, so a family it
  does not ship is refused here, not when its run starts;
- which path trains it (`hf_init`): `convert` (trainables.convert: the study's encoder, exact
  for Llama and Mistral without biases, another head size or scaled RoPE) or `native`
  (trainables.causal_mlm: the family's own model run bidirectionally); `auto` converts where the
  conversion is exact and runs natively otherwise;
- its sizes (`checkpoint_sources.llama_equivalent_sizes`) for the cost and memory estimates.
"""
from __future__ import annotations

import ast
import importlib.util
import os
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from sweeper.plan.checkpoint_sources import SourceProblem, hub_config, llama_equivalent_sizes, read_folder
from sweeper.store import storage

CONVERTIBLE = ("llama", "mistral")
"""model_types trainables.convert maps onto the encoder (its SUPPORTED_MODEL_TYPES)."""


class HfSourceProblem(ValueError):
    """Why an `init_from: hf:` source cannot be continued (the spec names the entry's key)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HfInit:
    """How a Hugging Face causal LM is continued."""

    model_type: str
    mode: str
    """`convert` (to the study's encoder) or `native` (as its own model)."""
    sizes: dict = field(default_factory=dict)
    """LlamaEncoderConfig-named sizes for the estimates (empty when config.json lacks one)."""


@lru_cache(maxsize=1)
def shipped_causal_lms() -> dict[str, str]:
    """model_type -> causal-LM class of the installed transformers, from its source text."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return {}
    source = Path(spec.submodule_search_locations[0]) / "models" / "auto" / "modeling_auto.py"
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"
                                                for t in node.targets):
            return dict(ast.literal_eval(node.value.args[0]))
    return {}


def convert_problem(config: dict) -> str | None:
    """Why the conversion to the encoder would not be exact (trainables.convert's refusals), or None."""
    if config.get("model_type") not in CONVERTIBLE:
        return f"model_type {config.get('model_type')!r} is not converted (only {', '.join(CONVERTIBLE)})"
    heads = config.get("num_attention_heads") or 1
    if config.get("head_dim") not in (None, config.get("hidden_size", 0) // heads):
        return "head_dim != hidden_size / num_attention_heads"
    if config.get("attention_bias") or config.get("mlp_bias"):
        return "attention or MLP biases"
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    kind = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
    if kind != "default":
        return f"RoPE scaling {kind!r}"
    return None


def source_config(path: str) -> dict:
    """config.json of a local folder, or of a hub model from the local hub cache or the hub."""
    if storage.is_remote(path) or os.path.isdir(path):
        try:
            return read_folder("init_from", path)[0]
        except SourceProblem as problem:
            raise HfSourceProblem(problem.reason) from None
    config = hub_config(path, None) if "\x00" not in path else {}
    if not config:
        raise HfSourceProblem(f"cannot read config.json of hf:{path}: no such folder here, and the Hugging Face "
                              "hub (or its local cache) does not have it; plan where the hub is reachable or "
                              "give a local folder holding the model")
    return config


@lru_cache(maxsize=64)
def resolve_hf_init(path: str, requested: str = "auto") -> HfInit:
    """How the causal LM at `path` is continued under `hf_init: requested`; HfSourceProblem when it cannot be."""
    config = source_config(path)
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        raise HfSourceProblem(f"hf:{path}: config.json names no model_type")
    shipped = shipped_causal_lms()
    if model_type not in shipped:
        raise HfSourceProblem(f"hf:{path}: model_type {model_type!r} is not a causal LM transformers "
                              f"{metadata.version('transformers')} ships (no remote code is run)")
    problem = convert_problem(config)
    if requested == "convert" and problem:
        raise HfSourceProblem(f"hf:{path} cannot be converted to the encoder exactly ({problem}): "
                              "use hf_init: native (or auto)")
    mode = "convert" if requested == "convert" or (requested == "auto" and problem is None) else "native"
    return HfInit(model_type=model_type, mode=mode, sizes=llama_equivalent_sizes(config))


def planned_hf_init(path: str, requested: str = "auto") -> HfInit:
    """`resolve_hf_init`, or where the source cannot be continued a placeholder (unsized) that
    lets the runs be expanded so the spec's first problem is reported: sweeper.plan.load then
    refuses the source, so no plan is ever made from the placeholder."""
    try:
        return resolve_hf_init(path, requested)
    except HfSourceProblem:
        return HfInit(model_type="", mode="native" if requested == "native" else "convert")
