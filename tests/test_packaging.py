"""What a fresh install needs: every import the package makes is declared in pyproject.toml, every
module imports in a clean interpreter, and the wheel ships every non-Python file the code opens.

A missing declaration only shows on a machine that never had the package (issue: every Lark grammar
failed without `interegular`, a wheel install lost the C++ matmul), so these checks read the
declarations themselves instead of trusting what happens to be installed here.
"""

from __future__ import annotations

import ast
import os
import importlib.metadata as md
import pkgutil
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE_ROOTS = ("sgrun",)
FIRST_PARTY = {"sgrun", "__future__"}
# lark's strict mode (constrain/lark_build.py builds every LALR grammar with strict=True) imports this
# lazily, so no `import` line names it; it must still be a core dependency.
INDIRECT_CORE = {"interegular"}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> tuple[str, set[str]]:
    match = re.match(r"\s*([A-Za-z0-9_.-]+)\s*(\[([^\]]*)\])?", requirement)
    assert match, requirement
    extras = {_normalise(e) for e in (match.group(3) or "").split(",") if e.strip()}
    return _normalise(match.group(1)), extras


def _declared() -> tuple[set[str], set[str]]:
    """(core distributions, distributions of any extra), normalised; `lark[interegular]` declares both."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core, optional = set(), set()
    for requirement in project["dependencies"]:
        name, extras = _requirement_name(requirement)
        core |= {name} | extras
    for requirements in project.get("optional-dependencies", {}).values():
        for requirement in requirements:
            name, extras = _requirement_name(requirement)
            optional |= {name} | extras
    return core, optional


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(top-level module, unconditional) for every absolute import in the file: unconditional means at
    module level and outside a try block, so the module cannot import without it."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, conditional: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = conditional or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Try, ast.If))
            if isinstance(child, ast.Import):
                found.extend((alias.name.split(".")[0], not conditional) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.module.split(".")[0], not conditional))
            visit(child, nested)

    visit(tree, False)
    return found


def _source_files() -> list[Path]:
    return [p for root in PACKAGE_ROOTS for p in (REPO / root).rglob("*.py")]


def test_every_third_party_import_is_declared():
    core, optional = _declared()
    distributions = md.packages_distributions()
    problems = []
    for path in _source_files():
        for module, unconditional in _imports(path):
            if module in sys.stdlib_module_names or module in FIRST_PARTY:
                continue
            names = {_normalise(d) for d in distributions.get(module, [module])}
            declared_in = core if unconditional else core | optional
            if not names & declared_in:
                where = "dependencies" if unconditional else "dependencies or an extra"
                problems.append(f"{path.relative_to(REPO)} imports {module!r} ({sorted(names)}), not in {where}")
    assert not problems, "\n".join(problems)


def test_indirect_core_dependencies_are_declared():
    core, _ = _declared()
    assert INDIRECT_CORE <= core, f"pyproject.toml must declare {sorted(INDIRECT_CORE - core)}"


def test_declared_core_dependencies_are_installed():
    """The clean environment CI builds installs exactly these; a missing one means the install is broken."""
    core, _ = _declared()
    missing = []
    for name in core:
        try:
            md.distribution(name)
        except md.PackageNotFoundError:
            missing.append(name)
    assert not missing, f"declared but not installed: {missing}"


def _module_names() -> list[str]:
    import sgrun

    names = ["sgrun"]
    for info in pkgutil.walk_packages(sgrun.__path__, prefix="sgrun."):
        names.append(info.name)
    return sorted(names)


def test_the_checkout_root_shadows_no_other_distribution():
    """`python -m pytest` / `python -m sgrun` from the checkout put its root first on sys.path, so any
    package folder there hides an installed distribution of that name. A top-level `kernels/` (the
    Triton kernels, until 3 December 2026) hid Hugging Face's `kernels`, which transformers >= 5.25 requires
    and imports: every transformers import failed from the checkout. Only `sgrun` may be a package there,
    and from the root `kernels` must resolve to the installed distribution, if any, never into the repo."""
    packages = sorted(p.name for p in REPO.iterdir() if (p / "__init__.py").is_file())
    assert packages == ["sgrun"], packages
    probe = ("import importlib.util, sys; spec = importlib.util.find_spec('kernels'); "
             "print(spec.origin if spec and spec.origin else '')")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    origin = proc.stdout.strip()
    assert not origin or not Path(origin).resolve().is_relative_to(REPO), origin


def test_every_module_imports_in_a_clean_interpreter():
    """One subprocess imports every module of the package: an undeclared or broken import fails here
    even where the test process itself already imported a stand-in. Modules that need a GPU-only
    optional package (triton) guard their import, so they import everywhere."""
    names = _module_names()
    assert len(names) > 100, names  # the walk found the package, not an empty path
    script = (
        "import importlib, sys, traceback\n"
        "failed = []\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception:\n"
        "        failed.append(name + ': ' + traceback.format_exc(limit=2).strip().splitlines()[-1])\n"
        "print('\\n'.join(failed))\n"
        "sys.exit(1 if failed else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, *names], capture_output=True, text=True, timeout=600,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]


def _shipped_data_files() -> list[str]:
    """Every tracked non-Python file inside the package folders: each is opened at run time (C++
    sources built on first use, grammars, the web page's static files), so each must be in the wheel,
    under the name the installed package gives it."""
    listed = subprocess.run(["git", "ls-files", *PACKAGE_ROOTS], cwd=REPO, capture_output=True, text=True)
    if listed.returncode != 0:  # not a git checkout (a source tarball): walk the folders instead
        paths = [str(p.relative_to(REPO)) for root in PACKAGE_ROOTS for p in (REPO / root).rglob("*") if p.is_file()]
    else:
        paths = listed.stdout.split()
    shipped = []
    for path in paths:
        if path.endswith((".py", ".pyc")) or "/__pycache__/" in path or Path(path).name.startswith("."):
            continue
        shipped.append(path)
    return shipped


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "--disable-pip-version-check", "-q", "-w", str(out), str(REPO)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wheels = list(out.glob("sgrun-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_ships_every_file_the_code_opens(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    data = _shipped_data_files()
    assert any(p.endswith(".cpp") for p in data) and any(p.endswith(".lark") for p in data), data
    missing = [p for p in data if p not in names]
    assert not missing, f"the wheel lacks {missing}: add them to [tool.setuptools.package-data]"
    sources = {f"sgrun/{p.relative_to(REPO / 'sgrun')}" for p in (REPO / "sgrun").rglob("*.py")}
    assert not sources - names, sorted(sources - names)


def test_wheel_install_loads_every_kernel_the_cpu_supports(wheel, tmp_path):
    """Install the wheel (not editable) into a folder of its own, put that folder first on the path, and
    load every C++ kernel this CPU supports from it, running in a folder outside the repository so the
    checkout cannot stand in for the installed copy. (A nested venv would not see this environment's
    third-party packages when the tests themselves run in a venv, as CI's do.)"""
    target = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "-q",
                           "--target", str(target), str(wheel)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    env = {**os.environ, "PYTHONPATH": str(target)}
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "installed_kernels_check.py")], capture_output=True,
                          text=True, timeout=900, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert f"sgrun from {target}" in proc.stdout, proc.stdout  # the installed copy ran, not the checkout
