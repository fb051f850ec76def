"""Spec errors: file, line, key path, reason; exit status 2; no Ray process started."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_process import sweeper_cli

from sweeper.plan.load import load_study
from sweeper.spec.reading import SpecError

ROOT = Path(__file__).resolve().parents[3]
GOOD = (ROOT / "search_spaces" / "smoke.yaml").read_text()


def with_change(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new, 1)


MALFORMED = [
    ("unknown top key", GOOD + "\nfinetunning: {}\n", "finetunning", "did you mean 'finetuning'"),
    ("unknown nested key", with_change("  seq_len: 64", "  seq_length: 64"), "data.seq_length",
     "did you mean 'seq_len'"),
    ("unknown run key", with_change("mask_ratio: [0.4]", "mask_ratios: [0.4]"), "pretraining.runs[0].mask_ratios",
     "did you mean 'mask_ratio'"),
    ("unknown resources key", with_change("  cpus_per_trial: 1", "  cpus_per_trail: 1"),
     "resources.cpus_per_trail", "did you mean 'cpus_per_trial'"),
    ("wrong type", with_change("  steps: 40", "  steps: forty"), "pretraining.steps", "expected an integer"),
    ("boolean for integer", with_change("  max_steps: 8", "  max_steps: true"), "finetuning.max_steps",
     "expected an integer"),
    ("wrong list item type", with_change("  seeds: [0, 1]", "  seeds: [0, one]"), "finetuning.seeds[1]",
     "expected an integer"),
    ("budget for a task not studied", with_change("  max_steps: 8 ", "  task_budgets: {sst2: {max_steps: 5}}\n "
                                                                     " max_steps: 8 "),
     "finetuning.task_budgets.sst2", "'sst2' is not in tasks"),
    ("negative task budget", with_change("  max_steps: 8 ", "  task_budgets: {wordnet-supersense-qa: {epochs: -1}}\n "
                                                            " max_steps: 8 "),
     "finetuning.task_budgets.wordnet-supersense-qa.epochs", "must be positive"),
    ("QA stride beyond half a window", with_change("  doc_stride: 8 ", "  doc_stride: 30 "), "finetuning.doc_stride",
     "must be in [0, max_length / 2)"),
    ("misspelt scoring", with_change("  max_steps: 8 ", "  scoring: papr\n  max_steps: 8 "), "finetuning.scoring",
     "'papr' is not one of 'standard', 'paper'"),
    ("keep_predictions not a boolean", with_change("  max_steps: 8 ", "  keep_predictions: 3\n  max_steps: 8 "),
     "finetuning.keep_predictions", "expected true or false"),
    ("unknown sharding", with_change("  cpus_per_trial: 1", "  sharding: zero3\n  cpus_per_trial: 1"),
     "resources.sharding", "'zero3' is not one of 'ddp', 'fsdp'"),
    ("mapping for scalar", with_change("  preset: nano ", "  preset:\n    name: nano "), "model.preset",
     "expected a string"),
    ("mask ratio out of range", with_change("mask_ratio: [0.4]", "mask_ratio: [1.4]"),
     "pretraining.runs[0].mask_ratio[0]", "outside (0, 1)"),
    ("mask ratio zero", with_change("mask_ratio: [0.4]", "mask_ratio: [0]"),
     "pretraining.runs[0].mask_ratio[0]", "outside (0, 1)"),
    ("clm share out of range", with_change("clm_fraction: [0.5]", "clm_fraction: [1.5]"),
     "pretraining.runs[2].clm_fraction[0]", "outside [0, 1]"),
    ("checkpoint beyond budget", with_change("checkpoint_steps: [20]", "checkpoint_steps: [400]"),
     "pretraining.runs[0].checkpoint_steps[0]", "before the run's budget"),
    ("negative steps", with_change("  steps: 40", "  steps: -5"), "pretraining.steps", "must be positive"),
    ("no replicates", with_change("  steps: 40", "  steps: 40\n  replicates: 0"), "pretraining.replicates",
     "must be a whole number in [1, 1,000], got 0"),
    ("replicates as a word", with_change("clm_fraction: [0.5]", "clm_fraction: [0.5]\n      replicates: three"),
     "pretraining.runs[2].replicates", "expected an integer"),
    ("fractional replicates", with_change("mask_ratio: [0.4]", "mask_ratio: [0.4]\n      replicates: 1.5"),
     "pretraining.runs[0].replicates", "expected an integer"),
    ("budget shorter than schedule", with_change("  decay_steps: 8", "  decay_steps: 38"),
     "pretraining.runs[0].steps", "shorter than warmup + decay"),
    ("empty grid", with_change("  seeds: [0, 1]", "  seeds: []"), "finetuning.seeds", "empty grid"),
    ("empty runs", "study: x\npretraining: {runs: []}\nfinetuning: {tasks: [sst2]}\n", "pretraining.runs",
     "empty grid"),
    ("unknown task", with_change("[wordnet-supersense-cls, ", "[wordnet-supersense-clf, "),
     "finetuning.tasks[0]", "did you mean 'wordnet-supersense-cls'"),
    ("unknown preset", with_change("  preset: nano", "  preset: 601m"), "model.preset", "unknown preset"),
    ("unknown run preset", with_change("- objective: mlm ", "- preset: [tiny, 61m]\n      objective: mlm "),
     "pretraining.runs[0].preset[1]", "unknown preset"),
    ("unknown objective", with_change("- objective: mlm", "- objective: mlmx"),
     "pretraining.runs[0].objective", "unknown objective 'mlmx' (did you mean 'mlm'?)"),
    ("missing objective", with_change("    - objective: mlm ", "    - steps: [40] "),
     "pretraining.runs[0].objective", "give either objective (short form) or phases (long form)"),
    ("objective and phases", with_change("    - objective: clm ", "    - objective: clm\n      phases: "
                                                                  "[{objective: clm}]\n     "),
     "pretraining.runs[1].objective", "give either objective"),
    ("unknown phase objective", with_change("    - objective: clm ", "    - phases: [{objective: clm, until: 0.5}, "
                                                                     "{objective: mlmm}]\n     "),
     "pretraining.runs[1].phases[1].objective", "unknown objective 'mlmm' (did you mean 'mlm'?)"),
    ("phase ends out of order", with_change("    - objective: clm ", "    - phases: [{objective: clm, until: 0.5}, "
     "{objective: mlm, until: 0.4}, {objective: clm}]\n     "), "pretraining.runs[1].phases[1].until", "not after"),
    ("phase without an end", with_change("    - objective: clm ", "    - phases: [{objective: clm}, "
                                                                  "{objective: mlm}]\n     "),
     "pretraining.runs[1].phases[0].until", "needs until"),
    ("masking ratio on a causal phase", with_change("    - objective: clm ", "    - phases: [{objective: clm, "
                                                                             "mask_ratio: 0.3}]\n     "),
     "pretraining.runs[1].phases[0].mask_ratio", "masks nothing"),
    ("unknown objective setting", with_change("    - objective: clm ", "    - phases: [{objective: mlm, settings: "
                                                                       "{keep_orig: 0.1}}]\n     "),
     "pretraining.runs[1].phases[0].settings.keep_orig", "did you mean 'keep_original'"),
    ("missing referenced checkpoint", with_change("    - objective: clm ", "    - objective: mlm\n      "
     "init_from: [nano-clm-4k]\n    - objective: clm "), "pretraining.runs[1].init_from[0]", "no run named"),
    ("continued pretraining not mlm", with_change("    - objective: clm ", "    - objective: clm\n      "
     "init_from: [nano-mlm40-40]\n     "), "pretraining.runs[1].init_from", "continued pretraining is MLM"),
    ("negative learning rate", with_change("  learning_rates: [0.001]", "  learning_rates: [-0.001]"),
     "finetuning.learning_rates[0]", "must be positive"),
    ("warmup ratio out of range", GOOD.replace("  max_length: 48", "  max_length: 48\n  warmup_ratio: 1.5"),
     "finetuning.warmup_ratio", "outside [0, 1)"),
    ("unknown search mode", with_change("  seeds: [0, 1]", "  seeds: [0, 1]\n  search: bayes"),
     "finetuning.search", "is not one of"),
    ("optuna range inverted", with_change("  seeds: [0, 1]", "  seeds: [0, 1]\n  optuna: {lr_min: 0.1, lr_max: 0.01}"),
     "finetuning.optuna.lr_min", "lr_min < lr_max"),
    ("unknown sample lengths", with_change("  seq_len: 64", "  seq_len: 64\n  sample_lengths: varible"),
     "data.sample_lengths", "'varible' is not one of 'fixed', 'variable' (did you mean 'variable'?)"),
    ("rows too short for two samples", with_change("  seq_len: 64", "  seq_len: [64, 16]\n  sample_lengths: variable"),
     "data.seq_len", "16 is below 24: variable samples are 12 tokens or more, two per row"),
    ("unknown mask token", with_change("  seq_len: 64", "  seq_len: 64\n  mask_token: reservd"),
     "data.mask_token", "'reservd' is not one of 'added', 'reserved'"),
    ("zero vocabulary", with_change("  vocab_size: 1024", "  vocab_size: 0"), "data.vocab_size", "must be positive"),
    ("betas of wrong length", with_change("    peak_lr: 0.002", "    peak_lr: 0.002\n    betas: [0.9]"),
     "pretraining.optimizer.betas", "expected 2 values, got 1"),
    ("betas out of range", with_change("  max_length: 48", "  max_length: 48\n  betas: [0.9, 1.5]"),
     "finetuning.betas", "two numbers in [0, 1)"),
    ("negative gradient clip", with_change("    peak_lr: 0.002", "    peak_lr: 0.002\n    grad_clip: -1"),
     "pretraining.optimizer.grad_clip", "must be positive"),
    ("utilisation out of range", GOOD + "cost: {utilization: 1.5}\n", "cost.utilization", "outside (0, 1]"),
    ("unsupported storage scheme", GOOD + "storage: ftp://host/studies\n", "storage", "unsupported "
                                                                                      "storage scheme 'ftp'"),
    ("storage URI without a bucket", GOOD + "storage: s3:///studies\n", "storage", "names no bucket"),
    ("study name with a slash", with_change("study: smoke", "study: a/b"), "study", "without '/'"),
    ("study name ..", with_change("study: smoke", "study: .."), "study", "not . or .."),
    ("NaN learning rate", with_change("  learning_rates: [0.001]", "  learning_rates: [.nan]"),
     "finetuning.learning_rates[0]", "must be a finite number"),
    ("infinite peak learning rate", with_change("    peak_lr: 0.002", "    peak_lr: 1e999"),
     "pretraining.optimizer.peak_lr", "must be a finite number"),
    ("negative seed", with_change("  seeds: [0, 1]", "  seeds: [-1, 1]"), "finetuning.seeds[0]", "a seed must lie in"),
    ("repeated seed", with_change("  seeds: [0, 1]", "  seeds: [1, 1]"), "finetuning.seeds[1]", "listed twice"),
    ("batch not shared by the workers", with_change("  pretraining_workers: 0", "  pretraining_workers: 3"),
     "pretraining.global_batch_size", "not divisible by resources.pretraining_workers"),
    ("unknown model override", with_change("  preset: nano ", "  preset: nano\n  overrides: {hidden_sise: 64}\n "),
     "model.overrides.hidden_sise", "unknown key (did you mean 'hidden_size'?)"),
    ("model override of the wrong type", with_change("  preset: nano ", "  preset: nano\n  overrides: "
                                                                        "{rope_theta: big}\n "),
     "model.overrides.rope_theta", "expected a number"),
    ("duplicate key", with_change("  steps: 40", "  steps: 40\n  steps: 50"), "pretraining.steps",
     "duplicate key: given on line"),
    ("malformed yaml", with_change("  seq_len: 64", "  seq_len: [64"), "", "malformed YAML"),
    ("not a mapping", "- study\n- x\n", "", "must hold a mapping"),
    ("missing required", "study: x\nfinetuning: {tasks: [sst2]}\n", "pretraining", "nothing to fine-tune"),
]


@pytest.mark.parametrize("name,text,key,reason", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_spec_names_file_key_and_reason(tmp_path, name, text, key, reason):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as caught:
        _ = load_study(path).spec
    message = str(caught.value)
    assert str(path) in message and key in message and reason in message


def test_error_carries_the_yaml_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(with_change("mask_ratio: [0.4]", "mask_ratio: [1.4]"))
    with pytest.raises(SpecError) as caught:
        _ = load_study(path).spec
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "1.4" in text)
    assert caught.value.line == line and f"bad.yaml:{line}:" in str(caught.value)


@pytest.mark.parametrize("setting", ["scoring: papr", "keep_predictions: 3"])
def test_a_bad_scoring_setting_names_its_file_line_and_key(tmp_path, setting):
    path = tmp_path / "bad.yaml"
    path.write_text(with_change("  max_steps: 8 ", f"  {setting}\n  max_steps: 8 "))
    with pytest.raises(SpecError) as caught:
        _ = load_study(path).spec
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.strip() == setting)
    key = f"finetuning.{setting.split(':')[0]}"
    assert caught.value.line == line and caught.value.key_path == key
    assert str(caught.value).startswith(f"{path}:{line}: {key}:")


def test_every_malformed_file_exits_2_names_its_key_and_starts_no_ray(tmp_path):
    """All files through the real CLI in one fresh interpreter: status 2, the key path on stderr,
    Ray never imported (so no Ray process can have started) and no study folder created."""
    assert len(MALFORMED) >= 25
    paths = []
    for index, (_, text, _, _) in enumerate(MALFORMED):
        path = tmp_path / f"bad_{index:02d}.yaml"
        path.write_text(text)
        paths.append(str(path))
    code = textwrap.dedent(f"""
        import contextlib, io, json, sys
        from sweeper.cli import main
        outcomes = []
        for path in {paths!r}:
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                status = main(["run", path, "--storage", {str(tmp_path / 'study')!r}])
            outcomes.append((status, err.getvalue()))
        print(json.dumps({{"outcomes": outcomes, "ray_imported": "ray" in sys.modules}}))
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert not report["ray_imported"], "Ray was imported for a bad spec"
    assert not (tmp_path / "study").exists()
    for (name, _, key, reason), path, (status, stderr) in zip(MALFORMED, paths, report["outcomes"]):
        assert status == 2, f"{name}: exit {status}: {stderr}"
        assert path in stderr and key in stderr and reason in stderr, f"{name}: {stderr}"


