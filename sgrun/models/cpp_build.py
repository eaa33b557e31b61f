"""Build-on-first-use C++ kernels (torch.utils.cpp_extension.load_inline), cached on disk.

Every CPU kernel sgrun ships as C++ source goes through one `CppKernel`: the build is named by a
hash of the source, the flags, torch's version and this CPU's flags (the sources are built with
-march=native, so a cache shared with a different CPU must not reuse a build), it is thread-safe
(concurrent processes share it through torch's lock file), and where it fails (no compiler, no
headers, a broken toolchain) `load()` returns None and says so once in the log, so the caller
can take its torch fallback.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import threading
from pathlib import Path
from types import ModuleType

import torch

log = logging.getLogger("sgrun.engine")

DEFAULT_FLAGS = ("-O3", "-fopenmp", "-march=native", "-std=c++17")


def cpu_flags() -> str:
    """The CPU's feature flags line from /proc/cpuinfo ("" where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return ""


def _cpu_key() -> str:
    return (platform.processor() or platform.machine()) + cpu_flags()


class CppKernel:
    """One C++ source file (or several, compiled as one translation unit in the order given)
    built into a Python module exposing `functions`.

    `what`: how the log names it; `fallback`: what the caller does instead, for the log line;
    `fail_env`: an environment variable that, when set, makes the build fail (tests use it to
    simulate a machine without a compiler)."""

    def __init__(self, name: str, source: Path | tuple[Path, ...], functions: list[str], what: str, fallback: str,
                 fail_env: str, flags: tuple[str, ...] = DEFAULT_FLAGS):
        self.name, self.functions = name, functions
        self.sources = source if isinstance(source, tuple) else (source,)
        self.what, self.fallback, self.fail_env, self.flags = what, fallback, fail_env, flags
        self._lock = threading.Lock()
        self._loaded = False
        self._module: ModuleType | None = None

    def source_text(self) -> str:
        return "\n".join(path.read_text() for path in self.sources)

    def build_name(self) -> str:
        key = "\n".join([self.source_text(), " ".join(self.flags), torch.__version__, _cpu_key()])
        return f"sgrun_{self.name}_" + hashlib.sha256(key.encode()).hexdigest()[:12]

    def build_dir(self) -> str:
        from sgrun.models.fetch import cache_dir
        path = cache_dir() / "torch_extensions" / self.build_name()
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    def load(self) -> ModuleType | None:
        """The compiled module, built on first use; None (logged once) where it cannot be built."""
        with self._lock:
            if self._loaded:
                return self._module
            module = None
            try:
                if os.environ.get(self.fail_env):
                    raise RuntimeError(f"build disabled by {self.fail_env}")
                from torch.utils.cpp_extension import load_inline
                module = load_inline(self.build_name(), cpp_sources=self.source_text(),
                                     functions=self.functions, extra_cflags=list(self.flags),
                                     extra_ldflags=["-fopenmp"], build_directory=self.build_dir(), verbose=False)
            except Exception as exc:  # any build or load failure: the caller's torch path still works
                text = str(exc).strip()
                log.warning("%s is unavailable (%s); %s", self.what,
                            text.splitlines()[-1] if text else type(exc).__name__, self.fallback)
            self._module, self._loaded = module, True
            return module

    def reset_for_tests(self) -> None:
        """Forget the loaded module so the next load() runs the build (or its failure) again."""
        with self._lock:
            self._loaded, self._module = False, None
