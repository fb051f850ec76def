"""Replicates (`pretraining.replicates`, a run entry's `replicates`): names and keys, seeds, the
data order, continued pretraining, the store's `replicate` and `arm` columns, `sweeper plan`,
and two replicates trained for real (Train's local mode on the test head) into different weights."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sweeper.plan.load import load_study
from sweeper.plan.plan_text import plan_lines as plan_text_lines, replicate_source_lines
from sweeper.plan.replicates import init_seed
from sweeper.plan.study_plan import EvaluatedCheckpoint, plan_study, run_count_text
from sweeper.run.train_grid import pretrain_config
from sweeper.run.recording import trial_row
from sweeper.contract.configs import SEED_LIMIT
from sweeper.store.layout import CORPUS_MARKER, StudyLayout
from sweeper.store.results import TRIAL_SCHEMA, TRIALS, compact, read_trials, write_rows
from trainables.corpus import ORDER_BLOCK_WINDOWS, PackedCorpus

from conftest import edited_spec

GLOBAL = ("  steps: 40 ", "  steps: 40\n  replicates: 3 ")
"""smoke.yaml (3 runs, an intermediate checkpoint at step 20) with 3 replicates of every run."""
CPT = ("    - objective: clm ", "    - objective: clm\n      replicates: 2\n    - objective: mlm\n"
       "      init_from: [nano-clm-40]\n      steps: [10]\n      warmup_steps: 1\n      decay_steps: 2\n"
       "      replicates: 3\n   ")
"""smoke.yaml with its CLM run trained twice and continued 3 times."""


def plan_of(tmp_path, *changes, name="spec.yaml"):
    spec = load_study(edited_spec(tmp_path, *changes, name=name)).spec
    return spec, plan_study(spec)


def test_replicates_1_plans_what_a_spec_without_them_plans(tmp_path):
    _, plain = plan_of(tmp_path)
    _, one = plan_of(tmp_path, ("  steps: 40 ", "  steps: 40\n  replicates: 1 "), name="one.yaml")
    assert [(r.name, r.run_key) for r in one.runs] == [(r.name, r.run_key) for r in plain.runs]
    assert [t.trial_key for t in one.trials] == [t.trial_key for t in plain.trials]
    assert all(r.replicate == 0 and r.seed == 0 for r in plain.runs)


def test_three_replicates_are_three_runs_named_and_keyed_apart_with_replicate_0_unchanged(tmp_path):
    spec, plain = plan_of(tmp_path)
    spec3, plan = plan_of(tmp_path, GLOBAL, name="rep.yaml")
    names = [run.name for run in plan.runs]
    assert names == [*(r.name for r in plain.runs), *(f"{r.name}-rep1" for r in plain.runs),
                     *(f"{r.name}-rep2" for r in plain.runs)], "replicate-major: every replicate 0 first"
    assert len({run.run_key for run in plan.runs}) == 9
    assert plan.runs[:3] == tuple(replace(r, seed=0) for r in plain.runs), "replicate 0 is the run as planned before"
    rep1 = plan.runs[3]
    assert rep1.identity == {**plain.runs[0].identity, "replicate": 1} and rep1.arm == "nano-mlm40-40"
    ids = [c.checkpoint_id for c in plan.checkpoints]
    assert "nano-mlm40-40-rep1-20" in ids and "nano-mlm40-40-rep2" in ids
    arms = {c.checkpoint_id: c.arm for c in plan.checkpoints}
    assert arms["nano-mlm40-40-rep2-20"] == "nano-mlm40-40-20" and arms["nano-clm-40-rep1"] == "nano-clm-40"
    assert arms["nano-mlm40-40-20"] == "nano-mlm40-40-20"
    old = {t.trial_key for t in plain.trials}
    assert old == {t.trial_key for t in plan.trials if t.checkpoint.arm == t.checkpoint.checkpoint_id}
    assert len({t.trial_key for t in plan.trials}) == 3 * len(old)
    assert run_count_text(spec3, plan) == "9 = 3 configurations x 3 replicates"
    assert run_count_text(spec, plain) == "3"


def test_init_seeds_differ_per_replicate_and_replicate_0_keeps_the_study_seed(tmp_path):
    spec, plan = plan_of(tmp_path, GLOBAL, ("  log_every: 10 ", "  log_every: 10\n  seed: 7 "), name="rep.yaml")
    layout = StudyLayout(str(tmp_path / "study"))
    by_name = {run.name: run for run in plan.runs}
    seeds = {run.name: pretrain_config(run, spec, layout, "corpus", by_name).seed for run in plan.runs}
    assert seeds["nano-clm-40"] == 7 and len({seeds[f"nano-clm-40{s}"] for s in ("", "-rep1", "-rep2")}) == 3
    configs = {run.name: pretrain_config(run, spec, layout, "corpus", by_name) for run in plan.runs}
    assert configs["nano-clm-40-rep2"].replicate == 2 and configs["nano-clm-40"].replicate == 0
    plain_spec, plain = plan_of(tmp_path, ("  log_every: 10 ", "  log_every: 10\n  seed: 7 "), name="plain.yaml")
    assert [pretrain_config(run, plain_spec, layout, "corpus", by_name) for run in plain.runs] == \
        [configs[run.name] for run in plain.runs], "replicate 0 trains what the run trained before"
    assert replace(configs["nano-clm-40-rep2"], name="x", run_key="x", run_dir="x", seed=0, replicate=0) == \
        replace(configs["nano-clm-40"], name="x", run_key="x", run_dir="x", seed=0), "only these differ"
    # An odd stride is invertible modulo 2**32: distinct seeds in the seed range, from any study seed.
    drawn = [init_seed(SEED_LIMIT - 1, r) for r in range(1000)]
    assert drawn[0] == SEED_LIMIT - 1 and len(set(drawn)) == 1000 and all(0 <= s < SEED_LIMIT for s in drawn)


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory) -> str:
    """A corpus folder as the single-file format writes it: 3 order blocks of 1-token windows."""
    folder = tmp_path_factory.mktemp("corpus")
    tokens = np.arange(3 * ORDER_BLOCK_WINDOWS - 1000, dtype=np.int32) % 500
    np.save(folder / "tokens.npy", tokens)
    (folder / CORPUS_MARKER).write_text(json.dumps({"tokens": int(tokens.size), "special_ids": [0],
                                                    "separator_id": 1, "mask_token_id": 2, "vocab_size": 500}))
    return str(folder)


def test_a_replicate_reads_the_shared_corpus_in_its_own_order_a_pure_function_of_the_step(corpus_dir):
    corpus = {r: PackedCorpus(corpus_dir, 1, 5, replicate=r) for r in (0, 1, 2)}
    default = PackedCorpus(corpus_dir, 1, 5)
    batch, steps = 4096, corpus[0].num_windows // 4096

    def order(c, at=range(0, 3 * steps, 7)):
        return [c.window_indices(s, batch, 0, 1) for s in at]

    assert order(corpus[0]) == order(default), "replicate 0 reads as before"
    assert order(corpus[1]) != order(corpus[0]) and order(corpus[1]) != order(corpus[2])
    # The same batch on a fresh reader, asked out of order (a resumed run): the same windows.
    late = [3 * steps - 1, 5, steps + 2]
    assert order(PackedCorpus(corpus_dir, 1, 5, replicate=1), late) == order(corpus[1], late)
    # Each epoch is still a permutation of every window, block by block in stream order.
    visited = [w for s in range(steps) for w in corpus[2].window_indices(s, batch, 0, 1)]
    assert sorted(visited) == sorted(set(visited)) and max(visited[:ORDER_BLOCK_WINDOWS]) < ORDER_BLOCK_WINDOWS
    first = corpus[1].num_windows  # epoch 1 differs from epoch 0
    assert [corpus[1].window_at(first + i) for i in range(50)] != [corpus[1].window_at(i) for i in range(50)]


def test_a_continued_replicate_continues_its_sources_own_replicate_the_source_grown_to_match(tmp_path):
    spec, plan = plan_of(tmp_path, CPT)
    _, plain = plan_of(tmp_path, ("    - objective: clm ", CPT[1].replace("      replicates: 2\n", "")
                                  .replace("      replicates: 3\n", "")), name="plain.yaml")
    runs = {run.name: run for run in plan.runs}
    cpt = "nano-clm-dec40-mlm40-50"
    assert {name for name in runs if name.startswith(cpt)} == {cpt, f"{cpt}-rep1", f"{cpt}-rep2"}
    assert [runs[n].init_from_run for n in (cpt, f"{cpt}-rep1", f"{cpt}-rep2")] == \
        ["nano-clm-40", "nano-clm-40-rep1", "nano-clm-40-rep2"], "the source (x2 asked) is trained a third time"
    assert runs["nano-clm-40-rep2"].seed == init_seed(0, 2)
    assert runs[f"{cpt}-rep1"].identity["init_from"] == runs["nano-clm-40-rep1"].run_key
    assert runs[f"{cpt}-rep2"].identity["init_from"] == runs["nano-clm-40-rep2"].run_key
    assert {(r.name, r.run_key) for r in plain.runs} <= {(r.name, r.run_key) for r in plan.runs}
    assert len({runs[n].run_key for n in (cpt, f"{cpt}-rep1", f"{cpt}-rep2")}) == 3
    config = pretrain_config(runs[f"{cpt}-rep1"], spec, StudyLayout(str(tmp_path / "s")), "corpus", runs)
    assert "nano-clm-40-rep1" in config.init.location and config.replicate == 1 and config.data_offset_steps == 40
    assert run_count_text(spec, plan) == "8 (4 configurations; replicates: runs[1] x2, runs[2] x3)"
    assert replicate_source_lines(spec) == [
        f"    source grown: nano-clm-40 (runs[1] x2) trained x3: every replicate r of {cpt} continues from its own "
        "replicate r of the source"]
    missing = edited_spec(tmp_path, CPT, ("init_from: [nano-clm-40]", "init_from: [nano-clm-40-rep1]"), name="m.yaml")
    with pytest.raises(Exception, match="no run named 'nano-clm-40-rep1'"):
        _ = load_study(missing).spec  # a continued entry names a configuration; its replicates pair up by themselves


def test_micro_continued_five_times_plans_five_distinct_source_replicates_per_arm():
    """The issue's reproduction (#53): micro.yaml's CPT entry at 5 replicates, its sources at 3.
    Before, replicates 3 and 4 both continued from the source's replicate 0 (pseudo-replication)."""
    study = load_study(Path("search_spaces/micro.yaml"), ["pretraining.runs[4].replicates=5"])
    runs = {run.name: run for run in study.plan.runs}
    for source in ("nano-clm-600", "nano-mlm40-600"):
        cpt = source.replace("-600", "-dec600-mlm40-700")
        origins = [runs[cpt if r == 0 else f"{cpt}-rep{r}"].init_from_run for r in range(5)]
        assert origins == [source] + [f"{source}-rep{r}" for r in range(1, 5)]
        keys = [runs[source if r == 0 else f"{source}-rep{r}"].run_key for r in range(5)]
        assert len(set(keys)) == 5
        assert [runs[cpt if r == 0 else f"{cpt}-rep{r}"].identity.get("init_from") for r in range(1, 5)] == keys[1:]
    lines = plan_text_lines(study)
    assert ("    source grown: nano-clm-600 (runs[2] x3) trained x5: every replicate r of nano-clm-dec600-mlm40-700 "
            "continues from its own replicate r of the source") in lines


