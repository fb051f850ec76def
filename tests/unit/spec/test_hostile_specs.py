"""Hostile and careless specs: each one exits 2 through the real CLI, naming the file (and the
line and key where one applies), with no traceback, in under 5 s and 500 MB, and no Ray.

The corpus is written by this module (a 2 MB file and binary garbage do not belong in the
repository): alias bombs, self-referencing aliases, deep nesting, oversized and non-UTF-8 files,
duplicate keys, non-finite and out-of-range values, repeated grid items, bad model overrides,
study names no file system takes, storage that cannot be created; q-forms that draw outside their
field, phase settings over 1 with the study's, run names too long once planned, storage URIs
without a bucket or with keys, C1 and bidi characters in names (#29), and resource layouts no
cluster runs (#28). All cases run in ONE child
interpreter, which measures each case's time and its own peak RSS after each case.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
GOOD = (ROOT / "search_spaces" / "smoke.yaml").read_text()
SECONDS, MEGABYTES = 5.0, 500
"""Per case, CPU seconds of the interpreter (a loaded machine stretches wall time: one case took
11.7 s of wall time beside 7 busy processes) and its peak RSS."""


def change(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new, 1)


def in_section(section: str, line: str) -> str:
    """GOOD with `line` added first in `section` (two-space indent)."""
    return change(f"{section}:", f"{section}:\n  {line}")


def bomb(levels: int, indent: str = "", mapping: bool = False) -> str:
    """The billion-laughs pattern: level i lists level i-1 ten times (10**levels leaves)."""
    if mapping:
        rows = [f"{indent}l0: &l0 {{" + ", ".join(f"k{j}: lol" for j in range(10)) + "}"]
        rows += [f"{indent}l{i}: &l{i} {{" + ", ".join(f"k{j}: *l{i - 1}" for j in range(10)) + "}"
                 for i in range(1, levels)]
    else:
        rows = [f"{indent}l0: &l0 [" + ", ".join(["lol"] * 10) + "]"]
        rows += [f"{indent}l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(rows) + "\n"


def list_bomb(levels: int) -> str:
    """The same bomb inside one flow list: item i lists item i-1 ten times."""
    items = ["&l0 [" + ", ".join(["1"] * 10) + "]"]
    items += [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "[" + ", ".join(items) + "]"


@dataclass
class Case:
    name: str
    content: str | bytes
    key: str | None
    """Key path the message must name (None: the file as a whole)."""
    reason: str
    at: str | None = None
    """A text on the line the message must name (`file:line:`)."""
    argv: list[str] = field(default_factory=lambda: ["run", "{spec}", "--storage", "{study}"])
    where: str | None = None
    """What names the place instead of the spec file (`command line` for --storage)."""


def searched(line: str) -> str:
    """GOOD searching at random, with `line` added to finetuning (a distribution)."""
    return change("  learning_rates: [0.001] ", f"  search: random\n  {line} ")  # a search draws the learning rate


def resources(*lines: str) -> str:
    """GOOD with its `pretraining_workers: 0` line replaced by `lines` under resources."""
    return change("  pretraining_workers: 0 ", "".join(f"  {line}\n" for line in lines)[:-1] + " ")


random.seed(1234)
GARBAGE = bytes(random.randrange(256) for _ in range(4096))
LONG = "x" * 300

CASES = [
    # --- the reader: bounded whatever the bytes -------------------------------------------------
    Case("alias bomb, 7 levels", bomb(7) + GOOD, "l0", "unknown key", at="l0:"),
    Case("alias bomb, 9 levels", bomb(9) + GOOD, "l0", "unknown key", at="l0:"),
    Case("alias bomb of mappings, 9 levels", bomb(9, mapping=True) + GOOD, "l0", "unknown key", at="l0:"),
    Case("alias bomb in a list field", change("  seeds: [0, 1]", f"  seeds: {list_bomb(9)}"),
         "finetuning.seeds[0]", "expected an integer, got a list", at="  seeds:"),
    Case("alias bomb as the study name", change("study: smoke", f"study: {list_bomb(9)}"),
         "study", "expected a string, got a list", at="study:"),
    Case("alias bomb in model overrides", change("  preset: nano", f"  preset: nano\n  overrides: {{hidden_size: "
                                                                   f"{list_bomb(9)}}}"),
         "model.overrides.hidden_size", "expected an integer, got a list", at="overrides:"),
    Case("alias bomb in objective settings",
         change("    - objective: clm ", f"    - phases: [{{objective: mlm, settings: {{keep_original: "
                                         f"{list_bomb(9)}}}}}]\n     "),
         "pretraining.runs[1].phases[0].settings.keep_original", "expected a number", at="phases:"),
    Case("alias bomb as a literal choice", in_section("resources", f"sharding: {list_bomb(9)}"),
         "resources.sharding", "is not one of", at="sharding:"),
    Case("self-referencing list alias", change("study: smoke", "study: &s [*s]"), "study", "expected a string",
         at="study:"),
    Case("self-referencing mapping alias", change("model:", "model: &m\n  overrides: *m"),
         "model.overrides.overrides", "unknown key", at="overrides:"),
    Case("self-referencing run list", "study: x\npretraining: {runs: &r [*r]}\nfinetuning: {tasks: [sst2]}\n",
         "pretraining.runs[0]", "expected a mapping, got a list", at="pretraining:"),
    Case("5,000 nested brackets", "study: " + "[" * 5000 + "]" * 5000 + "\n", "", "nested deeper than 64 levels",
         at="study:"),
    Case("5,000 nested flow mappings", "study: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n", "",
         "nested deeper than 64 levels", at="study:"),
    Case("200 levels of block nesting", "".join("  " * i + f"k{i}:\n" for i in range(200)) + "  " * 200 + "v: 1\n",
         "", "nested deeper than 64 levels"),
    Case("20,000 values", GOOD + "extra: [" + ", ".join(["1"] * 20_000) + "]\n", "", "more than 10,000 values"),
    Case("a 2 MB file", GOOD + ("# padding " + "x" * 100 + "\n") * 20_000, "", "larger than 1,024 KiB"),
    Case("one byte over 1 MiB", GOOD + "#" * ((1 << 20) + 1 - len(GOOD.encode()) - 1) + "\n", "",
         "larger than 1,024 KiB"),
    Case("binary garbage", GARBAGE, "", "not UTF-8"),
    Case("UTF-16 with a byte-order mark", GOOD.encode("utf-16"), "", "UTF-16"),
    Case("UTF-16 big-endian", b"\xfe\xff" + GOOD.encode("utf-16-be"), "", "UTF-16"),
    Case("UTF-16 without a byte-order mark", GOOD.encode("utf-16-le"), "", "NUL character"),
    Case("UTF-32", GOOD.encode("utf-32"), "", "UTF-32"),
    Case("a Latin-1 byte", change("study: smoke", "study: sm\xf6ke").encode("latin-1"), "", "not UTF-8",
         at="study:"),
    Case("a NUL byte in the text", change("  seq_len: 64", "  seq_len: 6\x004"), "", "NUL character", at="seq_len"),
    Case("a control character", change("  seq_len: 64", "  seq_len: 6\x014"), "", "special characters",
         at="seq_len"),
    Case("an empty file", "", "", "must hold a mapping"),
    Case("a scalar document", "just words\n", "", "must hold a mapping"),
    Case("two documents", GOOD + "---\nstudy: other\n", "", "expected a single document"),
    Case("a Python tag", change("study: smoke", "study: !!python/object/apply:os.system [echo pwned]"),
         "", "could not determine a constructor", at="study:"),
    Case("an unknown local tag", change("  steps: 40", "  steps: !shell 40"), "", "could not determine a constructor",
         at="steps: !shell"),
    Case("!!float of a word", change("    peak_lr: 0.002", "    peak_lr: !!float abc"), "pretraining.optimizer.peak_lr",
         "cannot read this value", at="peak_lr"),
    Case("a 5,000-digit integer", change("  steps: 40", "  steps: " + "9" * 5000), "pretraining.steps",
         "cannot read this value", at="  steps:"),
    Case("an undefined alias", change("  seeds: [0, 1]", "  seeds: *nothing"), "", "undefined alias", at="seeds"),
    Case("a repeated anchor", change("  seeds: [0, 1]", "  seeds: [&a 0, &a 1]"), "", "duplicate anchor",
         at="seeds"),
    Case("tab indentation", change("  steps: 40", "\tsteps: 40"), "", "malformed YAML", at="\tsteps"),
    Case("an unclosed bracket", change("  seq_len: 64", "  seq_len: [64"), "", "malformed YAML"),
    Case("a list as a key", GOOD + "? [a, b]\n: 1\n", "", "unhashable key"),
    # --- duplicate keys: refused, both lines named ----------------------------------------------
    Case("duplicate top-level key", GOOD + "study: other\n", "study", "given on line 4 and again on line",
         at="study: other"),
    Case("duplicate nested key", change("  steps: 40", "  steps: 40\n  steps: 4000"), "pretraining.steps",
         "duplicate key", at="steps: 4000"),
    Case("duplicate key in a flow mapping", change("    - objective: clm ", "    - {objective: clm, "
                                                                            "objective: mlm}\n     "),
         "pretraining.runs[1].objective", "given twice on line", at="objective: clm, objective"),
    Case("duplicate key in model overrides",
         change("  preset: nano", "  preset: nano\n  overrides:\n    hidden_size: 64\n    hidden_size: 128"),
         "model.overrides.hidden_size", "duplicate key", at="hidden_size: 128"),
    Case("two merge keys", GOOD + "base: &b {x: 1}\nother: {<<: *b, <<: *b}\n", "other.<<", "duplicate key",
         at="other:"),
    # --- values that corrupt training silently or fail hours later -------------------------------
    Case("NaN peak learning rate", change("    peak_lr: 0.002", "    peak_lr: .nan"), "pretraining.optimizer.peak_lr",
         "must be a finite number", at="peak_lr"),
    Case("infinite peak learning rate", change("    peak_lr: 0.002", "    peak_lr: .inf"),
         "pretraining.optimizer.peak_lr", "must be a finite number", at="peak_lr"),
    Case("1e999 as a learning rate", change("    peak_lr: 0.002", "    peak_lr: 1e999"),
         "pretraining.optimizer.peak_lr", "must be a finite number", at="peak_lr"),
    Case("a 400-digit integer as a learning rate", change("    peak_lr: 0.002", "    peak_lr: " + "9" * 400),
         "pretraining.optimizer.peak_lr", "beyond the range of a number", at="peak_lr"),
    Case("NaN in the learning-rate grid", change("  learning_rates: [0.001]", "  learning_rates: [0.001, .nan]"),
         "finetuning.learning_rates[1]", "must be a finite number", at="learning_rates"),
    Case("-inf in the learning-rate grid", change("  learning_rates: [0.001]", "  learning_rates: [-.inf]"),
         "finetuning.learning_rates[0]", "must be a finite number", at="learning_rates"),
    Case("NaN mask ratio", change("mask_ratio: [0.4]", "mask_ratio: [.NaN]"), "pretraining.runs[0].mask_ratio[0]",
         "must be a finite number", at="mask_ratio"),
    Case("NaN beta", in_section("finetuning", "betas: [.nan, 0.9]"), "finetuning.betas[0]", "must be a finite number",
         at="betas"),
    Case("infinite CPUs per trial", change("  cpus_per_trial: 1", "  cpus_per_trial: .inf"), "resources.cpus_per_trial",
         "must be a finite number", at="cpus_per_trial"),
    Case("NaN utilisation", GOOD + "cost: {utilization: .nan}\n", "cost.utilization", "must be a finite number",
         at="cost:"),
    Case("infinite task epochs", in_section("finetuning", "task_budgets: {wordnet-supersense-qa: {epochs: .inf}}"),
         "finetuning.task_budgets.wordnet-supersense-qa.epochs", "must be a finite number", at="task_budgets"),
    Case("NaN retrieval temperature", in_section("finetuning", "retrieval_temperature: .nan"),
         "finetuning.retrieval_temperature", "must be a finite number", at="retrieval_temperature"),
    Case("negative eps", change("    peak_lr: 0.002", "    peak_lr: 0.002\n    eps: -1.0e-8"),
         "pretraining.optimizer.eps", "must be positive", at="eps: -1"),
    Case("negative weight decay", in_section("finetuning", "weight_decay: -0.1"), "finetuning.weight_decay",
         "must not be negative", at="weight_decay"),
    Case("negative preemption budget", in_section("resources", "max_preemptions: -1"), "resources.max_preemptions",
         "must not be negative", at="max_preemptions"),
    Case("a steps budget beyond 64 bits", change("  steps: 40", "  steps: " + str(2**70)), "pretraining.steps",
         "beyond the 64-bit integer range", at="  steps:"),
    Case("a batch the workers cannot share", change("  pretraining_workers: 0", "  pretraining_workers: 3"),
         "pretraining.global_batch_size", "not divisible by resources.pretraining_workers", at="global_batch_size"),
    Case("negative fine-tuning seed", change("  seeds: [0, 1]", "  seeds: [0, -1]"), "finetuning.seeds[1]",
         "a seed must lie in [0, 2**32)", at="  seeds:"),
    Case("a seed beyond 32 bits", change("  seeds: [0, 1]", f"  seeds: [{2**40}]"), "finetuning.seeds[0]",
         "a seed must lie in", at="  seeds:"),
    Case("negative pretraining seed", in_section("pretraining", "seed: -1"), "pretraining.seed", "a seed must lie in",
         at="seed: -1"),
    Case("negative data order seed", in_section("data", "order_seed: -5"), "data.order_seed", "a seed must lie in",
         at="order_seed"),
    Case("negative Optuna seed", in_section("finetuning", "optuna: {seed: -1}"), "finetuning.optuna.seed",
         "a seed must lie in", at="optuna:"),
    Case("a billion replicates", in_section("pretraining", "replicates: 1000000000"), "pretraining.replicates",
         "must be a whole number in [1, 1,000]", at="replicates:"),
    Case("negative replicates of an entry", change("clm_fraction: [0.5]", "clm_fraction: [0.5]\n      replicates: -2"),
         "pretraining.runs[2].replicates", "must be a whole number", at="replicates:"),
    Case("replicates: true", in_section("pretraining", "replicates: true"), "pretraining.replicates",
         "expected an integer, got a boolean", at="replicates:"),
    Case("no training examples", change("  max_train_examples: 256", "  max_train_examples: 0"),
         "finetuning.max_train_examples", "must be positive", at="max_train_examples"),
    Case("negative evaluation examples", change("  max_eval_examples: 64", "  max_eval_examples: -1"),
         "finetuning.max_eval_examples", "must be positive", at="max_eval_examples"),
    Case("no corpus documents", change("  max_documents: 2000", "  max_documents: 0"), "data.max_documents",
         "must be positive", at="max_documents"),
    Case("an empty corpus name", change("  corpus: wordnet", '  corpus: ""'), "data.corpus", "must not be empty",
         at="corpus:"),
    Case("a phase setting that is a word", change("    - objective: clm ", "    - phases: [{objective: mlm, settings: "
                                                                           "{random_replace: lots}}]\n     "),
         "pretraining.runs[1].phases[0].settings.random_replace", "expected a number", at="phases:"),
    Case("a NaN phase setting", change("    - objective: clm ", "    - phases: [{objective: mlm, settings: "
                                                                "{keep_original: .nan}}]\n     "),
         "pretraining.runs[1].phases[0].settings.keep_original", "must be a finite number", at="phases:"),
    # --- model overrides: LlamaEncoderConfig's fields and types ---------------------------------
    Case("an unknown override", change("  preset: nano", "  preset: nano\n  overrides: {num_hidden_layer: 2}"),
         "model.overrides.num_hidden_layer", "unknown key (did you mean 'num_hidden_layers'?)", at="overrides"),
    Case("a word as an override", change("  preset: nano", "  preset: nano\n  overrides: {hidden_size: big}"),
         "model.overrides.hidden_size", "expected an integer, got a string", at="overrides"),
    Case("a float for an integer override", change("  preset: nano", "  preset: nano\n  overrides: "
                                                                     "{num_hidden_layers: 2.5}"),
         "model.overrides.num_hidden_layers", "expected an integer", at="overrides"),
    Case("a boolean override", change("  preset: nano", "  preset: nano\n  overrides: {num_hidden_layers: true}"),
         "model.overrides.num_hidden_layers", "expected an integer, got a boolean", at="overrides"),
    Case("1e-5 read as text in an override", change("  preset: nano", "  preset: nano\n  overrides: "
                                                                      "{rms_norm_eps: 1e-5}"),
         "model.overrides.rms_norm_eps", "write 1.0e-5", at="overrides"),
    Case("a NaN override", change("  preset: nano", "  preset: nano\n  overrides: {rope_theta: .nan}"),
         "model.overrides.rope_theta", "must be a finite number", at="overrides"),
    Case("a negative layer count", change("  preset: nano", "  preset: nano\n  overrides: {num_hidden_layers: -2}"),
         "model.overrides.num_hidden_layers", "must be positive", at="overrides"),
    Case("heads that do not divide the width", change("  preset: nano", "  preset: nano\n  overrides: "
                                                                        "{num_attention_heads: 3}"),
         "model.overrides", "not divisible by num_attention_heads", at="overrides"),
    # --- repeated grid items: cells planned twice under one key ----------------------------------
    Case("duplicate seeds", change("  seeds: [0, 1]", "  seeds: [0, 1, 0]"), "finetuning.seeds[2]", "listed twice",
         at="  seeds:"),
    Case("duplicate tasks", change("[wordnet-supersense-cls, ", "[wordnet-supersense-cls, wordnet-supersense-cls, "),
         "finetuning.tasks[1]", "listed twice", at="[wordnet-supersense-cls"),
    Case("duplicate learning rates, spelt differently",
         change("  learning_rates: [0.001]", "  learning_rates: [0.001, 1e-3]"),
         "finetuning.learning_rates[1]", "listed twice", at="learning_rates"),
    Case("duplicate mask ratios", change("mask_ratio: [0.4]", "mask_ratio: [0.4, 0.4]"),
         "pretraining.runs[0].mask_ratio[1]", "listed twice", at="mask_ratio"),
    Case("duplicate CLM fractions", change("clm_fraction: [0.5]", "clm_fraction: [0.5, 0.5]"),
         "pretraining.runs[2].clm_fraction[1]", "listed twice", at="clm_fraction"),
    Case("duplicate step budgets", change("    - objective: clm ", "    - objective: clm\n      steps: "
                                                                   "[40, 40]\n     "),
         "pretraining.runs[1].steps[1]", "listed twice", at="steps: [40, 40]"),
    Case("duplicate presets", change("    - objective: clm ", "    - objective: clm\n      preset: "
                                                              "[nano, nano]\n     "),
         "pretraining.runs[1].preset[1]", "listed twice", at="preset: [nano, nano]"),
    Case("duplicate checkpoint steps", change("checkpoint_steps: [20]", "checkpoint_steps: [20, 20]"),
         "pretraining.runs[0].checkpoint_steps[1]", "listed twice", at="checkpoint_steps"),
    Case("duplicate init_from", change("    - objective: clm ", "    - objective: mlm\n      init_from: [nano-clm-40, "
                                                                "nano-clm-40]\n    - objective: clm "),
         "pretraining.runs[1].init_from[1]", "listed twice", at="init_from"),
    # --- the study's name and storage: refused before anything starts ----------------------------
    Case("a NUL in the study name", change("study: smoke", 'study: "a\\0b"'), "study", "control characters",
         at="study:"),
    Case("a newline in the study name", change("study: smoke", 'study: "a\\nb"'), "study", "control characters",
         at="study:"),
    Case("study: .", change("study: smoke", 'study: "."'), "study", "not . or ..", at="study:"),
    Case("study: ..", change("study: smoke", "study: .."), "study", "not . or ..", at="study:"),
    Case("a 300-character study name", change("study: smoke", f"study: {LONG}"), "study", "at most 255",
         at="study:"),
    Case("a study name of 260 UTF-8 bytes", change("study: smoke", "study: " + "é" * 130), "study",
         "260 bytes long", at="study:"),
    Case("storage under /dev/null", GOOD + "storage: /dev/null/x\n", "storage", "cannot create the study folder",
         argv=["run", "{spec}"]),
    Case("storage under /proc", GOOD, "--storage", "cannot create the study folder '/proc/x",
         argv=["run", "{spec}", "--storage", "/proc/x/study"], where="command line"),
    Case("a storage folder name too long", GOOD, "--storage", "File name too long",
         argv=["run", "{spec}", "--storage", f"{{tmp}}/{LONG}/study"], where="command line"),
    Case("a NUL in the storage path", GOOD + 'storage: "/tmp/a\\0b"\n', "storage", "NUL", at="storage:",
         argv=["run", "{spec}"]),
    # --- q-forms: every value they can draw within the field's bounds (#29) -----------------------
    Case("a q that dwarfs an eps range", searched("eps: {quniform: [1.0e-10, 1.0e-9, 1.0]}"),
         "finetuning.eps.quniform[2]", "is larger than the range", at="eps: {"),
    Case("a qloguniform q that dwarfs its range", searched("grad_clip: {qloguniform: [4.0e-10, 8.0e-10, 1.0]}"),
         "finetuning.grad_clip.qloguniform[2]", "is larger than the range", at="grad_clip:"),
    Case("an eps end q rounds to 0", searched("eps: {quniform: [1.0e-10, 1.0, 0.5]}"),
         "finetuning.eps.quniform[0]", "is not a multiple of q 0.5", at="eps: {"),
    Case("a grad_clip end q rounds to 0", searched("grad_clip: {qloguniform: [1.0e-12, 2.0, 1.0]}"),
         "finetuning.grad_clip.qloguniform[0]", "is not a multiple of q 1.0", at="grad_clip:"),
    Case("a warmup_ratio hi that rounds to 1.0", searched("warmup_ratio: {quniform: [0.0, 0.99999999995, 0.1]}"),
         "finetuning.warmup_ratio.quniform[1]", "1.0 is outside [0, 1)", at="warmup_ratio:"),
    # --- a phase's settings: the study's rules, the study's defaults merged in (#29) ---------------
    Case("a phase masking more than all selected tokens",
         change("    - objective: clm ", "    - phases: [{objective: mlm, mask_ratio: 0.3, settings: {random_replace: "
                                         "0.6, keep_original: 0.6}}]\n     "),
         "pretraining.runs[1].phases[0].settings.random_replace", "random_replace + keep_original must lie in [0, 1]",
         at="phases:"),
    Case("a phase setting over 1 with the study's default",
         change("  log_every: 10 ", "  random_replace: 0.1\n  log_every: 10 ").replace(
             "    - objective: clm ", "    - phases: [{objective: clm, until: 0.25}, {objective: mlm, settings: "
                                      "{keep_original: 0.95}}]\n     "),
         "pretraining.runs[1].phases[1].settings.keep_original", "random_replace 0.1 + keep_original 0.95",
         at="phases:"),
    # --- run and checkpoint names as planned: folder names, after expansion (#29) ------------------
    Case("a run name of 315 bytes from 40 phases",
         change("    - objective: clm ", "    - phases: [" + ", ".join(
             f"{{objective: {('clm', 'mlm')[i % 2]}, until: {(i + 1) / 40}}}" for i in range(39))
             + ", {objective: mlm}]\n     "),
         "pretraining.runs[1]", "the name is 315 bytes long", at="phases:", argv=["plan", "{spec}"]),
    Case("a run name of 512 bytes from a hub model",
         change("    - objective: clm ", f"    - {{objective: mlm, init_from: ['hf:/models/{'m' * 500}']}}\n     "),
         "pretraining.runs[1]", "the name is 512 bytes long", at="init_from:", argv=["plan", "{spec}"]),
    Case("a run name pushed over by its replicate tag",
         change("    - objective: clm ", f"    - {{objective: mlm, replicates: 2, init_from: "
                                         f"['hf:{'m' * 202}']}}\n     "),
         "pretraining.runs[1]", "-rep1', and a run's name is its folder's", at="replicates: 2"),
    Case("an external checkpoint name with no room for its key",
         in_section("finetuning", f"checkpoints: [{{name: {'c' * 240}, source: hf:org/model}}]"),
         "finetuning.checkpoints[0].name", "this name takes at most 238", at="checkpoints:"),
    # --- storage URIs: a bucket, no credentials, not empty (#29) -----------------------------------
    Case("credentials and no bucket", GOOD + 'storage: "s3://KEY:SECRET@/x"\n', "storage", "names no bucket",
         at="storage:", argv=["run", "{spec}"]),
    Case("gs://@ and no bucket", GOOD + 'storage: "gs://@/x"\n', "storage", "names no bucket", at="storage:",
         argv=["plan", "{spec}"]),
    Case("an empty storage", GOOD + 'storage: ""\n', "storage", "must not be empty", at="storage:",
         argv=["run", "{spec}"]),
    Case("keys in the spec's storage", GOOD + 'storage: "s3://AKIAHOSTILE:hostilesecret@bucket/x"\n', "storage",
         "carries credentials (user:secret@): a spec file is shared", at="storage:", argv=["run", "{spec}"]),
    Case("keys in a checkpoint source", in_section("finetuning", 'checkpoints: [{name: x, source: '
                                                                 '"gs://u:p@bucket/m"}]'),
         "finetuning.checkpoints[0].source", "carries credentials", at="checkpoints:"),
    Case("--storage with credentials and no bucket", GOOD, "--storage", "names no bucket",
         argv=["run", "{spec}", "--storage", "s3://KEY:SECRET@/x"], where="command line"),
    Case("an empty --storage", GOOD, "--storage", "must not be empty", argv=["run", "{spec}", "--storage", ""],
         where="command line"),
    # --- names: no control or format character, C1 and bidi included (#29) -----------------------
    Case("a NEL (U+0085) in the study name", change("study: smoke", 'study: "a\\x85b"'), "study", "U+0085",
         at="study:"),
    Case("a CSI (U+009B) in the study name", change("study: smoke", 'study: "a\\x9b31mb"'), "study",
         "control characters", at="study:", argv=["plan", "{spec}"]),
    Case("a right-to-left override in the study name", change("study: smoke", 'study: "report\\u202Egpj.exe"'),
         "study", "U+202E", at="study:"),
    Case("a zero-width space in a checkpoint name",
         in_section("finetuning", 'checkpoints: [{name: "bert\\u200Bbase", source: hf:org/model}]'),
         "finetuning.checkpoints[0].name", "U+200B", at="checkpoints:"),
    Case("a C1 control in the W&B project", GOOD + 'tracking: {project: "p\\x85q"}\n', "tracking.project",
         "control characters", at="tracking:"),
    # --- resource layouts no cluster runs as written (#28) ----------------------------------------
    Case("half a GPU per worker of a two-worker run", resources("pretraining_workers: 2", "gpus_per_worker: 0.5"),
         "resources.gpus_per_worker", "Duplicate GPU detected", at="gpus_per_worker"),
    Case("two GPUs per pretraining worker", resources("pretraining_workers: 2", "gpus_per_worker: 2"),
         "resources.gpus_per_worker", "a pretraining worker trains on one", at="gpus_per_worker",
         argv=["plan", "{spec}"]),
    Case("two GPUs per trial", resources("pretraining_workers: 0", "gpus_per_trial: 2"),
         "resources.gpus_per_trial", "a trial trains on one", at="gpus_per_trial"),
    Case("a worker with neither CPU nor GPU", change("  cpus_per_worker: 1 ", "  cpus_per_worker: 0 "),
         "resources.cpus_per_worker", "needs some CPU or GPU", at="cpus_per_worker"),
    Case("a GPU share below Ray's granularity", resources("pretraining_workers: 0", "gpus_per_trial: 0.00001"),
         "resources.gpus_per_trial", "below the smallest amount Ray schedules", at="gpus_per_trial"),
    Case("a CPU share below Ray's granularity", change("  cpus_per_trial: 1 ", "  cpus_per_trial: 0.00005 "),
         "resources.cpus_per_trial", "below the smallest amount Ray schedules", at="cpus_per_trial"),
    Case("GPU memory without GPUs", resources("pretraining_workers: 0", "gpu_memory_gb: 40"),
         "resources.gpu_memory_gb", "no worker or trial uses a GPU", at="gpu_memory_gb"),
    # --- other ways in: a planted study copy, a spec that is not a file ---------------------------
    Case("status of a study whose spec is an alias bomb", bomb(9) + GOOD, "l0", "unknown key", at="l0:",
         argv=["status", "{folder}"]),
    Case("status of a study whose spec nests 5,000 deep", "study: " + "[" * 5000 + "]" * 5000 + "\n", "",
         "nested deeper than 64 levels", argv=["status", "{folder}"]),
    Case("plan of a 2 MB spec", GOOD + ("#" * 100 + "\n") * 20_000, "", "larger than 1,024 KiB",
         argv=["plan", "{spec}"]),
    Case("a folder as the spec", "", "", "cannot read the file", argv=["run", "{folder}"]),
]


def line_of(content: str | bytes, text: str) -> int:
    data = content if isinstance(content, str) else content.decode("latin-1")
    return next(i for i, line in enumerate(data.splitlines(), 1) if text in line and not line.startswith("#"))


@pytest.mark.long  # every hostile spec in one fresh interpreter: 6-9 s
def test_every_hostile_spec_exits_2_quickly_small_and_without_ray(tmp_path):
    """All cases through the real CLI in one fresh interpreter: status 2, the file (line, key)
    and the reason on stderr, no traceback, < 5 CPU-s and < 500 MB each, Ray never imported."""
    assert len(CASES) >= 133  # 103 before #29, 30 added by it (the plan bombs: tests/unit/plan/test_plan_limits.py)
    runs = []
    for index, case in enumerate(CASES):
        folder = tmp_path / f"case_{index:03d}"
        folder.mkdir()
        spec = folder / "spec.yaml"  # the name a study folder's copy has (for `sweeper status`)
        spec.write_bytes(case.content if isinstance(case.content, bytes) else case.content.encode())
        names = {"spec": str(spec), "folder": str(folder), "study": str(tmp_path / "study"), "tmp": str(tmp_path)}
        runs.append([arg.format(**names) for arg in case.argv])
    code = textwrap.dedent(f"""
        import contextlib, io, json, sys, time, traceback
        from sweeper.cli import main
        outcomes = []
        for argv in {runs!r}:
            err, out = io.StringIO(), io.StringIO()
            start = time.process_time()
            try:
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                    status = main(argv)
            except BaseException:
                status, err = "raised", io.StringIO(err.getvalue() + traceback.format_exc())
            seconds = time.process_time() - start
            # VmHWM: this interpreter's own peak. (ru_maxrss would carry over the peak of the
            # process it was forked from: the pytest process, hundreds of MB into the suite.)
            peak_mb = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024
            outcomes.append({{"status": status, "stderr": err.getvalue()[-3000:], "seconds": seconds,
                              "peak_mb": peak_mb}})
        print(json.dumps({{"outcomes": outcomes, "ray_imported": "ray" in sys.modules}}))
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert not report["ray_imported"], "Ray was imported for a bad spec"
    assert not (tmp_path / "study").exists(), "a study folder was created for a bad spec"
    problems = []
    for index, (case, outcome) in enumerate(zip(CASES, report["outcomes"])):
        stderr, spec = outcome["stderr"], str(tmp_path / f"case_{index:03d}" / "spec.yaml")
        place = case.where or (spec if "{folder}" not in case.argv[-1] or case.argv[0] == "status"
                               else str(tmp_path / f"case_{index:03d}"))
        if case.at is not None:
            place = f"{place}:{line_of(case.content, case.at)}:"
        expected = [place, case.reason, *([case.key] if case.key else [])]
        missing = [text for text in expected if text not in stderr]
        if outcome["status"] != 2 or missing or "Traceback" in stderr:
            problems.append(f"{case.name}: exit {outcome['status']}, missing {missing}: {stderr.strip()[:600]}")
        if outcome["seconds"] > SECONDS or outcome["peak_mb"] > MEGABYTES:
            problems.append(f"{case.name}: {outcome['seconds']:.1f} CPU-s, peak RSS {outcome['peak_mb']:.0f} MB")
    assert not problems, "\n".join(problems)
