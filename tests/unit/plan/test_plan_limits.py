"""Plans without a bound (#29): specs of a few hundred bytes that multiply grids into 10^9 runs,
ask for 10^12 samples or give a batch of 2^40. Each goes through the real CLI in a child process
under a 2 GiB address-space limit (`sweeper plan search_spaces/micro.yaml` plans under it: checked
first) and must exit 2, with no traceback, naming the count and the key that raises the bound.
The child is given 10 s of CPU: a plan that expands what it should have counted would run past it
or raise MemoryError. The counts themselves (sweeper.spec.limits) must equal the shipped plans'
sizes, and a spec that raises a limit plans what the default refuses.
"""
from __future__ import annotations

import math
import random
import resource
import subprocess
from dataclasses import dataclass, field

import pytest

from cli_process import sweeper_cli
from conftest import ROOT, SMOKE_SPEC
from sweeper.plan.divisors import divisors, largest_fitting, prime_factors
from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study
from sweeper.spec import limits
from sweeper.spec.parsing import build_dataclass
from sweeper.spec.reading import load_yaml
from sweeper.spec.study import StudySpec

ADDRESS_SPACE = 2 << 30
"""Bytes of address space the child may map: the Python imports of `sweeper plan` take ~0.5 GB."""
CPU_SECONDS = 10
"""CPU time the child may use (the kernel stops it past that): 10 s of work whatever the machine's
load, where a wall-clock bound would fail on a busy test machine."""
WALL_SECONDS = 120
"""Only a guard against a child that sleeps: CPU_SECONDS is the bound."""


LIMITS = {resource.RLIMIT_AS: ADDRESS_SPACE, resource.RLIMIT_CPU: CPU_SECONDS}
"""The child's resource limits (a plan bomb is stopped by them, not by the machine)."""


def sweeper(*argv: str) -> subprocess.CompletedProcess:
    return sweeper_cli(*argv, limits=LIMITS, timeout=WALL_SECONDS)


def edited(*changes: tuple[str, str]) -> str:
    text = SMOKE_SPEC
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


def numbers(n: int, start: int = 1) -> str:
    return "[" + ", ".join(str(start + i) for i in range(n)) + "]"


def rates(n: int) -> str:
    return "[" + ", ".join(f"{(i + 1) * 1e-6:.8f}" for i in range(n)) + "]"


@dataclass
class Bomb:
    name: str
    text: str
    key: str
    """The key path the error names (where the count comes from)."""
    says: list[str] = field(default_factory=list)
    """What the message must say besides: the count, the limit to raise."""
    command: str = "plan"