def test_an_evaluation_only_set_needs_its_training_task(tmp_path):
    path = tmp_path / "ir.yaml"
    path.write_text(with_change("[wordnet-supersense-cls, ", "[nq, wordnet-supersense-cls, "))
    result = sweeper_cli("run", str(path), "--storage", str(tmp_path / "s"), cwd=ROOT)
    assert result.returncode == 2, result.stderr
    assert "finetuning.tasks[0]" in result.stderr and "add 'msmarco'" in result.stderr
    assert not (tmp_path / "s").exists()


def test_shipped_specs_load():
    for path in (ROOT / "search_spaces").glob("*.yaml"):
        _ = load_study(path).spec


def test_shipped_specs_document_every_field_they_set():
    """The first time a file sets a field (run entries counted once), its line carries a comment."""
    import re

    from sweeper.spec.reading import LineIndex

    for path in (ROOT / "search_spaces").glob("*.yaml"):
        lines = path.read_text().splitlines()
        first: dict[str, int] = {}
        for key, line in LineIndex(path.read_text()).lines.items():
            if not key or key.endswith("]"):
                continue  # the document itself and list items are not fields
            general = re.sub(r"\[\d+\]", "[]", key)
            first[general] = min(line, first.get(general, line))
        undocumented = [f"{key} (line {line})" for key, line in first.items() if "#" not in lines[line - 1]]
        assert not undocumented, f"{path.name}: fields without a comment: {undocumented}"


