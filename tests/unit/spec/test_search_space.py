"""Sweeping run fields and Ray Tune's search-space forms in the YAML (issue #17, first slice).

Pretraining: any run field given as a grid (a YAML list or `{grid_search: [...]}`) expands to
runs, named with the values that differ from the field's base (sweeper.plan.runs); a distribution
there is a spec error. Fine-tuning protocol fields take Tune's vocabulary, each form checked
(arity, types, bounds, lo < hi, loguniform lo > 0) with exit 2, the file, line and key path, and
no Ray. Unswept specs keep their runs, names and keys (tests/unit/plan/test_pinned_keys.py pins them).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sweeper.plan.load import load_study
from sweeper.plan.run_names import short_number
from sweeper.plan.study_plan import plan_study
from sweeper.spec.parsing import Distribution, Grid
from sweeper.spec.reading import SpecError

from cli_process import sweeper_cli

ROOT = Path(__file__).resolve().parents[3]
SMOKE = (ROOT / "search_spaces" / "smoke.yaml").read_text()


def smoke_with(*changes) -> str:
    """smoke.yaml with each (old, new) replaced once; a change may also be a tuple of such pairs."""
    text = SMOKE
    pairs = [pair for change in changes for pair in (change if isinstance(change[0], tuple) else [change])]
    for old, new in pairs:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


def write(tmp_path: Path, text: str, name: str = "sweep.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def plan_cli(path: Path) -> subprocess.CompletedProcess:
    return sweeper_cli("plan", "-v", str(path), timeout=120)


def planned_names(stdout: str) -> list[str]:
    runs = stdout.split("  runs:\n", 1)[1]
    return re.findall(r"^    (\S+)  \(", runs, flags=re.MULTILINE)


# --- pretraining ablation axes -----------------------------------------------------------------

PEAK_LR_GRID = smoke_with(("    peak_lr: 0.002", "    peak_lr: [0.002, 0.001, 5.0e-4]   # peak-LR search"))


def test_plan_of_a_pretraining_peak_lr_grid_prints_counts_and_names(tmp_path):
    result = plan_cli(write(tmp_path, PEAK_LR_GRID))
    assert result.returncode == 0, result.stderr
    assert re.search(r"pretraining runs:\s+9\n", result.stdout)
    assert re.search(r"evaluated checkpoints:\s+12 \(9 final \+ 3 intermediate\)", result.stdout)
    assert re.search(r"result rows:\s+120 = 12 checkpoints", result.stdout)
    assert planned_names(result.stdout) == [
        "nano-mlm40-40", "nano-mlm40-40-lr1e-3", "nano-mlm40-40-lr5e-4",
        "nano-clm-40", "nano-clm-40-lr1e-3", "nano-clm-40-lr5e-4",
        "nano-clm-20-mlm40-40", "nano-clm-20-mlm40-40-lr1e-3", "nano-clm-20-mlm40-40-lr5e-4"]


def test_plan_of_a_depth_ablation_prints_counts_and_names(tmp_path):
    """nano has 2 layers: the 2-layer runs are the preset's own, named as before."""
    spec = smoke_with(("  preset: nano ", "  preset: nano\n  overrides: {num_hidden_layers: [2, 4, 6]}  # depth\n "))
    result = plan_cli(write(tmp_path, spec))
    assert result.returncode == 0, result.stderr
    assert re.search(r"pretraining runs:\s+9\n", result.stdout)
    names = planned_names(result.stdout)
    assert names[:3] == ["nano-mlm40-40", "nano-mlm40-40-layers4", "nano-mlm40-40-layers6"]
    plan = plan_study(load_study(write(tmp_path, spec)).spec)
    depth = {run.name: run.model_config["num_hidden_layers"] for run in plan.runs}
    assert depth["nano-clm-40"] == 2 and depth["nano-clm-40-layers4"] == 4 and depth["nano-clm-40-layers6"] == 6
    assert {run.params["model.num_hidden_layers"] for run in plan.runs} == {2, 4, 6}


