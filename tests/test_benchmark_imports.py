"""The benchmarks and helper scripts keep pace with the package: every `sgrun` import they make,
at module level or inside a function, names a module and an attribute that exist. (A function-level
import of a moved module only fails when someone runs that benchmark; this finds it at once.)"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py")) + sorted((ROOT / "tests").glob("*.py"))


def sgrun_imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name or None) for each `import sgrun...` / `from sgrun... import name`."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and \
                (node.module == "sgrun" or node.module.startswith("sgrun.")):
            out += [(node.lineno, node.module, a.name) for a in node.names if a.name != "*"]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] == "sgrun"]
    return out


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_sgrun_import_resolves(path):
    missing = []
    for line, module, name in sgrun_imports(path):
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"line {line}: {module}: {exc}")
            continue
        if name is not None and not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"line {line}: {module} has no {name}")
    assert not missing, "\n".join(missing)
