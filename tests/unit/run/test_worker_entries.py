"""The driver never imports the worker side (`trainables`: transformers and torch, ~3 s of CPU at
every study's start): the functions it hands to Ray import it in their bodies, which run on the
workers, and the driver only refers to them."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

RUN_STAGE = ROOT / "sweeper" / "run"

DRIVER = textwrap.dedent('''
    import json
    import pkgutil
    import sys
    from types import SimpleNamespace

    import ray

    import sweeper.cli
    import sweeper.run
    from sweeper.run import environment

    for module in pkgutil.iter_modules(sweeper.run.__path__):
        __import__(f"sweeper.run.{module.name}")

    handed = []

    class Remote:
        def options(self, **_):
            return self

        def remote(self):
            return "future"

        def __call__(self, decorated):  # `@ray.remote(num_cpus=...)` in a module imported later
            return self

    def remote(*functions, **_):
        handed.extend(f"{f.__module__}.{f.__qualname__}" for f in functions)
        return Remote()

    ray.remote, ray.get = remote, lambda future, timeout=None: {"probed": future}
    resources = SimpleNamespace(cpus_per_trial=1, gpus_per_trial=0, custom_resources_per_trial={})
    probed = environment.probe_environment(SimpleNamespace(resources=resources))
    worker_side = sorted({m.partition(".")[0] for m in sys.modules} & {"trainables", "transformers", "torch"})
    print(json.dumps({"worker_side": worker_side, "handed": handed, "probed": probed}))
''')


@pytest.mark.long  # a fresh interpreter imports the driver: 6-7 s
def test_the_driver_imports_no_worker_side_module():
    """Every module of the run stage and the CLI imported, and the environment probe scheduled
    (with Ray's `remote` and `get` stood in for), in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", DRIVER], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["worker_side"] == [], f"imported in the driver: {seen['worker_side']}"
    assert seen["handed"] == ["sweeper.run.environment.describe_environment"] and seen["probed"] == {"probed": "future"}


def imports_trainables(function: ast.FunctionDef) -> bool:
    return any(isinstance(node, ast.ImportFrom) and (node.module or "").partition(".")[0] == "trainables"
               or isinstance(node, ast.Import) and any(a.name.partition(".")[0] == "trainables" for a in node.names)
               for node in ast.walk(function))


def test_functions_that_import_the_worker_side_are_handed_to_ray_never_called():
    """A run-stage function that imports trainables is a Ray task's or trial's body: the driver
    passes it on (ray.remote, tune.with_parameters) and calls it nowhere, so its import runs on a worker."""
    trees = {path: ast.parse(path.read_text()) for path in sorted((ROOT / "sweeper").rglob("*.py"))}
    entries = {node.name for path, tree in trees.items() if path.parent == RUN_STAGE
               for node in tree.body if isinstance(node, ast.FunctionDef) and imports_trainables(node)}
    called, referenced = set(), set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                called.add(node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None))
                referenced.update(
                    a.id for a in [*node.args, *(k.value for k in node.keywords)] if isinstance(a, ast.Name)
                )
            elif isinstance(node, ast.FunctionDef):  # a default value: tune_grid.run_shards(trainable_fn=...)
                referenced.update(d.id for d in node.args.defaults + node.args.kw_defaults if isinstance(d, ast.Name))
    assert not entries & called, f"called in the driver: {sorted(entries & called)}"
    assert entries <= referenced, f"not handed to Ray: {sorted(entries - referenced)}"
    assert {"prepare_corpus_task", "prepare_task", "fit_run", "train_worker_loop", "finetune_trainable",
            "describe_environment"} <= entries


def test_the_worker_side_is_imported_frozen_on_workers():
    """Every import of trainables in the run stage sits in a `with imports_frozen():` block
    (sweeper.contract.heavy_imports): the package itself imports nothing heavy, so these imports
    are where a worker loads torch and transformers."""
    unfrozen = []
    for path in sorted(RUN_STAGE.glob("*.py")):
        tree = ast.parse(path.read_text())
        frozen = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.With)
                  and any(isinstance(item.context_expr, ast.Call)
                          and getattr(item.context_expr.func, "id", None) == "imports_frozen"
                          for item in node.items)
                  for statement in node.body for inner in ast.walk(statement)}
        unfrozen += [f"{path.name}:{node.lineno}" for node in ast.walk(tree)
                     if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in frozen
                     and any(name.partition(".")[0] == "trainables"
                             for name in ([node.module or ""] if isinstance(node, ast.ImportFrom)
                                          else [a.name for a in node.names]))]
    assert not unfrozen, f"imported without imports_frozen: {unfrozen}"


def test_the_probe_runs_the_worker_sides_describe(monkeypatch):
    import trainables.environment

    from sweeper.run.environment import describe_environment

    monkeypatch.setattr(trainables.environment, "describe", lambda: {"python": "probed"})
    assert describe_environment() == {"python": "probed"}


def test_the_corpus_task_runs_the_worker_sides_preparation(monkeypatch):
    import trainables.corpus_prep

    from sweeper.run.corpora import prepare_corpus_task

    monkeypatch.setattr(
        trainables.corpus_prep, "prepare_corpus", lambda config, out_dir: {"prepared": (config, out_dir)}
    )
    assert prepare_corpus_task("config", "out") == {"prepared": ("config", "out")}