BOMBS = [
    Bomb("1e9 runs from optimizer grids", edited(("    peak_lr: 0.002 ", f"    peak_lr: {rates(40)}\n    "
                                                                         f"eps: {rates(40)}\n"
                                                  f"    weight_decay: {rates(40)}\n    grad_clip: {rates(40)}\n    #")),
         "pretraining.runs[0]", ["7,680,000 pretraining runs", "40 optimizer.peak_lr", "limits.max_runs (1,000)"]),
    Bomb("runs: step budgets x mask ratios x replicates",
         edited(("      mask_ratio: [0.4] ", "      mask_ratio: [0.1, 0.2, 0.3, 0.4, 0.5]\n      steps: "
                                             f"{numbers(1000, 40)}\n"
                                            "      replicates: 1000\n      #"),
                ("checkpoint_steps: [20]", "checkpoint_steps: [2]")),
         "pretraining.runs[0]", ["5,000,002 pretraining runs", "1,000 step budgets x 5 objective shapes x "
                                                               "1,000 replicates",
                                 "limits.max_runs"], command="run"),
    Bomb("1e9 runs from an entry's step, warmup and decay grids",
         edited(("    - objective: clm  ", f"    - objective: clm\n      steps: {numbers(1000, 100_000)}\n"
                                         f"      warmup_steps: {numbers(1000)}\n      decay_steps: "
                                         f"{numbers(1000)}\n    #")),
         "pretraining.runs[1]", ["1,000,000,002 pretraining runs", "1,000 step budgets", "limits.max_runs"]),
    Bomb("1e8 combinations of model overrides",
         edited(("  preset: nano ", f"  preset: nano\n  overrides:\n    num_hidden_layers: {numbers(100)}\n"
                                  f"    intermediate_size: {numbers(100, 64)}\n    rms_norm_eps: {rates(100)}\n"
                                  f"    rope_theta: {numbers(100, 10_000)}\n  #")),
         "model.overrides", ["100,000,000 combinations of model overrides", "limits.max_points"]),
    Bomb("checkpoints: 3,000 checkpoint steps x 4 runs",
         edited(("      mask_ratio: [0.4] ", "      mask_ratio: [0.1, 0.2, 0.3, 0.4]  #"),
                ("  steps: 40 ", "  steps: 4000 #"),
                ("checkpoint_steps: [20]", f"checkpoint_steps: {numbers(3000)}")),
         "pretraining.runs", ["12,006 evaluated checkpoints", "limits.max_checkpoints (10,000)"]),
    Bomb("2.4e12 fine-tuning protocol points",
         edited(("  max_steps: 8 ", f"  max_steps: {numbers(300)}\n  epochs: {numbers(300)}\n  eps: {rates(300)}\n"
                                   f"  weight_decay: {rates(300)}\n  grad_clip: {rates(300)}  #")),
         "finetuning", ["2,430,000,000,000 fine-tuning protocol points", "300 max_steps x 300 epochs",
                        "limits.max_points (10,000)"]),
    Bomb("random.samples 1e12", edited(("  learning_rates: [0.001] ", "  search: random\n  random: {samples: "
                                                                      "1000000000000}\n  #")),
         "finetuning.random.samples", ["1,000,000,000,000 samples per cell", "limits.max_samples"], command="run"),
    Bomb("optuna.samples 1e12", edited(("  learning_rates: [0.001] ", "  search: optuna\n  optuna: {samples: "
                                                                      "1000000000000}\n  #")),
         "finetuning.optuna.samples", ["1,000,000,000,000 samples per cell", "limits.max_samples"]),
    Bomb("4,000 learning rates x 4,000 seeds",
         edited(("  learning_rates: [0.001] ", f"  learning_rates: {rates(4000)}  #"),
                ("  seeds: [0, 1] ", f"  seeds: {numbers(4000, 0)} #")),
         "finetuning",
         ["320,000,000 fine-tuning trials", "4,000 learning rates x 4,000 seeds", "limits.max_trials (200,000)"],
         command="run"),
    Bomb("eval_every 1 over 1e12 steps",
         edited(("  max_steps: 8 ", "  max_steps: 1000000000000\n  eval_every: 1\n  #")),
         "finetuning.eval_every", ["1,000,000,000,000 validation points per trial", "limits.max_curve_points"]),
    # The memory refusals' searches: a 2^40 batch's divisors, 1e12 fine-tuning micro batches.
    Bomb("pretraining micro batch search over a 2^40 batch",
         edited(("  global_batch_size: 8 ", "  global_batch_size: 1099511627776\n  micro_batch_size: 1099511627776 #"),
                ("  cpus_per_trial: 1 ", "  gpus_per_worker: 1\n  gpu_memory_gb: 2\n  cpus_per_trial: 1 ")),
         "", ["micro batch 1099511627776", "pretraining.micro_batch_size: 512 "], command="run"),
    Bomb("fine-tuning micro batch search over a 1e12 batch",
         edited(("  batch_size: 16 ", "  batch_size: 1000000000000 #"),
                ("  micro_batch_size: 16 ", "  micro_batch_size: 1000000000000 #"),
                ("  cpus_per_trial: 1 ", "  gpus_per_trial: 0.1\n  gpu_memory_gb: 2\n  cpus_per_trial: 1 ")),
         "", ["finetuning.micro_batch_size 1000000000000", "resources.gpus_per_trial: 1 + "
                                                           "finetuning.micro_batch_size: 800"]),
]


def test_a_normal_plan_fits_the_address_space_limit():
    result = sweeper("plan", "search_spaces/micro.yaml")
    assert result.returncode == 0, result.stderr
    assert "fine-tuning trials:     340 " in result.stdout and "result rows:            425 = " in result.stdout


@pytest.mark.parametrize("bomb", BOMBS, ids=[bomb.name for bomb in BOMBS])
def test_a_plan_bomb_exits_2_naming_the_count_and_the_key(bomb: Bomb, tmp_path):
    spec, study = tmp_path / "bomb.yaml", tmp_path / "study"
    spec.write_text(bomb.text)
    assert len(bomb.text) < 100_000  # a few KB of YAML (4,000 learning rates: 74 KB)
    argv = ["plan", str(spec)] if bomb.command == "plan" else ["run", str(spec), "--storage", str(study)]
    result = sweeper(*argv)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "MemoryError" not in result.stderr, result.stderr[-2000:]
    if bomb.key:
        assert "bomb.yaml:" in result.stderr and f": {bomb.key}: plans " in result.stderr, result.stderr
    for words in bomb.says:
        assert words in result.stderr, result.stderr
    assert not study.exists()  # `sweeper run` refused before making anything