def test_a_grid_expands_every_entry_as_a_product_and_runs_carry_their_values(tmp_path):
    spec = smoke_with(("    peak_lr: 0.002", "    peak_lr: {grid_search: [0.002, 0.004]}\n    "
                                             "weight_decay: [0.1, 0.0]"),
                      ("  global_batch_size: 8 ", "  global_batch_size: [8, 16] "),
                      ("  seq_len: 64 ", "  seq_len: [64, 32] "),
                      ("  warmup_steps: 4 ", "  warmup_steps: [4, 2] "))
    plan = plan_study(load_study(write(tmp_path, spec)).spec)
    assert len(plan.runs) == 3 * 2 ** 5
    assert len({run.name for run in plan.runs}) == len({run.run_key for run in plan.runs}) == len(plan.runs)
    run = next(r for r in plan.runs if r.name == "nano-mlm40-40-seq32-bs16-lr4e-3-wd0-warmup2")
    assert (run.seq_len, run.global_batch_size, run.peak_lr, run.optimizer.weight_decay, run.warmup_steps) \
        == (32, 16, 0.004, 0.0, 2)
    assert run.params == {"seq_len": 32, "global_batch_size": 16, "optimizer.peak_lr": 0.004,
                          "optimizer.weight_decay": 0.0, "warmup_steps": 2}
    # Tokens follow the run's own batch and length; the key hashes them.
    final = next(c for c in plan.checkpoints if c.checkpoint_id == run.name)
    assert final.tokens_seen == 40 * 16 * 32
    assert run.identity["global_batch_size"] == 16 and run.identity["data"]["seq_len"] == 32
    assert run.identity["optimizer"]["peak_lr"] == 0.004


def test_the_worker_config_trains_with_the_runs_values(tmp_path):
    from sweeper.run.train_grid import pretrain_config
    from sweeper.store.layout import StudyLayout

    plan = plan_study(load_study(write(tmp_path, PEAK_LR_GRID)).spec)
    runs = {run.name: run for run in plan.runs}
    config = pretrain_config(runs["nano-clm-40-lr5e-4"], load_study(write(tmp_path, PEAK_LR_GRID)).spec,
                             StudyLayout(str(tmp_path / "study")), str(tmp_path / "corpus"), runs)
    assert config.peak_lr == 5e-4 and config.global_batch_size == 8 and config.seq_len == 64


def test_sweeping_a_field_from_its_current_value_keeps_the_planned_runs(tmp_path):
    """Adding values after the current one adds runs; the runs planned before keep their names
    and keys (so their folders and results), whatever field is swept."""
    before = {run.name: run.run_key for run in plan_study(load_study(write(tmp_path, SMOKE, "a.yaml")).spec).runs}
    for changed in [("    peak_lr: 0.002", "    peak_lr: [0.002, 0.001]"),
                    ("  global_batch_size: 8 ", "  global_batch_size: {grid_search: [8, 16]} "),
                    ("  decay_steps: 8 ", "  decay_steps: [8, 16] "),
                    ("  preset: nano ", "  preset: nano\n  overrides: {num_hidden_layers: [2, 3]}\n ")]:
        after = {
            run.name: run.run_key for run in plan_study(load_study(write(tmp_path, smoke_with(changed))).spec).runs
        }
        assert len(after) == 2 * len(before), changed
        assert {name: after[name] for name in before} == before, changed


def test_a_one_value_list_is_the_value(tmp_path):
    spec = load_study(write(tmp_path, smoke_with(("    peak_lr: 0.002", "    peak_lr: [0.002]")))).spec
    assert spec.pretraining.optimizer.peak_lr == 0.002
    assert [run.name for run in plan_study(spec).runs] == ["nano-mlm40-40", "nano-clm-40", "nano-clm-20-mlm40-40"]


def test_betas_take_a_grid_of_pairs(tmp_path):
    spec = load_study(write(tmp_path, smoke_with(("    peak_lr: 0.002",
                                                 "    peak_lr: 0.002\n    betas: [[0.9, 0.95], [0.9, 0.98]]")))).spec
    assert spec.pretraining.optimizer.betas == Grid(((0.9, 0.95), (0.9, 0.98)))
    names = [run.name for run in plan_study(spec).runs]
    assert names[:2] == ["nano-mlm40-40", "nano-mlm40-40-betas0.9-0.98"]


def test_an_entrys_warmup_grid_expands_that_entry_only(tmp_path):
    spec = smoke_with(("    - objective: clm ", "    - objective: clm\n      warmup_steps: [4, 8]\n     "))
    names = [run.name for run in plan_study(load_study(write(tmp_path, spec)).spec).runs]
    assert names == ["nano-mlm40-40", "nano-clm-40", "nano-clm-40-warmup8", "nano-clm-20-mlm40-40"]


@pytest.mark.parametrize("value,text", [(1e-3, "1e-3"), (5e-4, "5e-4"), (2.5e-5, "2.5e-5"), (0.1, "0.1"),
                                        (0.0, "0"), (512, "512"), (0.95, "0.95"), ((0.9, 0.98), "0.9-0.98")])
