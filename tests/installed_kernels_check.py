"""Run by tests/test_packaging.py with an installed (non-editable) sgrun: builds and loads every C++
kernel the package defines from the installed copy's sources, and prints where sgrun was imported
from. Exits non-zero naming each kernel that did not load where this CPU supports it."""

import importlib
import pkgutil
import sys

import sgrun
from sgrun.models.cpp_build import CppKernel

print("sgrun from", sgrun.__file__)
kernels: dict[str, CppKernel] = {}
for info in pkgutil.walk_packages(sgrun.__path__, prefix="sgrun."):
    module = importlib.import_module(info.name)
    for value in vars(module).values():
        if isinstance(value, CppKernel):
            kernels[value.name] = value
if not kernels:
    sys.exit("no C++ kernel found in the installed package")
failed = []
for name, kernel in sorted(kernels.items()):
    loaded = kernel.load() is not None
    print(f"{name}: {'loaded' if loaded else 'FAILED'} from {', '.join(str(s) for s in kernel.sources)}")
    if not loaded:
        failed.append(name)
    elif not all(str(s).startswith(str(sgrun.__path__[0])) for s in kernel.sources):
        failed.append(f"{name} (sources outside the installed package)")
from sgrun.models import cpu_matmul
if cpu_matmul.cpu_supported() and not cpu_matmul.available():
    failed.append("cpu_matmul fast path (the CPU has AVX512-BF16)")
sys.exit(f"kernels that did not load: {failed}" if failed else 0)
