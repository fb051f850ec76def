"""What a shard hands its workers (sweeper.run.shards, `Shard.for_workers`): contract types only,
never the planning around them, and the very configs the driver builds for the same trials."""
from __future__ import annotations

import itertools
import pickle
import pickletools

from sweeper.contract.configs import ShardTrials
from sweeper.plan.load import load_study
from sweeper.plan.study_plan import plan_study, task_points
from sweeper.run.pipeline import Pipeline
from sweeper.run.shards import EvaluationSets, grid_shards, optuna_shards, trial_runtime
from sweeper.run.task_prep import data_variant
from sweeper.run.train_grid import pretrain_config
from sweeper.spec import space as spaces
from sweeper.store.layout import StudyLayout

from conftest import ROOT

PICKLE_PLUMBING = {"builtins", "copyreg", "_codecs"}
"""Modules a pickle of builtins names (bytes, sets, object construction), whatever it holds."""


def pickled_modules(value) -> set[str]:
    """The module of every class or function `value`'s pickle names: what unpickling it on a
    worker imports. Protocol 2 names each one with a GLOBAL opcode ("module name")."""
    return {arg.split(" ")[0] for opcode, arg, _ in pickletools.genops(pickle.dumps(value, protocol=2))
            if opcode.name == "GLOBAL"}


def foreign_modules(value) -> set[str]:
    return {module for module in pickled_modules(value)
            if module not in PICKLE_PLUMBING and not module.startswith("sweeper.contract.")}


SEARCHED = """\
  tasks: [wordnet-usage-retrieval, wordnet-definition-retrieval, wordnet-supersense-qa]
  max_length: {choice: [32, 48]}
  weight_decay: {uniform: [0.0, 0.2]}
"""


def searched_spec(tmp_path):
    """tests/specs/optuna.yaml with a searched data field (each max_length prepared apart) and an
    evaluation-only set (wordnet-definition-retrieval, scored by wordnet-usage-retrieval's trials)."""
    text = (ROOT / "tests" / "specs" / "optuna.yaml").read_text()
    text = text.replace("  tasks: [wordnet-supersense-cls, wordnet-supersense-tag]\n", SEARCHED)
    text = text.replace("  max_length: 32\n", "")
    (tmp_path / "searched.yaml").write_text(text)
    return load_study(tmp_path / "searched.yaml").spec


def prepared_dirs(spec, plan) -> dict:
    """The folders `prepare_tasks` would return: one per (tokenizer, task, data variant), and the
    first variant's under (tokenizer, task)."""
    dirs = {}
    for checkpoint, task in itertools.product(plan.checkpoints, spec.finetuning.tasks):
        for _, protocol in task_points(spec, task):
            variant = data_variant(task, protocol)
            dirs[(checkpoint.tokenizer, task, variant)] = f"/prepared/{task}/{'-'.join(map(str, variant))}"
            dirs.setdefault((checkpoint.tokenizer, task), dirs[(checkpoint.tokenizer, task, variant)])
    return dirs


def test_what_crosses_to_the_workers_is_contract_types_only(tmp_path):
    spec = load_study(ROOT / "search_spaces" / "smoke.yaml").spec
    plan = plan_study(spec)
    layout = StudyLayout(str(tmp_path / "study"))
    sets = EvaluationSets(plan, spec.finetuning.tasks)
    (grid,) = grid_shards(list(plan.trials), layout, prepared_dirs(spec, plan), 1000, sets, trial_runtime(spec))
    shipped = grid.for_workers()
    assert isinstance(shipped, ShardTrials) and len(shipped.trials) == len(plan.trials)
    assert foreign_modules(shipped) == set()
    # The check catches what was shipped before: the planning shard, its trials and its queue.
    assert {"sweeper.run.shards", "sweeper.run.search", "sweeper.plan.study_plan"} <= foreign_modules(grid)

    searched = searched_spec(tmp_path)
    searched_plan = plan_study(searched)
    searched_sets = EvaluationSets(searched_plan, searched.finetuning.tasks)
    shards = optuna_shards(searched, searched_plan, list(searched_plan.trials), set(), layout,
                           prepared_dirs(searched, searched_plan), searched_sets)
    assert all(foreign_modules(shard.for_workers()) == set() for shard in shards)

    # Ray Train's side: each run's loop gets its PretrainConfig (`train_loop_config={"run": ...}`).
    runs = {run.name: run for run in plan.runs}
    for run in plan.runs:
        assert foreign_modules({"run": pretrain_config(run, spec, layout, str(tmp_path / "corpus"), runs)}) == set()


def test_a_grid_shard_ships_the_configs_of_the_trials_left_in_its_queue(tmp_path):
    spec = load_study(ROOT / "search_spaces" / "smoke.yaml").spec
    plan = plan_study(spec)
    first, second = grid_shards(list(plan.trials), StudyLayout(str(tmp_path / "study")), prepared_dirs(spec, plan),
                                len(plan.trials) // 2 + 1, EvaluationSets(plan, spec.finetuning.tasks),
                                trial_runtime(spec))
    taken = [first.tuner_args(spec, Pipeline())["search_alg"].suggest(str(n)) for n in range(first.capacity)]
    shipped = second.for_workers()
    assert set(shipped.trials) == set(range(len(plan.trials))) - {config["trial_index"] for config in taken}
    assert all(shipped.config_at({"trial_index": index}) == second.trial_config({"trial_index": index})
               for index in shipped.trials)


def test_an_optuna_shards_workers_build_the_config_the_driver_builds_at_any_point(tmp_path):
    spec = searched_spec(tmp_path)
    plan = plan_study(spec)
    layout = StudyLayout(str(tmp_path / "study"))
    sets = EvaluationSets(plan, spec.finetuning.tasks)
    shards = optuna_shards(spec, plan, list(plan.trials), set(), layout, prepared_dirs(spec, plan), sets)
    shard = shards[0]
    shipped = shard.for_workers()
    assert set(shipped.cells) == set(range(len(shard.cells))), "every cell of the call, whichever this shard takes"
    folders, companions = set(), 0
    for number, cell in enumerate(shard.cells):
        space = shard.searches[number].space
        assert shipped.cells[number].data_fields == ("max_length",)
        for lengths, (sample, seeds) in itertools.product(spaces.planning_values(space["max_length"]),
                                                          enumerate(cell)):
            point = {spaces.LEARNING_RATE: 3e-4 * (1 + sample), "weight_decay": 0.05 * (1 + sample),
                     "max_length": lengths}
            for seed_index in range(len(seeds)):
                config = {"cell": number, "sample": sample, "seed_index": seed_index, "point": point}
                built = shipped.config_at(config)
                assert built == shard.trial_config(config)
                assert (built.protocol.max_length, built.protocol.learning_rate) == (lengths, point["learning_rate"])
                folders.add(built.task_data_dir)
                companions += len(built.companions)
    # The point chose the folders: each task's two lengths were prepared apart, and the
    # evaluation-only set rode along with its training task's trials.
    assert len(folders) == 2 * 2 and companions > 0