def test_name_tags_write_values_short(value, text):
    assert short_number(value) == text


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 3e-3]), min_size=2, max_size=4, unique=True))
def test_a_peak_lr_grid_names_every_run_once_and_the_first_value_plainly(tmp_path_factory, lrs):
    path = tmp_path_factory.mktemp("grid") / "spec.yaml"
    path.write_text(smoke_with(("    peak_lr: 0.002", f"    peak_lr: {json.dumps(lrs)}")))
    runs = plan_study(load_study(path).spec).runs
    assert len({run.name for run in runs}) == len(runs) == 3 * len(lrs)
    assert [run.name for run in runs if run.peak_lr == lrs[0]] == ["nano-mlm40-40", "nano-clm-40",
                                                                    "nano-clm-20-mlm40-40"]


# --- fine-tuning: Tune's vocabulary, validated --------------------------------------------------

def test_every_form_of_tunes_vocabulary_is_read(tmp_path):
    """Each form parses into its typed value (the plan refuses those it cannot run yet)."""
    from sweeper.spec.parsing import convert_space
    from sweeper.spec.reading import Context, LineIndex

    context = Context("x.yaml", LineIndex(""))
    forms = {"{choice: [16, 32]}": Distribution("choice", (16, 32))}
    assert convert_space({"choice": [16, 32]}, int, "finetuning.batch_size", context, True) == forms[
        "{choice: [16, 32]}"]
    assert convert_space({"randint": [8, 64]}, int, "k", context, True) == Distribution("randint", (8, 64))
    for kind, args in [("uniform", [0.0, 0.2]), ("loguniform", [1e-5, 1e-3]), ("quniform", [0.0, 0.2, 0.05]),
                       ("qloguniform", [1e-5, 1e-3, 1e-5])]:
        assert convert_space({kind: args}, float, "k", context, True) == Distribution(kind, tuple(args))
    assert convert_space({"grid_search": [0.0, 0.1]}, float, "k", context, False) == Grid((0.0, 0.1))
    assert convert_space([0.0, 0.1], float, "k", context, False) == Grid((0.0, 0.1))
    assert convert_space("1e-5", float, "k", context, True) == 1e-5


OPTUNA = ("  learning_rates: [0.001] ", "  search: optuna ")  # a search draws the learning rate: no grid of them
RANDOM = ("  learning_rates: [0.001] ", "  search: random ")

