"""Build-on-first-use C++ kernels (torch.utils.cpp_extension.load_inline), one build per CPU level.

Every CPU kernel sgrun ships as C++ source goes through one `CppKernel`. `load(level)` builds the
sources with that level's compiler flags (isa.py: -march=x86-64-v3 for avx2, never
-march=native), defines SGRUN_ISA to the level's name, and caches the build on disk under a name
made from the level, a hash of the sources, the flags and torch's version: a level's build runs on
any CPU of that level, so a shared cache may reuse it, and builds of different levels never mix.
Builds are thread-safe (concurrent processes share one through torch's lock file). Where a build
fails (no compiler, no headers, a broken toolchain) `load()` returns None and says so once in the
log, so the caller takes its torch fallback.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import threading
from pathlib import Path
from types import ModuleType
from typing import Iterator

import torch

from sgrun.kernels.cpu import isa

log = logging.getLogger("sgrun.engine")

COMMON_FLAGS = ("-O3", "-fopenmp", "-std=c++17")
# Prepended to every kernel's sources in place of the <torch/extension.h> load_inline would add
# (it costs each build more than half its time; the file says why).
TORCH_HEADERS = Path(__file__).with_name("torch_headers.cpp")


def level_flags(level: isa.Level) -> tuple[str, ...]:
    """The flags one level's build of every kernel gets (SGRUN_ISA names the level in the code)."""
    built = isa.build_level(level)
    return COMMON_FLAGS + built.flags + (f"-DSGRUN_ISA={built.name}",)


@contextlib.contextmanager
def _build_lock(build_dir: str) -> Iterator[None]:
    """One builder per build folder across processes, through a lock the kernel releases when its
    holder dies. torch's own `lock` file (its FileBaton) is not released by a process that is
    killed mid-build (out of memory, Ctrl-C), and every later start then waits on it forever; while
    this lock is held no other sgrun process is building here, so a torch lock file found is stale
    and goes."""
    with open(os.path.join(build_dir, "sgrun.build.lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            stale = os.path.join(build_dir, "lock")
            if os.path.exists(stale):
                log.warning("removing a stale build lock left by an interrupted build: %s", stale)
                os.remove(stale)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class CppKernel:
    """One C++ source file (or several, compiled as one translation unit in the order given)
    built into a Python module exposing `functions`, once per CPU level asked for.

    `what`: how the log names it; `fallback`: what the caller does instead, for the log line;
    `fail_env`: an environment variable that, when set, makes the build fail (tests use it to
    simulate a machine without a compiler); `flags`: added to the level's."""

    def __init__(self, name: str, source: Path | tuple[Path, ...], functions: list[str], what: str, fallback: str,
                 fail_env: str, flags: tuple[str, ...] = ()):
        self.name, self.functions = name, functions
        self.sources = source if isinstance(source, tuple) else (source,)
        self.what, self.fallback, self.fail_env, self.flags = what, fallback, fail_env, flags
        self._lock = threading.Lock()
        self._modules: dict[str, ModuleType | None] = {}

    def source_text(self) -> str:
        """torch_headers.cpp (the torch headers every kernel compiles against), then the sources."""
        return "\n".join(path.read_text() for path in (TORCH_HEADERS, *self.sources))

    def build_flags(self, level: isa.Level) -> list[str]:
        return list(level_flags(level) + self.flags)

    def build_name(self, level: isa.Level) -> str:
        built = isa.build_level(level)
        key = "\n".join([self.source_text(), " ".join(self.build_flags(level)),
                         torch.__version__, built.arch])
        return f"sgrun_{self.name}_{built.name}_" + hashlib.sha256(key.encode()).hexdigest()[:12]

    def build_dir(self, level: isa.Level) -> str:
        from sgrun.cache_paths import cache_dir
        path = cache_dir() / "torch_extensions" / self.build_name(level)
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    def load(self, level: isa.Level | str | None = None) -> ModuleType | None:
        """The module built for `level` (default: the active level, SGRUN_CPU_ISA or the CPU's
        best), built on first use; None (logged once per level) where it cannot be built."""
        built = isa.build_level(isa.resolve(level))
        with self._lock:
            if built.name in self._modules:
                return self._modules[built.name]
            module = None
            try:
                if os.environ.get(self.fail_env):
                    raise RuntimeError(f"build disabled by {self.fail_env}")
                from torch.utils.cpp_extension import load_inline
                build_dir = self.build_dir(built)
                with _build_lock(build_dir):
                    module = load_inline(self.build_name(built), cpp_sources=self.source_text(),
                                         functions=self.functions, extra_cflags=self.build_flags(built),
                                         extra_ldflags=["-fopenmp"], build_directory=build_dir, verbose=False,
                                         no_implicit_headers=True)
            except Exception as exc:  # any build or load failure: the caller's torch path still works
                text = str(exc).strip()
                log.warning("%s is unavailable at CPU level %s (%s); %s", self.what, built.name,
                            text.splitlines()[-1] if text else type(exc).__name__, self.fallback)
            self._modules[built.name] = module
            return module

    def reset_for_tests(self) -> None:
        """Forget the loaded modules so the next load() runs the build (or its failure) again."""
        with self._lock:
            self._modules.clear()


class SharedLibrary:
    """C++ sources (one, or several linked together) built into a plain shared library (a C ABI
    for ctypes: no torch headers, so a build takes about a second), once per source text and
    compiler, cached on disk beside the kernels under the same kind of lock. Not per CPU level:
    the code is portable C++ built for the baseline of its architecture. `load()` returns the
    library's path, or None (logged once) where it cannot be built."""

    def __init__(self, name: str, source: Path | tuple[Path, ...], what: str, fallback: str, fail_env: str,
                 flags: tuple[str, ...] = ("-O2", "-std=c++17", "-fPIC", "-shared")):
        self.name, self.what, self.fallback, self.fail_env, self.flags = name, what, fallback, fail_env, flags
        self.sources = source if isinstance(source, tuple) else (source,)
        self._lock = threading.Lock()
        self._path: str | None | bool = False

    def load(self) -> str | None:
        import platform
        import shutil
        import subprocess
        with self._lock:
            if self._path is not False:
                return self._path
            path = None
            try:
                if os.environ.get(self.fail_env):
                    raise RuntimeError(f"build disabled by {self.fail_env}")
                from sgrun.cache_paths import cache_dir
                compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
                if compiler is None:
                    raise RuntimeError("no C++ compiler (g++) on PATH")
                text = "\n".join(path.read_text() for path in self.sources)
                key = "\n".join([text, " ".join(self.flags), compiler, platform.machine()])
                folder = cache_dir() / "libraries"
                folder.mkdir(parents=True, exist_ok=True)
                target = folder / f"sgrun_{self.name}_{hashlib.sha256(key.encode()).hexdigest()[:12]}.so"
                with _build_lock(str(folder)):
                    if not target.exists():
                        tmp = target.with_suffix(f".{os.getpid()}.tmp")
                        done = subprocess.run([compiler, *self.flags, "-o", str(tmp), *map(str, self.sources)],
                                              capture_output=True, text=True, timeout=300)
                        if done.returncode != 0:
                            raise RuntimeError((done.stderr or done.stdout).strip() or "compiler failed")
                        os.replace(tmp, target)
                path = str(target)
            except Exception as exc:  # any build failure: the caller's Python path still works
                text = str(exc).strip()
                log.warning("%s is unavailable (%s); %s", self.what, text.splitlines()[-1] if text else
                            type(exc).__name__, self.fallback)
            self._path = path
            return path
