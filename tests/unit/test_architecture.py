"""The driver's architecture, checked on the source (stdlib `ast`, nothing imported):

    cli ─► run ─► design ─► report ─► plan ─► spec ─► contract ─► store   (sweeper/, a stage imports only to its right)
            └─► trainables ─► contract, store                               (the worker side)

Every import counts, at module level and inside functions (and under `if TYPE_CHECKING:`):
no import cycle in sweeper/ or trainables/, no import against the stage order, no Ray or torch
in the Ray-free stages, no module of sweeper/ over MAX_LINES lines. The study's location is one
`StudyLayout`, built by the CLI and passed down: no other module builds one.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("sweeper", "trainables")
STAGES = ("store", "contract", "spec", "plan", "report", "design", "run", "cli")
"""sweeper's stages, lowest first: a module imports from its own stage and the ones before it."""
RAY_FREE = ("store", "contract", "spec", "plan", "report", "design")
"""Stages that import neither Ray nor torch (`sweeper plan`, `status`, `report` run without them)."""
WORKER_STAGES = ("contract", "store")
"""The stages the worker side imports: the contract both sides share, and the store."""
MAX_LINES = 800
"""A smell limit, not a target: a module is as long as its job and is split at a seam (a type and
its users), never to pass a count; one twice the longest today asks whether it holds two jobs."""
LAYOUT_BUILDERS = ("sweeper.cli", "sweeper.store.layout")
"""The modules that build a `StudyLayout`: the CLI, from the location it resolves (`--storage`, the
spec, the default), and layout.py itself (`without_credentials`). Every other driver function
takes the layout it is handed; the worker side gets concrete locations inside its configs."""
LAZY_API = ("sweeper", "sweeper.cli")
"""The package's public function `sweeper.results` imports the CLI's `study_results` when called,
never at import (`import sweeper`, which the worker side does, stays light): that one edge, inside
a function, is left out of the graph; at module level it would count."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def parsed(source: str) -> ast.Module:
    """A source's tree, parsed once per text for the module's checks (each reads every file of the
    project; the callers only walk the tree)."""
    return ast.parse(source)


def source_files() -> dict[str, Path]:
    return {module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def imported_names(tree: ast.AST, module: str, is_package: bool) -> list[str]:
    """Every dotted name an import statement anywhere in `tree` names: `import X.y` gives X.y,
    `from X import y` gives X.y (y may be a module, or a name defined in X)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this module's package
                package = module.split(".") if is_package else module.split(".")[:-1]
                base = ".".join([*package[:len(package) - node.level + 1], *([base] if base else [])])
            names += [f"{base}.{alias.name}" for alias in node.names]
    return names