MALFORMED_FORMS = [
    # (name, (old, new) in smoke.yaml, key path, reason)
    ("pretraining distribution", ("    peak_lr: 0.002", "    peak_lr: {loguniform: [1.0e-4, 1.0e-2]}"),
     "pretraining.optimizer.peak_lr.loguniform", "only a value or a grid"),
    ("override distribution", ("  preset: nano ", "  preset: nano\n  overrides: {num_hidden_layers: "
                                                  "{randint: [2, 8]}}\n "),
     "model.overrides.num_hidden_layers.randint", "pretraining runs are planned as a grid"),
    ("seq_len choice", ("  seq_len: 64 ", "  seq_len: {choice: [64, 128]} "), "data.seq_len.choice",
     "only a value or a grid"),
    ("negative value in a grid", ("    peak_lr: 0.002", "    peak_lr: [0.002, -1.0]"),
     "pretraining.optimizer.peak_lr[1]", "must be positive"),
    ("value listed twice", ("  global_batch_size: 8 ", "  global_batch_size: [8, 8] "),
     "pretraining.global_batch_size[1]", "listed twice"),
    ("text in an integer grid", ("  global_batch_size: 8 ", "  global_batch_size: {grid_search: [8, x]} "),
     "pretraining.global_batch_size.grid_search[1]", "expected an integer, got a string"),
    ("empty grid_search", ("  global_batch_size: 8 ", "  global_batch_size: {grid_search: []} "),
     "pretraining.global_batch_size.grid_search", "empty grid"),
    ("warmup grid value too long", ("  warmup_steps: 4 ", "  warmup_steps: [4, 40] "),
     "pretraining.warmup_steps[1]", "shorter than warmup + decay"),
    ("grid value not shared by the workers", (("  pretraining_workers: 0", "  pretraining_workers: 4"),
                                               ("  global_batch_size: 8 ", "  global_batch_size: [8, 6] ")),
     "pretraining.global_batch_size", "6 is not divisible by resources.pretraining_workers"),
    ("betas grid out of range", ("    peak_lr: 0.002", "    peak_lr: 0.002\n    betas: [[0.9, 0.95], [0.9, 1.5]]"),
     "pretraining.optimizer.betas[1]", "two numbers in [0, 1)"),
    ("misspelt override in a grid", ("  preset: nano ", "  preset: nano\n  overrides: {num_hiden_layers: [2, 4]}\n "),
     "model.overrides.num_hiden_layers", "did you mean 'num_hidden_layers'"),
    ("override grid of the wrong type", ("  preset: nano ", "  preset: nano\n  overrides: "
                                                            "{num_hidden_layers: [2, 2.5]}\n "),
     "model.overrides.num_hidden_layers[1]", "expected an integer"),
    ("override grid value the encoder cannot build",
     ("  preset: nano ", "  preset: nano\n  overrides: {num_attention_heads: [2, 3]}\n "),
     "model.overrides", "not divisible by num_attention_heads 3"),
    ("unknown form", ("  batch_size: 16 ", "  batch_size: {chioce: [8, 16]} "),
     "finetuning.batch_size.chioce", "unknown form (did you mean 'choice'?)"),
    ("two forms", ("  batch_size: 16 ", "  batch_size: {choice: [8, 16], randint: [1, 4]} "),
     "finetuning.batch_size", "one form per field"),
    ("uniform on an integer field", ("  batch_size: 16 ", "  batch_size: {uniform: [8, 16]} "),
     "finetuning.batch_size.uniform", "use randint or choice"),
    ("randint on a real field", ("  max_steps: 8 ", "  max_steps: 8\n  weight_decay: {randint: [0, 3]} "),
     "finetuning.weight_decay.randint", "use uniform or loguniform"),
    ("wrong arity", ("  max_steps: 8 ", "  max_steps: 8\n  weight_decay: {uniform: [0.0, 0.1, 0.2]} "),
     "finetuning.weight_decay.uniform", "takes 2 numbers [lo, hi], got 3"),
    ("quniform without q", ("  max_steps: 8 ", "  max_steps: 8\n  weight_decay: {quniform: [0.0, 0.1]} "),
     "finetuning.weight_decay.quniform", "takes 3 numbers [lo, hi, q], got 2"),
    ("bounds not a list", ("  max_steps: 8 ", "  max_steps: 8\n  weight_decay: {uniform: 0.1} "),
     "finetuning.weight_decay.uniform", "takes a list [lo, hi]"),
    ("lo >= hi", ("  max_steps: 8 ", "  max_steps: 8\n  weight_decay: {uniform: [0.1, 0.0]} "),
     "finetuning.weight_decay.uniform", "needs lo < hi"),
    ("loguniform from 0", ("  max_steps: 8 ", "  max_steps: 8\n  weight_decay: {loguniform: [0.0, 0.1]} "),
     "finetuning.weight_decay.loguniform[0]", "needs lo > 0"),
    ("qloguniform negative q", ("  max_steps: 8 ", "  max_steps: 8\n  weight_decay: {qloguniform: "
                                                   "[1.0e-3, 0.1, -1.0]} "),
     "finetuning.weight_decay.qloguniform[2]", "q (the step values are rounded to) must be positive"),
    ("range beyond the field's bounds", ("  max_steps: 8 ", "  max_steps: 8\n  weight_decay: {uniform: [-0.1, 0.1]} "),
     "finetuning.weight_decay.uniform[0]", "must not be negative"),
    ("upper bound beyond the field's", ("  max_steps: 8 ", "  max_steps: 8\n  warmup_ratio: {uniform: [0.0, 1.5]} "),
     "finetuning.warmup_ratio.uniform[1]", "outside [0, 1)"),
    ("choice value beyond the field's", ("  max_steps: 8 ", "  max_steps: 8\n  eps: {choice: [1.0e-8, 0.0]} "),
     "finetuning.eps.choice[1]", "must be positive"),
    ("text bound", ("  max_steps: 8 ", "  max_steps: 8\n  weight_decay: {uniform: [0.0, much]} "),
     "finetuning.weight_decay.uniform[1]", "expected a number"),
    ("distribution in grid mode", ("  max_steps: 8 ", "  max_steps: 8\n  weight_decay: {loguniform: [1.0e-3, 0.1]} "),
     "finetuning.weight_decay.loguniform", "search: grid takes a value or a grid"),
    ("randint in grid mode", ("  batch_size: 16 ", "  batch_size: {randint: [8, 33]} "),
     "finetuning.batch_size.randint", "search: grid takes a value or a grid"),
    ("grid in optuna mode", (OPTUNA, ("  max_steps: 8 ", "  max_steps: 8\n  weight_decay: [0.0, 0.1] ")),
     "finetuning.weight_decay", "a grid goes with search: grid; search: optuna samples its points: write "
                                "{choice: [0.0, 0.1]}"),
    ("grid_search in random mode", (RANDOM, ("  max_steps: 8 ", "  max_steps: 8\n  weight_decay: "
                                                                "{grid_search: [0.0, 0.1]} ")),
     "finetuning.weight_decay.grid_search", "a grid goes with search: grid; search: random samples"),
    ("random mode without samples", (("  learning_rates: [0.001] ", "  search: random\n  random: {samples: 0} "),),
     "finetuning.random.samples", "must be positive, got 0"),
    ("optuna samples given twice", (("  learning_rates: [0.001] ", "  search: optuna\n  optuna: {samples: 4, "
                                                                   "learning_rates_per_cell: 6} "),),
     "finetuning.optuna.samples", "give samples or learning_rates_per_cell (its former name), not both"),
    ("random learning-rate range inverted", (("  learning_rates: [0.001] ", "  search: random\n  random: {lr_min: 0.1, "
                                                                           "lr_max: 0.01} "),),
     "finetuning.random.lr_min", "need 0 < lr_min < lr_max"),
    ("unknown search mode", ("  learning_rates: [0.001] ", "  search: bayes\n  learning_rates: [0.001] "),
     "finetuning.search", "'bayes' is not one of 'grid', 'optuna', 'random'"),
    ("range over the data length", (OPTUNA, ("  max_length: 48 ", "  max_length: {randint: [32, 65]} ")),
     "finetuning.max_length.randint", "max_length shapes the tokenised task data"),
    ("range over the QA stride", (RANDOM, ("  doc_stride: 8 ", "  doc_stride: {randint: [4, 9]} ")),
     "finetuning.doc_stride.randint", "doc_stride shapes the tokenised task data"),
    ("q-form on an integer field", (RANDOM, ("  doc_stride: 8 ", "  doc_stride: {quniform: [4, 8, 2]} ")),
     "finetuning.doc_stride.quniform", "quniform draws real numbers"),
    ("uniform over the betas pair", (OPTUNA, ("  max_steps: 8 ", "  max_steps: 8\n  betas: {uniform: [0.9, 0.99]} ")),
     "finetuning.betas.uniform", "use choice over whole values"),
    ("quniform end off the q grid", (OPTUNA, ("  max_steps: 8 ", "  max_steps: 8\n  weight_decay: {quniform: "
                                                                 "[0.01, 0.1, 0.02]} ")),
     "finetuning.weight_decay.quniform[0]", "0.01 is not a multiple of q 0.02"),
    ("choice combination the checks refuse", (OPTUNA, ("  max_length: 48 ", "  max_length: {choice: [48, 32]} "),
                                              ("  doc_stride: 8 ", "  doc_stride: {choice: [8, 20]} ")),
     "finetuning.doc_stride", "with max_length 32, doc_stride 20"),
    ("scheduler without a curve", (RANDOM, ("  max_steps: 8 ", "  max_steps: 8\n  scheduler: {kind: asha}\n ")),
     "finetuning.scheduler.kind", "set eval_every"),
]