@pytest.mark.slow  # plans 1,001 runs, then 10,001 samples (the defaults + 1): 13 s of the quick tier alone
def test_raising_a_limit_plans_what_the_default_refuses(tmp_path):
    spec = tmp_path / "large.yaml"
    # 1,001 runs, one more than limits.max_runs' default: 999 step budgets of one entry + 2 runs.
    # Each has its final checkpoint alone and one trial.
    text = edited(("  steps: 40 ", "  steps: 40 #"),
                  ("      checkpoint_steps: [20] ", f"      steps: {numbers(999, 40)}\n      #"),
                  ("    [wordnet-supersense-cls, wordnet-supersense-tag, wordnet-supersense-qa, "
                   "wordnet-usage-retrieval,\n"
                   "     wordnet-definition-retrieval]", "    [wordnet-supersense-cls]"),
                  ("  seeds: [0, 1] ", "  seeds: [0] #"))
    spec.write_text(text)
    refused = sweeper("plan", str(spec))
    assert refused.returncode == 2 and "plans 1,001 pretraining runs" in refused.stderr, refused.stderr
    spec.write_text(text + "limits:\n  max_runs: 1001\n")
    planned = sweeper("plan", str(spec))
    assert planned.returncode == 0, planned.stderr
    assert "pretraining runs:       1001" in planned.stdout and "fine-tuning trials:     1,001 " in planned.stdout
    # 10,001 samples per cell, one more than limits.max_samples' default.
    sampled = edited(("  learning_rates: [0.001] ", "  search: random\n  random: {samples: 10001}\n  #"),
                     ("    - objective: clm  ", "    #"), ("    - objective: clm-mlm", "    #"),
                     ("      clm_fraction: [0.5] ", "      #"), ("      checkpoint_steps: [20] ", "      #"),
                     ("    [wordnet-supersense-cls, wordnet-supersense-tag, wordnet-supersense-qa, "
                      "wordnet-usage-retrieval,\n"
                      "     wordnet-definition-retrieval]", "    [wordnet-supersense-cls]"),
                     ("  seeds: [0, 1] ", "  seeds: [0] #"))
    spec.write_text(sampled)
    assert sweeper("plan", str(spec)).returncode == 2
    spec.write_text(sampled + "limits: {max_samples: 10001}\n")
    planned = sweeper("plan", str(spec))
    assert planned.returncode == 0, planned.stderr
    assert "fine-tuning trials:     10,001 = 1 checkpoints x 1 datasets x 10001 random samples" in planned.stdout


def test_raising_max_trials_passes_the_check_at_20_more_than_the_default(tmp_path):
    """200,020 trials = 4 checkpoints x 5 datasets x 73 learning rates x 137 seeds: refused by
    default; accepted with limits.max_trials raised: the spec parses with every check of its own
    passed, the size check among them. Planning 200,020 trials takes `load_study` 12 s, so the
    test stops before the plan."""
    spec = tmp_path / "trials.yaml"
    text = edited(("  learning_rates: [0.001] ", f"  learning_rates: {rates(73)}  #"),
                  ("  seeds: [0, 1] ", f"  seeds: {numbers(137, 0)} #"))
    spec.write_text(text)
    refused = sweeper("plan", str(spec))
    assert refused.returncode == 2 and "plans 200,020 fine-tuning trials" in refused.stderr, refused.stderr
    spec.write_text(text + "limits: {max_trials: 200020}\n")
    data, context = load_yaml(spec)
    parsed = build_dataclass(StudySpec, data, "", context)
    assert not context.errors, [str(error) for error in context.errors]
    assert parsed.limits.max_trials == 200_020 and not list(limits.size_problems(parsed))


def test_a_spec_may_not_set_a_limit_to_nothing(tmp_path):
    spec = tmp_path / "zero.yaml"
    spec.write_text(SMOKE_SPEC + "limits: {max_trials: 0}\n")
    result = sweeper("plan", str(spec))
    assert result.returncode == 2 and "limits.max_trials: must be positive, got 0" in result.stderr, result.stderr


@pytest.mark.parametrize("name", ["micro", "smoke", "search", "paper"])
def test_the_counts_are_the_sizes_of_the_shipped_plans(name):
    """What the limits are checked against is what the plan holds: exactly, but for paper.yaml,
    whose entries plan two runs twice (counted per entry, planned once)."""
    spec = load_study(ROOT / "search_spaces" / f"{name}.yaml").spec
    plan = plan_study(spec)
    runs = sum(limits.entry_runs(spec, i, entry).total for i, entry in enumerate(spec.pretraining.runs))
    assert runs == len(plan.runs) + (2 if name == "paper" else 0)
    ft = spec.finetuning
    per_cell = {"grid": len(ft.learning_rates) * limits.protocol_points(spec).total, "random": ft.random.samples,
                "optuna": ft.optuna.samples_per_cell}[ft.search]
    assert len(plan.checkpoints) * len(ft.tasks) * per_cell * len(ft.seeds) == len(plan.trials)
    assert list(limits.size_problems(spec)) == []


def test_divisors_come_from_the_factors_in_bounded_steps():
    for n in range(1, 2000):
        assert divisors(n) == [m for m in range(1, n + 1) if n % m == 0]
    rng = random.Random(0)
    hard = [2**40, 10**12, 2**63 - 25, 4_294_967_291 * 4_294_967_279, 4_294_967_291**2, 897_612_484_786_617_600]
    for n in hard + [rng.randrange(1, 2**63) for _ in range(50)]:
        factors = prime_factors(n)
        assert math.prod(p**e for p, e in factors.items()) == n
    assert len(divisors(2**40)) == 41 and len(divisors(897_612_484_786_617_600)) == 103_680
    assert largest_fitting(divisors(2**40), lambda m: m <= 1000) == 512
    assert largest_fitting(divisors(12), lambda m: False) is None
    assert largest_fitting(divisors(12), lambda m: True) == 12
