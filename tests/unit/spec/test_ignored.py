"""Nothing ignored in silence: a setting the spec's mode does not read is a spec error naming the
key and what would read it (`sweeper.spec.ignored`), through `sweeper plan` (no Ray started);
and the defaults a spec leaves out cannot contradict each other (doc_stride from max_length,
warmup and decay from steps, CPU budgets for CPU presets), keeping the former fixed defaults
wherever they fitted (the keys of specs that planned before stay)."""
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_process import sweeper_cli

from sweeper.plan.load import load_study


BASE = textwrap.dedent("""\
    study: ignored
    model: {preset: nano}
    data: {vocab_size: 1024, seq_len: 64, max_documents: 200}
    pretraining:
      steps: 40
      global_batch_size: 8
      runs:
        - {objective: mlm}
        - {objective: clm}
    finetuning:
      tasks: [wordnet-supersense-cls]
      seeds: [0]
      max_steps: 8
      max_length: 48
      eval_every: 4
    """)


@dataclass(frozen=True)
class Ignored:
    name: str
    edits: tuple[tuple[str, str], ...]
    key: str
    words: str
    """What the reason must say: the mode, objective or section that would read the key."""
    warns: bool = False
    """Harmless (a task family's setting with no task of the family, FSDP tried locally): a warning, exit 0."""


def at(old: str, new: str) -> tuple[str, str]:
    return old, new