def import_graph(files: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """Module -> the project modules it imports (a name resolves to the longest module it starts with)."""
    files = files if files is not None else source_files()
    graph = {}
    for module, path in files.items():
        targets = set()
        for name in imported_names(parsed(path.read_text()), module, path.name == "__init__.py"):
            parts = name.split(".")
            for end in range(len(parts), 0, -1):
                if ".".join(parts[:end]) in files:
                    targets.add(".".join(parts[:end]))
                    break
        graph[module] = targets - {module}
    if LAZY_API[0] in files and not any(name.startswith(LAZY_API[1]) for name in imported_names(
            ast.Module(body=[node for node in parsed(files[LAZY_API[0]].read_text()).body
                             if isinstance(node, (ast.Import, ast.ImportFrom))], type_ignores=[]), LAZY_API[0], True)):
        graph[LAZY_API[0]].discard(LAZY_API[1])
    return graph


@functools.cache
def project_graph() -> dict[str, set[str]]:
    """The project's own import graph, built once for the module's checks (none of them changes it)."""
    return import_graph()


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[module] = 2
        path.pop()
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def stage_of(module: str) -> str | None:
    """The stage of a sweeper module (`cli` for cli.py and __main__.py; None for the package itself)."""
    parts = module.split(".")
    if parts[0] != "sweeper" or len(parts) == 1:
        return None
    return parts[1] if parts[1] in STAGES else "cli"


def stage_violations(graph: dict[str, set[str]]) -> list[str]:
    problems = []
    for module, targets in sorted(graph.items()):
        stage = stage_of(module)
        for target in sorted(targets):
            target_stage = stage_of(target)
            if module == "sweeper" and target.startswith("sweeper."):
                problems.append(f"{module} -> {target}: the package's __init__ imports none of its stages")
            elif stage and target_stage and STAGES.index(target_stage) > STAGES.index(stage):
                problems.append(f"{module} ({stage}) -> {target} ({target_stage}): against the stage order")
            elif stage and target.startswith("trainables") and stage != "run":
                problems.append(f"{module} ({stage}) -> {target}: only the run stage launches worker code")
            elif module.startswith("trainables") and target_stage and target_stage not in WORKER_STAGES:
                problems.append(f"{module} -> {target} ({target_stage}): the worker side imports only "
                                f"{' and '.join(WORKER_STAGES)}")
    return problems


def heavy_imports(files: dict[str, Path] | None = None) -> list[str]:
    """`module: ray` / `module: torch` for each Ray-free stage module that imports either."""
    files = files if files is not None else source_files()
    found = []
    for module, path in sorted(files.items()):
        if stage_of(module) in RAY_FREE:
            tops = {name.split(".")[0] for name in imported_names(parsed(path.read_text()), module, False) if name}
            found += [f"{module}: {top}" for top in sorted(tops & {"ray", "torch"})]
    return found


def long_modules(files: dict[str, Path] | None = None) -> list[str]:
    files = files if files is not None else source_files()
    lengths = {module: len(path.read_text().splitlines()) for module, path in files.items()}
    return [f"{module}: {n} lines" for module, n in sorted(lengths.items())
            if module.startswith("sweeper") and n > MAX_LINES]


def layout_constructions(files: dict[str, Path] | None = None) -> list[str]:
    """`module:line` of each call that builds a StudyLayout outside LAYOUT_BUILDERS: `StudyLayout(...)`,
    under an alias (`import StudyLayout as Where`) or through its module (`layout.StudyLayout(...)`)."""
    files = files if files is not None else source_files()
    found = []
    for module, path in sorted(files.items()):
        if module in LAYOUT_BUILDERS:
            continue
        tree = parsed(path.read_text())
        names = {"StudyLayout"} | {alias.asname for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                                   for alias in node.names if alias.name == "StudyLayout" and alias.asname}
        found += [f"{module}:{node.lineno}" for node in ast.walk(tree) if isinstance(node, ast.Call) and (
            getattr(node.func, "id", None) in names or getattr(node.func, "attr", None) == "StudyLayout")]
    return sorted(found)


def test_the_graph_sees_imports_inside_functions_and_each_stage():
    graph = project_graph()
    assert "sweeper.run.corpora" in graph and "trainables.corpus_prep" in graph["sweeper.run.corpora"], \
        "an import inside a function is an edge"
    assert {stage_of(module) for module in graph} >= set(STAGES)


def test_no_import_cycle():
    cycle = find_cycle(project_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_imports_follow_the_stage_order():
    problems = stage_violations(project_graph())
    assert not problems, "\n".join(problems)


def test_the_ray_free_stages_import_neither_ray_nor_torch():
    found = heavy_imports()
    assert not found, "\n".join(found)


def test_only_the_cli_builds_the_study_layout():
    found = layout_constructions()
    assert not found, ("a StudyLayout built outside the CLI (take the `layout` the caller has instead; "
                       "`layout.without_credentials()` for a copy that goes to the workers):\n" + "\n".join(found))


def test_no_driver_module_is_over_the_line_limit():
    found = long_modules()
    assert not found, f"over {MAX_LINES} lines (split along a seam: one job per module):\n" + "\n".join(found)


# --- each check fails when it should (on a few files written for the purpose) ---------------

def fake_tree(tmp_path: Path, sources: dict[str, str]) -> dict[str, Path]:
    files = {}
    for module, text in sources.items():
        path = tmp_path / f"{module.replace('.', '/')}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        files[module] = path
    return files


def test_the_checks_catch_a_cycle_a_stage_breach_ray_in_a_ray_free_stage_and_a_long_module(tmp_path):
    files = fake_tree(tmp_path, {
        "sweeper.spec.a": "from sweeper.plan import b\n",  # spec -> plan: against the order
        "sweeper.plan.b": "def f():\n    import sweeper.spec.a\n    import torch\n",  # a cycle, inside a function
        "sweeper.store.c": "from ray import tune\n" + "x = 1\n" * MAX_LINES,
        "trainables.w": "from sweeper.run.runner import run_study\n",
        "sweeper.run.runner": "",
    })
    graph = import_graph(files)
    assert find_cycle(graph) == ["sweeper.plan.b", "sweeper.spec.a", "sweeper.plan.b"]
    assert stage_violations(graph) == [
        "sweeper.spec.a (spec) -> sweeper.plan.b (plan): against the stage order",
        "trainables.w -> sweeper.run.runner (run): the worker side imports only contract and store"]
    assert heavy_imports(files) == ["sweeper.plan.b: torch", "sweeper.store.c: ray"]
    assert long_modules(files) == [f"sweeper.store.c: {MAX_LINES + 1} lines"]


def test_the_layout_check_catches_a_layout_built_below_the_cli(tmp_path):
    files = fake_tree(tmp_path, {
        "sweeper.cli": "from sweeper.store.layout import StudyLayout\nlayout = StudyLayout('/study')\n",
        "sweeper.store.layout": "class StudyLayout:\n    def copy(self):\n        return StudyLayout(self.root)\n",
        "sweeper.report.writer": "from sweeper.store.layout import StudyLayout\n\n"
                                 "def write_report(study_dir):\n    return StudyLayout(str(study_dir))\n",
        "sweeper.run.shards": "from sweeper.store import layout\nx = layout.StudyLayout('/study')\n",
        "sweeper.store.results": "from sweeper.store.layout import StudyLayout as Where\nx = Where('/study')\n",
        "trainables.loop": "from sweeper.store.layout import StudyLayout\nx = StudyLayout('/study')\n",
        "sweeper.run.runner": "def run_study(layout):\n    return layout.results\n",
    })
    assert layout_constructions(files) == ["sweeper.report.writer:4", "sweeper.run.shards:2",
                                           "sweeper.store.results:2", "trainables.loop:2"]


def package_of(module: str) -> str:
    """The package a module belongs to: a stage of sweeper/ (`sweeper.run`, `sweeper.cli` for the
    modules at its top), `sweeper` for the package's own __init__ (its version), `trainables` or one
    of its sub-packages (`trainables.tasks`)."""
    stage = stage_of(module)
    if stage:
        return f"sweeper.{stage}"
    if module == "sweeper":
        return "sweeper"
    parts = module.split(".")
    package = ".".join(parts[:2]) if len(parts) > 1 and (ROOT / parts[0] / parts[1]).is_dir() else parts[0]
    return package


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        edges = packages.setdefault(package_of(module), set())
        edges.update(package_of(target) for target in targets)
    return {package: targets - {package} for package, targets in packages.items()}


def test_no_import_cycle_between_packages_trainables_included():
    packages = package_graph(project_graph())
    assert {"sweeper.contract", "trainables", "trainables.tasks"} <= set(packages)
    cycle = find_cycle(packages)
    assert cycle is None, "package-level import cycle: " + " -> ".join(cycle)


def test_the_package_check_catches_the_worker_importing_the_run_stage(tmp_path):
    files = fake_tree(tmp_path, {"sweeper.run.runner": "import trainables.loop\n",
                                 "trainables.loop": "from sweeper.run import runner\n"})
    assert find_cycle(package_graph(import_graph(files))) == ["sweeper.run", "trainables", "sweeper.run"]