@pytest.mark.parametrize("name,change,key,reason", MALFORMED_FORMS, ids=[case[0] for case in MALFORMED_FORMS])
def test_a_malformed_form_names_file_line_key_and_reason(tmp_path, name, change, key, reason):
    path = write(tmp_path, smoke_with(change))
    with pytest.raises(SpecError) as caught:
        _ = load_study(path).spec
    error = caught.value
    assert error.key_path == key and reason in error.reason, str(error)
    assert error.line is not None and f"{path}:{error.line}:" in str(error)
    named = re.sub(r"\[\d+\]", "", key).split(".")[-1]
    assert named in path.read_text().splitlines()[error.line - 1], f"line {error.line} does not hold {named}"


def test_every_malformed_form_exits_2_through_the_plan_command_without_ray(tmp_path):
    """All cases through the real `sweeper plan` in one fresh interpreter: status 2, the key path
    on stderr, no traceback, Ray never imported (so no Ray process can have started)."""
    assert len(MALFORMED_FORMS) >= 15
    paths = [str(write(tmp_path, smoke_with(change), f"bad_{i:02d}.yaml")) for i, (_, change, _, _) in
             enumerate(MALFORMED_FORMS)]
    code = textwrap.dedent(f"""
        import contextlib, io, json, sys
        from sweeper.cli import main
        outcomes = []
        for path in {paths!r}:
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                status = main(["plan", path])
            outcomes.append((status, err.getvalue(), out.getvalue()))
        print(json.dumps({{"outcomes": outcomes, "ray_imported": "ray" in sys.modules}}))
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert not report["ray_imported"], "Ray was imported for a bad spec"
    for (name, _, key, reason), path, (status, stderr, stdout) in zip(MALFORMED_FORMS, paths, report["outcomes"]):
        assert status == 2, f"{name}: exit {status}: {stderr}"
        assert f"{path}:" in stderr and f": {key}: " in stderr and reason in stderr, f"{name}: {stderr}"
        assert "Traceback" not in stderr + stdout and not stdout, f"{name}: {stdout}"


def test_a_fine_tuning_grid_plans_in_grid_mode_and_is_refused_in_optuna_mode(tmp_path):
    """A grid over a protocol field multiplies the grid's trials (tests/unit/plan/test_sweep_grid.py says
    how); optuna mode samples its points, so there a grid is refused with the choice that says
    the same (exit 2) rather than planning trials that ignore it."""
    grid = smoke_with(("  max_steps: 8 ", "  max_steps: 8\n  weight_decay: [0.0, 0.1] "))
    result = plan_cli(write(tmp_path, grid))
    assert result.returncode == 0, result.stderr
    assert "points over weight_decay [0.0, 0.1]" in result.stdout
    result = plan_cli(write(tmp_path, grid.replace("  max_steps: 8\n", "  max_steps: 8\n  search: optuna\n"),
                            "optuna.yaml"))
    assert result.returncode == 2
    assert "finetuning.weight_decay: a grid goes with search: grid; search: optuna samples its points" in result.stderr
    assert "{choice: [0.0, 0.1]}" in result.stderr and "Traceback" not in result.stderr


def test_distributions_plan_in_optuna_and_random_mode_and_the_plan_names_the_space(tmp_path):
    """Acceptance: a batch-size choice in random mode, weight decay x learning rate in optuna mode."""
    random_spec = smoke_with(RANDOM, ("  batch_size: 16 ", "  batch_size: {choice: [8, 16]} "))
    result = plan_cli(write(tmp_path, random_spec, "random.yaml"))
    assert result.returncode == 0, result.stderr
    assert re.search(r"result rows:\s+240 = 4 checkpoints x 5 datasets x 6 random samples x 2 seeds; "
                     r"drawn per cell from learning_rate loguniform \[1e-05, 0\.0005\], batch_size choice \[8, 16\]",
                     result.stdout), result.stdout
    optuna_spec = smoke_with(OPTUNA, ("  max_steps: 8 ", "  max_steps: 8\n  optuna: {samples: 3}\n  "
                                                         "weight_decay: {uniform: [0.0, 0.2]} "))
    result = plan_cli(write(tmp_path, optuna_spec, "optuna.yaml"))
    assert result.returncode == 0, result.stderr
    assert ("result rows:            120 = 4 checkpoints x 5 datasets x 3 Optuna samples x 2 seeds; TPE per cell over "
            "learning_rate loguniform [1e-05, 0.0005], weight_decay uniform [0.0, 0.2]; searched fields budgeted at "
            "their largest values") in result.stdout, result.stdout
    spec = load_study(write(tmp_path, optuna_spec, "optuna.yaml")).spec
    assert spec.finetuning.searched() == {"weight_decay": Distribution("uniform", (0.0, 0.2))}
    assert spec.finetuning.optuna.samples_per_cell == 3


def test_the_former_sample_count_name_keeps_working(tmp_path):
    former = ("  max_steps: 8 ", "  max_steps: 8\n  optuna: {learning_rates_per_cell: 4} ")
    old = load_study(write(tmp_path, smoke_with(OPTUNA, former), "old.yaml")).spec
    new = load_study(write(tmp_path, smoke_with(OPTUNA, ("  max_steps: 8 ", "  max_steps: 8\n  optuna: {samples: 4} ")),
                          "new.yaml")).spec
    assert old.finetuning.optuna.samples_per_cell == new.finetuning.optuna.samples_per_cell == 4
    assert [t.trial_key for t in plan_study(old).trials] == [t.trial_key for t in plan_study(new).trials]