SEARCH = at("  eval_every: 4\n", "  eval_every: 4\n  search: {mode}\n")
CASES = [
    Ignored("optuna section in grid mode", (at("  seeds: [0]\n", "  seeds: [0]\n  optuna: {samples: 8}\n"),),
            "finetuning.optuna", "search: optuna"),
    Ignored("empty optuna section in grid mode", (at("  seeds: [0]\n", "  seeds: [0]\n  optuna: {}\n"),),
            "finetuning.optuna", "search: grid"),
    Ignored("random section in grid mode", (at("  seeds: [0]\n", "  seeds: [0]\n  random: {samples: 4}\n"),),
            "finetuning.random", "search: random"),
    Ignored("random section in optuna mode", (at("  seeds: [0]\n", "  seeds: [0]\n  search: optuna\n  "
                                                                   "random: {seed: 3}\n"),),
            "finetuning.random", "search: optuna"),
    Ignored("optuna section in random mode", (at("  seeds: [0]\n", "  seeds: [0]\n  search: random\n  "
                                                                   "optuna: {seed: 3}\n"),),
            "finetuning.optuna", "search: random"),
    Ignored("learning rates in optuna mode",
            (at("  seeds: [0]\n", "  seeds: [0]\n  search: optuna\n  learning_rates: [1.0e-3, 3.0e-3]\n"),),
            "finetuning.learning_rates", "search: grid"),
    Ignored("the paper's learning rates written out in random mode", (at(
        "  seeds: [0]\n",
        "  seeds: [0]\n  search: random\n  learning_rates: [1.0e-5, 2.0e-5, 5.0e-5, 1.0e-4, 2.0e-4, 5.0e-4]\n"),),
            "finetuning.learning_rates", "random.lr_min"),
    Ignored("scheduler settings without a scheduler",
            (at("  seeds: [0]\n", "  seeds: [0]\n  search: optuna\n  scheduler: {grace_period: 3}\n"),),
            "finetuning.scheduler.grace_period", "asha or median"),
    Ignored("ASHA's reduction factor with median stopping",
            (at("  seeds: [0]\n", "  seeds: [0]\n  search: optuna\n  scheduler: {kind: median, "
                                  "reduction_factor: 4}\n"),),
            "finetuning.scheduler.reduction_factor", "asha"),
    Ignored("median stopping's sample count with ASHA",
            (at("  seeds: [0]\n", "  seeds: [0]\n  search: random\n  scheduler: {kind: asha, "
                                  "min_samples_required: 5}\n"),),
            "finetuning.scheduler.min_samples_required", "median"),
    Ignored("a scheduler in grid mode", (at("  seeds: [0]\n", "  seeds: [0]\n  scheduler: {kind: asha}\n"),),
            "finetuning.scheduler.kind", "search: optuna or random"),
    Ignored("doc_stride without a QA task", (at("  max_length: 48\n", "  max_length: 48\n  doc_stride: 8\n"),),
            "finetuning.doc_stride", "extractive_qa", warns=True),
    Ignored("retrieval temperature without a retrieval task",
            (at("  max_length: 48\n", "  max_length: 48\n  retrieval_temperature: 0.1\n"),),
            "finetuning.retrieval_temperature", "retrieval", warns=True),
    Ignored("mask ratio on a CLM run", (at("{objective: clm}", "{objective: clm, mask_ratio: [0.3]}"),),
            "pretraining.runs[1].mask_ratio", "mlm and clm-mlm"),
    Ignored("mask ratio at its default on a CLM run", (at("{objective: clm}", "{objective: clm, mask_ratio: [0.4]}"),),
            "pretraining.runs[1].mask_ratio", "masks nothing"),
    Ignored("CLM share on an MLM run", (at("{objective: mlm}", "{objective: mlm, clm_fraction: [0.5]}"),),
            "pretraining.runs[0].clm_fraction", "clm-mlm"),
    Ignored("short-form mask ratio beside phases", (at(
        "{objective: mlm}", "{phases: [{objective: clm, until: 0.5}, {objective: mlm}], mask_ratio: [0.3]}"),),
            "pretraining.runs[0].mask_ratio", "each phase gives its own"),
    Ignored("MLM token shares without an MLM run", (at("{objective: mlm}", "{objective: clm, preset: [tiny]}"),
                                                    at("  steps: 40\n", "  steps: 40\n  random_replace: 0.1\n")),
            "pretraining.random_replace", "MLM"),
    Ignored("clm_fraction_of without a switching run", (at("  steps: 40\n", "  steps: 40\n  "
                                                                            "clm_fraction_of: pre_decay\n"),),
            "pretraining.clm_fraction_of", "clm-mlm"),
    Ignored("resume checkpoints kept where none is saved",
            (at("  steps: 40\n", "  steps: 40\n  save_every: 0\n  keep_resume_checkpoints: 3\n"),),
            "pretraining.keep_resume_checkpoints", "save_every: 0"),
    Ignored("FSDP without a worker group", (at("study: ignored\n", "study: ignored\nresources: {sharding: fsdp}\n"),),
            "resources.sharding", "pretraining_workers: 0", warns=True),
    Ignored("tokenizer sample size with a hub tokenizer",
            (at("data: {vocab_size: 1024,", "data: {tokenizer: bert-base-uncased, tokenizer_sample_documents: 10, "
                                            "vocab_size: 1024,"),),
            "data.tokenizer_sample_documents", "train-wordpiece"),
    Ignored("a reserved mask token with the tokenizer trained here",
            (at("data: {vocab_size: 1024,", "data: {mask_token: reserved, vocab_size: 1024,"),),
            "data.mask_token", "train-wordpiece"),
    Ignored("a W&B project with tracking off", (at("study: ignored\n", "study: ignored\ntracking: {project: mine}\n"),),
            "tracking.project", "wandb: false"),
    Ignored("a model section in a study that trains nothing", (
        at("pretraining:\n  steps: 40\n  global_batch_size: 8\n  runs:\n    - {objective: mlm}\n    - "
           "{objective: clm}\n", ""),
        at("  seeds: [0]\n", "  seeds: [0]\n  checkpoints: [{name: other, source: ./no-such-folder}]\n")),
            "model", "trains no pretraining runs"),
]


def spec_text(case: Ignored) -> str:
    text = BASE
    for old, new in case.edits:
        assert old in text, (case.name, old)
        text = text.replace(old, new, 1)
    return text


def plan(path: Path) -> subprocess.CompletedProcess:
    return sweeper_cli("plan", str(path), timeout=120)


