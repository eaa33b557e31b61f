"""The layering the package docstrings promise, read from the source with `ast` (nothing is
imported): no import runs upward between packages, none runs upward between the engine's rooms,
and there is no run-time import circle inside sgrun/engine/. A new module or package must be
placed in the maps below (docs/architecture.md draws the same map)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SGRUN = Path(__file__).resolve().parent.parent / "sgrun"

# Package (room) -> the packages it may import. Anything not listed is refused.
PACKAGE_DEPS: dict[str, set[str]] = {
    "sgrun.errors": set(),
    "sgrun.cache_paths": set(),   # the one cache folder every package may ask for
    "sgrun.kernels": set(),   # the Triton kernels (sgrun/kernels/)
    "sgrun.grammars": set(),  # the shipped grammar files (data only)
    "sgrun.child_process": set(),
    "sgrun.models": {"sgrun.cache_paths", "sgrun.errors", "sgrun.child_process", "sgrun.cpu_kernels",
                     "sgrun.models.arch"},
    "sgrun.models.arch": {"sgrun.errors", "sgrun.models"},   # the architectures' readers and registry
    "sgrun.cpu_kernels": {"sgrun.cache_paths", "sgrun.errors", "sgrun.child_process"},
    "sgrun.constrain": {"sgrun.errors", "sgrun.child_process", "sgrun.constrain.tool_calls",
                        "sgrun.cpu_kernels"},   # (its build helper, for the C++ lazy DFA)
    "sgrun.constrain.tool_calls": {"sgrun.errors", "sgrun.constrain"},
    "sgrun.engine.attention": {"sgrun.errors", "sgrun.kernels", "sgrun.cpu_kernels", "sgrun.engine"},
    "sgrun.engine": {"sgrun.cache_paths", "sgrun.errors", "sgrun.child_process", "sgrun.models", "sgrun.constrain",
                     "sgrun.constrain.tool_calls", "sgrun.kernels", "sgrun.cpu_kernels", "sgrun.engine.attention"},
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
# Of the engine, sgrun.engine.attention may use only these rooms (it sits below the runner).
ATTENTION_MAY_USE = {"sgrun.engine.page_pool"}

# The engine's rooms, lowest first: a room imports only rooms of its own level or below.
ENGINE_ROOMS: dict[str, int] = {
    # data and small mechanisms
    **dict.fromkeys(["sampling_params", "outputs", "detokenizer", "sequence", "scoring", "counter_rng",
                     "page_pool", "request_handle", "prompt_ids", "prompt_logprobs", "radix_cache",
                     "radix_snapshot", "isolation", "model_like", "sampled"], 0),
    # parts the stages are made of
    **dict.fromkeys(["sampler", "sampling_rows", "ngram_draft", "attention", "cuda_graph_runner", "device",
                     "request_constraint", "step_broadcast", "compile_policy", "intake"], 1),
    # the stages
    **dict.fromkeys(["scheduler", "stats", "speculative", "model_runner", "postprocess", "consistency",
                     "tp_worker"], 2),
    # the step pipeline, and rank 0's tensor-parallel group
    **dict.fromkeys(["step", "tp_group"], 3),
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


def _engine_room(module: str) -> str | None:
    if not module.startswith("sgrun.engine."):
        return None
    return module.split(".")[2]


SOURCES = {_module_name(p): ast.parse(p.read_text(), filename=str(p)) for p in sorted(SGRUN.rglob("*.py"))}


def test_every_package_and_engine_room_is_placed():
    packages = {m for m in SOURCES if (SGRUN.parent / m.replace(".", "/") / "__init__.py").exists()}
    assert packages - set(PACKAGE_DEPS) - {"sgrun.constrain"} <= set(), sorted(packages - set(PACKAGE_DEPS))
    top = {m for m in SOURCES if m.count(".") == 1}
    assert top <= set(PACKAGE_DEPS), f"place these in PACKAGE_DEPS: {sorted(top - set(PACKAGE_DEPS))}"
    rooms = {_engine_room(m) for m in SOURCES if _engine_room(m)}
    assert rooms <= set(ENGINE_ROOMS), f"place these engine rooms in ENGINE_ROOMS: {sorted(rooms - set(ENGINE_ROOMS))}"


def upward_imports() -> list[str]:
    bad = []
    for module, tree in SOURCES.items():
        src_pkg = _package(module)
        for target, _ in _imports(tree):
            dst_pkg = _package(target)
            if dst_pkg != src_pkg and dst_pkg not in PACKAGE_DEPS[src_pkg]:
                bad.append(f"{module} imports {target} ({src_pkg} may not use {dst_pkg})")
            if src_pkg == "sgrun.engine.attention" and dst_pkg == "sgrun.engine" and target not in ATTENTION_MAY_USE:
                bad.append(f"{module} imports {target} (attention may use only {sorted(ATTENTION_MAY_USE)})")
            src_room, dst_room = _engine_room(module), _engine_room(target)
            if (src_room and dst_room and src_room != dst_room and src_pkg == "sgrun.engine"
                    and ENGINE_ROOMS[dst_room] > ENGINE_ROOMS[src_room]):
                bad.append(f"{module} imports {target}: room {dst_room} (level {ENGINE_ROOMS[dst_room]}) is "
                           f"above {src_room} (level {ENGINE_ROOMS[src_room]})")
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
    # speculative.py used sampler._filter once: a room's private names stay in it.
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
    ("from sgrun.engine.step import StepPipeline\n", None),
])
def test_the_checks_catch_an_upward_import(source, expect, monkeypatch):
    # The checker itself: an import from models up into the engine is reported; a module of a
    # low engine room importing the step pipeline is reported as running upward too.
    monkeypatch.setitem(SOURCES, "sgrun.models.fake", ast.parse(source))
    monkeypatch.setitem(SOURCES, "sgrun.engine.sampler_fake_probe", ast.parse(source))
    monkeypatch.setitem(ENGINE_ROOMS, "sampler_fake_probe", 0)
    bad = upward_imports()
    if expect:
        assert any(expect in b for b in bad)
    assert any("sampler_fake_probe imports sgrun.engine." in b for b in bad)


def test_the_cycle_check_finds_a_circle(monkeypatch):
    monkeypatch.setitem(SOURCES, "sgrun.engine.page_pool", ast.parse(
        "from sgrun.engine.scheduler import Scheduler\n" + ast.unparse(SOURCES["sgrun.engine.page_pool"])))
    assert any("sgrun.engine.page_pool" in c and "sgrun.engine.scheduler" in c for c in engine_cycles())


def test_the_cycle_check_finds_a_lazy_circle_outside_the_engine(monkeypatch):
    # An import inside a function closes a circle as surely as one at the top.
    monkeypatch.setitem(SOURCES, "sgrun.constrain.byte_nfa", ast.parse(
        "def f():\n    from sgrun.constrain.compile import compile_constraint\n"
        + ast.unparse(SOURCES["sgrun.constrain.byte_nfa"])))
    assert any("sgrun.constrain.byte_nfa" in c and "sgrun.constrain.compile" in c for c in import_cycles())


def test_the_engine_facade_stays_a_facade():
    # engine.py runs the loop and takes requests; building Sequences (intake.py), options
    # (engine_builder.py) and warm-ups (request_constraint.py) live in the rooms below it.
    lines = (SGRUN / "engine" / "engine.py").read_text().count("\n")
    assert lines <= 300, f"engine.py has {lines} lines: move what is not the facade's into a room below"


def test_postprocess_takes_its_types_from_below_not_from_the_runner():
    # SampledTokens and Scores live in sampled.py (level 0): the runner makes them, postprocess
    # takes them, and neither stage imports the other.
    stages = {r for r, level in ENGINE_ROOMS.items() if level == ENGINE_ROOMS["postprocess"]} - {"postprocess"}
    reached = {_engine_room(t) for t, _ in _imports(SOURCES["sgrun.engine.postprocess"])}
    assert reached & stages == set()
