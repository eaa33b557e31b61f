"""The layering the package docstrings promise, read from the source with `ast` (nothing is
imported): no import runs upward between packages, none runs upward between the engine's levels,
and there is no run-time import circle inside sgrun/engine/. A new package must be placed in
PACKAGE_DEPS below, and a new engine module in a level folder (docs/architecture.md draws the
same map)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SGRUN = Path(__file__).resolve().parent.parent / "sgrun"

# Package (room) -> the packages it may import. Anything not listed is refused.
PACKAGE_DEPS: dict[str, set[str]] = {
    "sgrun.errors": set(),
    "sgrun.cache_paths": set(),   # the one cache folder every package may ask for
    "sgrun.kernels": set(),   # the kernels' home (sgrun/kernels/): a docstring over its backend folders
    "sgrun.kernels.triton": set(),   # the Triton GPU kernels (sgrun/kernels/triton/)
    "sgrun.grammars": set(),  # the shipped grammar files (data only)
    "sgrun.child_process": set(),
    "sgrun.models": {"sgrun.cache_paths", "sgrun.errors", "sgrun.child_process", "sgrun.kernels.cpu",
                     "sgrun.models.arch"},
    "sgrun.models.arch": {"sgrun.errors", "sgrun.models"},   # the architectures' readers and registry
    # the C++ CPU kernels, their build helper and the CPU level (sgrun/kernels/cpu/)
    "sgrun.kernels.cpu": {"sgrun.cache_paths", "sgrun.errors", "sgrun.child_process"},
    "sgrun.constrain": {"sgrun.errors", "sgrun.child_process", "sgrun.constrain.tool_calls",
                        "sgrun.kernels.cpu"},   # (its build helper, for the C++ lazy DFA)
    "sgrun.constrain.tool_calls": {"sgrun.errors", "sgrun.constrain"},
    "sgrun.engine.parts.attention": {"sgrun.errors", "sgrun.kernels.triton", "sgrun.kernels.cpu", "sgrun.engine"},
    "sgrun.engine": {"sgrun.cache_paths", "sgrun.errors", "sgrun.child_process", "sgrun.models", "sgrun.constrain",
                     "sgrun.constrain.tool_calls", "sgrun.kernels.triton", "sgrun.kernels.cpu",
                     "sgrun.engine.parts.attention"},
    "sgrun": {"sgrun.errors", "sgrun.engine"},   # the package root (the DSL is loaded by name)
    "sgrun.lang": {"sgrun.cache_paths", "sgrun.errors", "sgrun.models", "sgrun.constrain", "sgrun.constrain.tool_calls",
                   "sgrun.engine"},
    "sgrun.cli_flags": {"sgrun.engine"},
    "sgrun.server": {"sgrun.cache_paths", "sgrun", "sgrun.errors", "sgrun.child_process", "sgrun.models", "sgrun.constrain",
                     "sgrun.constrain.tool_calls", "sgrun.engine", "sgrun.lang", "sgrun.cli_flags"},
    "sgrun.bench_plot": {"sgrun.errors"},
    "sgrun.bench": {"sgrun", "sgrun.errors", "sgrun.bench_plot"},
    "sgrun.cli": {"sgrun.cache_paths", "sgrun", "sgrun.errors", "sgrun.models", "sgrun.engine", "sgrun.server", "sgrun.bench",
                  "sgrun.cli_flags", "sgrun.constrain"},
}
# Of the engine, sgrun.engine.parts.attention may use only these modules (it sits below the runner).
ATTENTION_MAY_USE = {"sgrun.engine.state.page_pool"}

# The engine's levels are its folders, lowest first: a module imports only modules of its own
# level or below. Every engine module lives in one of these folders...
ENGINE_LEVEL_FOLDERS: dict[str, int] = {
    "state": 0,      # data and small mechanisms
    "parts": 1,      # parts the stages are made of (attention/ among them)
    "stages": 2,     # the stages
    "pipeline": 3,   # the step pipeline, and rank 0's tensor-parallel group
}
# ...except the three files on top, in this order.
ENGINE_TOP_FILES: dict[str, int] = {
    "engine_builder": 4,
    "startup_report": 5,
    "engine": 6,   # the facade
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SGRUN.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.Module) -> list[tuple[str, bool]]:
    """(imported sgrun module, under `if TYPE_CHECKING:`) for every import, lazy ones included."""
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from sgrun.engine import sampler` names a module; `from sgrun.x import f` a name in x.
            names = [f"{node.module}.{a.name}" if (SGRUN.parent / node.module.replace(".", "/") / a.name).exists()
                     or (SGRUN.parent / (node.module.replace(".", "/") + f"/{a.name}.py")).exists()
                     else node.module for a in node.names]
        else:
            continue
        out += [(n, id(node) in typing_only) for n in names if n == "sgrun" or n.startswith("sgrun.")]
    return out


def _package(module: str) -> str:
    """The room a module belongs to in PACKAGE_DEPS (the deepest listed package containing it)."""
    best = "sgrun"
    for pkg in PACKAGE_DEPS:
        if (module == pkg or module.startswith(pkg + ".")) and len(pkg) > len(best):
            best = pkg
    return best


def engine_level(module: str) -> int | None:
    """The level of an engine module: its level folder's, or a top file's own; None when it is
    not in the engine or sits outside the level folders (a misplaced module)."""
    parts = module.split(".")
    if parts[:2] != ["sgrun", "engine"] or len(parts) < 3:
        return None
    if len(parts) == 3 and parts[2] in ENGINE_TOP_FILES:
        return ENGINE_TOP_FILES[parts[2]]
    return ENGINE_LEVEL_FOLDERS.get(parts[2])


SOURCES = {_module_name(p): ast.parse(p.read_text(), filename=str(p)) for p in sorted(SGRUN.rglob("*.py"))}


def unplaced_engine_modules() -> list[str]:
    """Engine modules outside the level folders and not one of the top files."""
    return sorted(m for m in SOURCES if m.startswith("sgrun.engine.") and engine_level(m) is None)


def test_every_package_and_engine_module_is_placed():
    engine_levels = {f"sgrun.engine.{folder}" for folder in ENGINE_LEVEL_FOLDERS}
    packages = {m for m in SOURCES if (SGRUN.parent / m.replace(".", "/") / "__init__.py").exists()}
    unplaced = packages - set(PACKAGE_DEPS) - engine_levels
    assert unplaced == set(), f"place these packages in PACKAGE_DEPS: {sorted(unplaced)}"
    top = {m for m in SOURCES if m.count(".") == 1}
    assert top <= set(PACKAGE_DEPS), f"place these in PACKAGE_DEPS: {sorted(top - set(PACKAGE_DEPS))}"
    assert unplaced_engine_modules() == [], (
        f"move these into a level folder of sgrun/engine/ ({', '.join(ENGINE_LEVEL_FOLDERS)}): {unplaced_engine_modules()}")


def test_the_level_folders_are_what_the_map_says():
    folders = {p.name for p in (SGRUN / "engine").iterdir() if (p / "__init__.py").exists()}
    assert folders == set(ENGINE_LEVEL_FOLDERS)
    tops = {p.stem for p in (SGRUN / "engine").glob("*.py")} - {"__init__"}
    assert tops == set(ENGINE_TOP_FILES)


def upward_imports() -> list[str]:
    bad = []
    for module, tree in SOURCES.items():
        src_pkg = _package(module)
        for target, _ in _imports(tree):
            dst_pkg = _package(target)
            if dst_pkg != src_pkg and dst_pkg not in PACKAGE_DEPS[src_pkg]:
                bad.append(f"{module} imports {target} ({src_pkg} may not use {dst_pkg})")
            if src_pkg == "sgrun.engine.parts.attention" and dst_pkg == "sgrun.engine" and target not in ATTENTION_MAY_USE:
                bad.append(f"{module} imports {target} (attention may use only {sorted(ATTENTION_MAY_USE)})")
            src_level, dst_level = engine_level(module), engine_level(target)
            if src_level is not None and dst_level is not None and dst_level > src_level:
                bad.append(f"{module} imports {target}: level {dst_level} is above {module}'s level {src_level}")
    return bad


def test_no_import_runs_upward():
    assert upward_imports() == []


def import_cycles(prefix: str = "sgrun", typing_too: bool = False) -> list[list[str]]:
    """Run-time import circles among the modules under `prefix` (TYPE_CHECKING imports excluded
    unless `typing_too`; an import inside a function counts: it runs too, only later)."""
    graph = {m: sorted({t for t, typing in _imports(tree) if (typing_too or not typing) and t in SOURCES
                        and t.startswith(prefix) and t != m})
             for m, tree in SOURCES.items() if m.startswith(prefix)}
    cycles, state, stack = [], {}, []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for m in graph:
        if m not in state:
            visit(m)
    return cycles


def engine_cycles() -> list[list[str]]:
    return import_cycles("sgrun.engine")


def test_no_runtime_import_circle_inside_the_engine():
    assert engine_cycles() == []


def test_no_circle_inside_the_engine_even_for_type_names():
    # A type-only import that closes a circle is still a stage reaching up (stats.py named the
    # model runner's type once, the runner importing what imports stats); Protocols say what is read.
    assert import_cycles("sgrun.engine", typing_too=True) == []


def test_no_engine_module_imports_a_private_name_of_another():
    # speculative.py used sampler._filter once: a module's private names stay in it.
    bad = [f"{m} imports {node.module}.{a.name}" for m, tree in SOURCES.items() if m.startswith("sgrun.engine")
           for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sgrun.engine")
           for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    assert bad == []


def test_no_runtime_import_circle_anywhere():
    # grammar <-> earley_automaton and compile <-> compile_worker were the last two (the shared
    # GrammarAutomaton and nfa_from_node now live below both sides).
    assert import_cycles() == []


@pytest.mark.parametrize("source, expect", [
    ("from sgrun.engine.engine import Engine\n", "sgrun.models may not use sgrun.engine"),
    ("from sgrun.engine.pipeline.step import StepPipeline\n", None),
])
def test_the_checks_catch_an_upward_import(source, expect, monkeypatch):
    # The checker itself: an import from models up into the engine is reported; a module of the
    # lowest level folder (state/) importing the step pipeline is reported as running upward too.
    monkeypatch.setitem(SOURCES, "sgrun.models.fake", ast.parse(source))
    monkeypatch.setitem(SOURCES, "sgrun.engine.state.sampler_fake_probe", ast.parse(source))
    bad = upward_imports()
    if expect:
        assert any(expect in b for b in bad)
    assert any("sampler_fake_probe imports sgrun.engine." in b for b in bad)


def test_a_stage_may_import_its_own_level_and_below(monkeypatch):
    monkeypatch.setitem(SOURCES, "sgrun.engine.stages.fake_probe", ast.parse(
        "from sgrun.engine.stages.scheduler import Scheduler\nfrom sgrun.engine.state.sequence import Sequence\n"))
    assert not any("fake_probe" in b for b in upward_imports())


def test_a_module_outside_the_level_folders_is_refused(monkeypatch):
    # A new sgrun/engine/loose.py (or a folder that is not a level) has no level: it must move.
    monkeypatch.setitem(SOURCES, "sgrun.engine.loose_probe", ast.parse("import torch\n"))
    monkeypatch.setitem(SOURCES, "sgrun.engine.misc.probe", ast.parse("import torch\n"))
    assert unplaced_engine_modules() == ["sgrun.engine.loose_probe", "sgrun.engine.misc.probe"]


def test_the_cycle_check_finds_a_circle(monkeypatch):
    monkeypatch.setitem(SOURCES, "sgrun.engine.state.page_pool", ast.parse(
        "from sgrun.engine.stages.scheduler import Scheduler\n" + ast.unparse(SOURCES["sgrun.engine.state.page_pool"])))
    assert any("sgrun.engine.state.page_pool" in c and "sgrun.engine.stages.scheduler" in c for c in engine_cycles())


def test_the_cycle_check_finds_a_lazy_circle_outside_the_engine(monkeypatch):
    # An import inside a function closes a circle as surely as one at the top.
    monkeypatch.setitem(SOURCES, "sgrun.constrain.byte_nfa", ast.parse(
        "def f():\n    from sgrun.constrain.compile import compile_constraint\n"
        + ast.unparse(SOURCES["sgrun.constrain.byte_nfa"])))
    assert any("sgrun.constrain.byte_nfa" in c and "sgrun.constrain.compile" in c for c in import_cycles())


def test_the_engine_facade_stays_a_facade():
    # engine.py runs the loop and takes requests; building Sequences (intake.py), options
    # (engine_builder.py) and warm-ups (request_constraint.py) live in the levels below it.
    lines = (SGRUN / "engine" / "engine.py").read_text().count("\n")
    assert lines <= 300, f"engine.py has {lines} lines: move what is not the facade's into a level folder below"


def test_postprocess_takes_its_types_from_below_not_from_the_runner():
    # SampledTokens and Scores live in sampled.py (level 0): the runner makes them, postprocess
    # takes them, and neither stage imports the other.
    postprocess = "sgrun.engine.stages.postprocess"
    reached = {t for t, _ in _imports(SOURCES[postprocess])}
    assert {t for t in reached if engine_level(t) == engine_level(postprocess) and t != postprocess} == set()