def test_duplicate_key_names_both_lines(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD + "study: again\n")
    with pytest.raises(SpecError) as caught:
        _ = load_study(path).spec
    last = len(path.read_text().splitlines())
    assert caught.value.line == last and f"given on line 4 and again on line {last}" in str(caught.value)


def test_an_alias_is_resolved_once_and_still_works(tmp_path):
    """Anchors and aliases stay usable (resolved once, never expanded as text)."""
    path = tmp_path / "aliases.yaml"
    text = with_change("checkpoint_steps: [20]", "checkpoint_steps: &steps [20]")
    path.write_text(
        text.replace("    - objective: clm ", "    - objective: clm\n      checkpoint_steps: *steps\n     ", 1)
    )
    runs = load_study(path).spec.pretraining.runs
    assert runs[0].checkpoint_steps == runs[1].checkpoint_steps == [20]


def test_model_fields_match_the_model_config():
    """catalog.MODEL_FIELDS (what model.overrides may set, torch-free) is LlamaEncoderConfig's
    constructor: the same names, the same types, and every preset builds."""
    import inspect

    pytest.importorskip("torch")
    from trainables.model import LlamaEncoderConfig

    from sweeper.contract.catalog import MODEL_FIELDS, MODEL_PRESETS
    from sweeper.spec.model_data import ModelSpec

    parameters = {name: p for name, p in inspect.signature(LlamaEncoderConfig.__init__).parameters.items()
                  if name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD}
    assert set(MODEL_FIELDS) == set(parameters)
    for name, kind in MODEL_FIELDS.items():
        annotation = parameters[name].annotation
        assert annotation in (kind, kind.__name__), f"{name}: {annotation} vs {kind.__name__}"
        assert type(parameters[name].default) is kind, name
    for preset, fields in MODEL_PRESETS.items():
        assert set(fields) <= set(MODEL_FIELDS), preset
        assert ModelSpec(preset=preset).architecture_problem(preset) is None, preset