def test_the_base_spec_plans(tmp_path):
    path = tmp_path / "base.yaml"
    path.write_text(BASE)
    result = plan(path)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_a_setting_its_mode_ignores_is_a_spec_error_or_a_warning_naming_it(case, tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(spec_text(case))
    result = plan(path)
    assert result.returncode == (0 if case.warns else 2), (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    line = next(line for line in result.stderr.splitlines() if f": {case.key}: " in line)
    assert line.startswith(f"warning: {path}:" if case.warns else f"spec error: {path}:"), line
    assert case.words in line, line


def test_the_corpus_covers_at_least_ten_keys():
    assert len({case.key for case in CASES}) >= 10


def loaded(tmp_path, text: str):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return load_study(path).spec


def test_settings_written_at_their_harmless_defaults_plan(tmp_path):
    """An explicit `scheduler: {kind: none}`, a limit, a mode's own section: read or harmless."""
    text = BASE.replace("  seeds: [0]\n", "  seeds: [0]\n  scheduler: {kind: none}\n  search: optuna\n"
                                          "  optuna: {samples: 3}\n")
    spec = loaded(tmp_path, text + "limits: {max_samples: 100}\n")
    assert spec.finetuning.optuna.samples == 3


@pytest.mark.parametrize("max_length,stride", [(48, 12), (128, 32), (256, 64), (258, 128), (384, 128), (2027, 128)])
def test_doc_stride_follows_max_length_unless_set(tmp_path, max_length, stride):
    text = BASE.replace("[wordnet-supersense-cls]", "[wordnet-supersense-qa]").replace("max_length: 48",
                                                                                      f"max_length: {max_length}")
    assert loaded(tmp_path, text).finetuning.doc_stride == stride
    given = loaded(tmp_path, text.replace("  max_length:", "  doc_stride: 5\n  max_length:"))
    assert given.finetuning.doc_stride == 5


def test_a_swept_max_length_derives_one_stride_that_fits_every_value(tmp_path):
    text = BASE.replace("[wordnet-supersense-cls]", "[wordnet-supersense-qa]").replace("max_length: 48",
                                                                                      "max_length: [256, 64]")
    ft = loaded(tmp_path, text).finetuning
    assert ft.doc_stride == 16 and all(ft.at(point).doc_stride == 16 for point in ft.points())


@pytest.mark.parametrize("preset,steps,batch,schedule", [("tiny", 600, 16, 30), ("mini", 600, 16, 30),
                                                          ("610m", 42_000, 2304, 2000)])
def test_budget_defaults_follow_the_scale_of_the_presets(tmp_path, preset, steps, batch, schedule):
    text = (f"study: scale\nmodel: {{preset: {preset}}}\npretraining: {{runs: [{{objective: mlm}}]}}\n"
            "finetuning: {tasks: [wordnet-supersense-cls]}\n")
    pre = loaded(tmp_path, text).pretraining
    assert (pre.steps, pre.global_batch_size, pre.warmup_steps, pre.decay_steps) == (steps, batch, schedule, schedule)


def test_a_short_budget_derives_a_schedule_that_fits_it(tmp_path):
    pre = loaded(tmp_path, BASE.replace("  global_batch_size: 8\n", "")).pretraining
    assert (pre.warmup_steps, pre.decay_steps) == (2, 2) and pre.global_batch_size == 16


def test_a_budget_the_former_defaults_fit_keeps_them(tmp_path):
    """The paper's 2,000 + 2,000 wherever they fit: a spec that planned before keeps its run keys."""
    pre = loaded(tmp_path, BASE.replace("  steps: 40\n", "  steps: 4000\n")).pretraining
    assert (pre.warmup_steps, pre.decay_steps) == (2000, 2000)
    pre = loaded(tmp_path, BASE.replace("  steps: 40\n", "  steps: 3999\n")).pretraining
    assert (pre.warmup_steps, pre.decay_steps) == (199, 199)


def test_a_schedule_too_long_for_a_budget_names_the_keys_to_set(tmp_path):
    result = plan_text(tmp_path, BASE.replace("  steps: 40\n", "  steps: 40\n  warmup_steps: 30\n  decay_steps: 30\n"))
    assert result.returncode == 2
    assert "pretraining.runs[0].steps: budget 40 is shorter than warmup + decay steps (30 + 30)" in result.stderr
    assert "set pretraining.warmup_steps and pretraining.decay_steps" in result.stderr


def plan_text(tmp_path, text: str) -> subprocess.CompletedProcess:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return plan(path)