def test_random_search_draws_the_same_points_for_every_replicate_of_a_checkpoint(tmp_path):
    _, plan = plan_of(tmp_path, GLOBAL, ("  seeds: [0, 1]", "  seeds: [0, 1]\n  search: random\n  "
                                                            "random: {samples: 2}"),
                      ("  learning_rates: [0.001] ", "  "),
                      name="random.yaml")
    points = {}
    for trial in plan.trials:
        points.setdefault((trial.checkpoint.arm, trial.task, trial.sample), set()).add(trial.learning_rate)
    assert all(len(lrs) == 1 for lrs in points.values())


def test_rows_carry_replicate_and_arm_and_parts_written_before_read_them_as_null(tmp_path):
    _, plan = plan_of(tmp_path, GLOBAL)
    rows = [trial_row("s", t, {"validation_score": 1.0, "test_score": 1.0}, "ok", None) for t in plan.trials]
    by_id = {row["checkpoint_id"]: row for row in rows}
    assert (by_id["nano-mlm40-40-rep2-20"]["replicate"], by_id["nano-mlm40-40-rep2-20"]["arm"]) == \
        (2, "nano-mlm40-40-20")
    assert (by_id["nano-mlm40-40"]["replicate"], by_id["nano-mlm40-40"]["arm"]) == (0, "nano-mlm40-40")
    elsewhere = EvaluatedCheckpoint(checkpoint_id="bert", run=None, step=0, tokens_seen=None)
    assert elsewhere.arm == "bert"
    layout = StudyLayout(str(tmp_path / "study"))
    write_rows(layout, TRIALS, rows[:10])
    old_schema = pa.schema([f for f in TRIAL_SCHEMA if f.name not in ("replicate", "arm", "task")])
    partition = Path(layout.table(TRIALS)) / f"task={rows[10]['task']}"
    partition.mkdir(parents=True, exist_ok=True)
    old = rows[10:20]
    pq.write_table(pa.Table.from_pylist([{k: r.get(k) for k in old_schema.names} for r in old], schema=old_schema),
                   partition / "part-old.parquet")
    compact(layout, TRIALS)
    recorded = read_trials(layout).to_pandas().set_index("trial_key")
    assert recorded.loc[[r["trial_key"] for r in old], ["replicate", "arm"]].isna().all().all()
    assert recorded.loc[rows[0]["trial_key"], "arm"] == rows[0]["arm"]


def test_replicates_continued_from_one_hugging_face_checkpoint_are_said_to_share_it(tmp_path):
    """A Hugging Face source is one fixed checkpoint (no replicates to grow): every replicate
    continues from it, and the plan says what their spread is about."""
    from transformers import LlamaConfig

    LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8,
                num_key_value_heads=2).save_pretrained(tmp_path / "llama")  # the plan reads config.json only
    hf = f"hf:{tmp_path / 'llama'}"
    entry = CPT[1].replace("      replicates: 2\n", "").replace("[nano-clm-40]", f'["{hf}"]')
    study = load_study(edited_spec(tmp_path, ("    - objective: clm ", entry)))
    assert [(r.replicate, r.init_from) for r in study.plan.runs if r.init_from] == [(r, hf) for r in range(3)]
    (line,) = replicate_source_lines(study.spec)
    assert line.startswith(f"    one fixed source: hf-llama-mlm40-10 x3 from {hf}: their replicates "
                           "differ by initialisation and data order from that one checkpoint"), line