# --- #29: nothing stale, nothing unnamed ---------------------------------------------------------

def test_no_name_holds_a_control_or_format_character():
    """Every Unicode control (C0, DEL, C1) and a sample of format characters (bidi overrides,
    zero-width ones, the byte-order mark) and separators are refused; other non-ASCII text is not."""
    from sweeper.store.storage import folder_name_problem

    controls = [chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))]
    formats = ["\u202e", "\u202a", "\u2066", "\u200b", "\u200d", "\u200e", "\ufeff", "\u00ad", "\u2028", "\u2029"]
    for character in controls + formats:
        problem = folder_name_problem(f"study{character}x")
        assert problem and f"U+{ord(character):04X}" in problem, (hex(ord(character)), problem)
    for fine in ("smoke", "étude", "数据-研究", "study_2026.v2", "a b"):
        assert folder_name_problem(fine) is None, fine


def test_a_long_form_phase_inherits_the_studys_masking_settings(tmp_path):
    """The study's random_replace / keep_original reach a long-form MLM phase as they reach the
    short form (they were replaced by the objective's defaults), so both plan one run, one key."""
    from sweeper.plan.study_plan import plan_study

    bert = with_change("  log_every: 10 ", "  random_replace: 0.1\n  keep_original: 0.1\n  log_every: 10 ")
    short, long = tmp_path / "short.yaml", tmp_path / "long.yaml"
    short.write_text(bert)
    long.write_text(bert.replace("    - objective: clm-mlm\n      clm_fraction: [0.5]",
                                 "    - phases: [{objective: clm, until: 0.5}, {objective: mlm, mask_ratio: 0.4}]"))
    (short_run,) = [r for r in plan_study(load_study(short).spec).runs if r.objective == "clm-mlm"]
    (long_run,) = [r for r in plan_study(load_study(long).spec).runs if r.objective == "clm-mlm"]
    assert long_run.phases[1].settings == {"mask_ratio": 0.4, "random_replace": 0.1, "keep_original": 0.1}
    assert (long_run.name, long_run.run_key) == (short_run.name, short_run.run_key)


