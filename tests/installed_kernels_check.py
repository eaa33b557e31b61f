"""Run by tests/test_packaging.py with an installed (non-editable) sgrun: builds and loads every C++
kernel of the package at every CPU level this machine runs, from the installed copy's sources, and
prints where sgrun was imported from. Exits non-zero naming each kernel and level that did not load."""

import importlib
import pkgutil
import sys

import sgrun
import sgrun.kernels.cpu
from sgrun.kernels.cpu import isa, matmul
from sgrun.kernels.cpu.build import CppKernel

print("sgrun from", sgrun.__file__)
kernels: dict[str, CppKernel] = {}
for info in pkgutil.walk_packages(sgrun.kernels.cpu.__path__, prefix="sgrun.kernels.cpu."):
    for value in vars(importlib.import_module(info.name)).values():
        if isinstance(value, CppKernel):
            kernels[value.name] = value
if not kernels:
    sys.exit("no C++ kernel found in the installed package")
installed = str(sgrun.__path__[0])
failed = []
for level in isa.supported_levels():
    for name, kernel in sorted(kernels.items()):
        loaded = kernel.load(level) is not None
        print(f"{level.name} {name}: {'loaded' if loaded else 'FAILED'}")
        if not loaded:
            failed.append(f"{name} at {level.name}")
        elif not all(str(s).startswith(installed) for s in kernel.sources):
            failed.append(f"{name} (sources outside the installed package)")
    if matmul.has_tiles(level) and not matmul.available(level):
        failed.append(f"matmul tiles at {level.name}")
sys.exit(f"kernels that did not load: {failed}" if failed else 0)