def test_every_value_an_accepted_q_form_draws_lies_in_the_fields_bounds():
    """Hypothesis: whatever [lo, hi, q] the spec accepts for warmup_ratio ([0, 1)) or eps (> 0),
    every value it draws passes the field's own check: 100 draws, and the extreme draws (the ends
    of the range, rounded to multiples of q as Tune's q-forms round every draw)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from sweeper.spec.finetuning import FinetuningSpec
    from sweeper.spec.parsing import build_dataclass
    from sweeper.spec.reading import Context, LineIndex
    from sweeper.spec.space import draw, generator, quantize

    context = Context("x.yaml", LineIndex(""))
    numbers = st.floats(min_value=1e-12, max_value=2.0, allow_nan=False)

    @settings(max_examples=150, deadline=None)
    @given(field=st.sampled_from(["warmup_ratio", "eps"]), kind=st.sampled_from(["quniform", "qloguniform"]),
           low=numbers, high=numbers, q=numbers, k=st.integers(0, 40), n=st.integers(1, 40))
    def check(field, kind, low, high, q, k, n):
        # arbitrary numbers; multiples of q; a multiple with any lo (q may dwarf it); a near-multiple hi
        for args in ([low, high, q], [k * q, (k + n) * q, q], [low, (k + n) * q, q], [k * q, (k + n - 5e-10) * q, q]):
            try:
                spec = build_dataclass(FinetuningSpec, {"tasks": ["sst2"], "search": "random", field: {kind: args}},
                                       "finetuning", context)
            except SpecError:
                continue
            space = spec.searched()[field]
            ends = [quantize(end, space.args[2]) for end in space.args[:2]]
            for value in ends + [draw(space, generator(sample)) for sample in range(100)]:
                refused = [p for p in FinetuningSpec.check(spec.at({field: value})) if p[0] == field]
                assert not refused, (kind, args, value, refused)

    check()


def test_keys_in_a_spec_are_refused_unechoed_and_the_command_line_keeps_taking_them(tmp_path):
    """A spec is shared and copied into the study: `user:secret@` in its storage is exit 2, with
    the URI shown without them and where keys go instead; `--storage` still takes them (the
    driver keeps them to itself, tests/unit/store/test_secrets.py)."""
    from sweeper.spec.names import location_problem

    path = tmp_path / "keys.yaml"
    path.write_text(GOOD + 'storage: "s3://AKIAEXAMPLE:topsecret@bucket/studies/x"\n')
    result = sweeper_cli("plan", str(path), cwd=ROOT)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"{path}:{len(GOOD.splitlines()) + 1}: storage: 's3://bucket/studies/x' carries credentials" in result.stderr
    assert "AWS_ACCESS_KEY_ID" in result.stderr and "--storage" in result.stderr
    assert "topsecret" not in result.stderr and "AKIAEXAMPLE" not in result.stderr
    assert location_problem("s3://AKIAEXAMPLE:topsecret@bucket/x", credentials_allowed=True) is None
    assert "names no bucket" in location_problem("s3://AKIAEXAMPLE:topsecret@/x", credentials_allowed=True)


def test_the_room_a_name_leaves_is_what_the_layout_appends():
    """sweeper.spec.names reserves what StudyLayout appends to a run's and an external
    checkpoint's name in a folder name of its own: the longest such folder name is 255 bytes."""
    import time

    from sweeper.contract.configs import stable_key
    from sweeper.spec.names import EXTERNAL_SUFFIX_BYTES, RUN_SUFFIX_BYTES, external_name_problem, run_name_problem
    from sweeper.store import storage
    from sweeper.store.layout import StudyLayout

    layout, key = StudyLayout("/study"), stable_key({})
    run, external = "r" * (255 - RUN_SUFFIX_BYTES), "c" * (255 - EXTERNAL_SUFFIX_BYTES)
    assert run_name_problem(run) is None and run_name_problem(run + "r")
    assert external_name_problem(external) is None and external_name_problem(external + "c")
    assert len(storage.name(layout.superseded_run(run, key, int(time.time())))) == 255
    assert len(storage.name(layout.external_checkpoint(external, key))) == 255
