"""Decode attention that reads the KV pages in place: a C++ kernel (paged_decode.cpp) built with
torch's extension mechanism (torch.utils.cpp_extension.load_inline) on first use, cached on disk.

`paged_decode` attends each decoding row's query heads over its context through its page
table. One work item is (row, kv head, chunk of that head's query heads): it walks the context
in blocks of 16 tokens, converts each block's K and V to float32 once and uses them for every
query head of the GQA group, with an online softmax (exp in vectorizable arithmetic), so
nothing is gathered, padded or masked. It returns float32 outputs and log-sum-exps.
`cascade_prefix` attends one shared prefix for the stacked queries of every row that shares
it (one K/V read for all of them) and merges that into paged_decode's results by log-sum-exp.
Work items are spread with at::parallel_for (torch's OpenMP pool: torch.set_num_threads
governs it); small problems run on the calling thread.

Where the build fails (no compiler, no headers, a broken toolchain) `load_kernel` returns None
and says so once in the log; the caller then uses the gather path (attention_torch.py).
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

_SOURCE_FILE = Path(__file__).with_name("paged_decode.cpp")
_SOURCE = _SOURCE_FILE.read_text()

_FLAGS = ["-O3", "-fopenmp", "-march=native", "-std=c++17"]

# Tests set this to simulate a machine where the build fails.
FORCE_BUILD_FAILURE_ENV = "SGRUN_CPP_ATTENTION_FAIL"

_lock = threading.Lock()
_state: dict[str, object] = {}


def _build_name() -> str:
    """One build per source, flags, torch version and CPU (the build uses -march=native, so a
    cache shared with a different CPU must not reuse it)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu += next((line for line in f if line.startswith("flags")), "")
    except OSError:
        pass
    key = "\n".join([_SOURCE, " ".join(_FLAGS), torch.__version__, cpu])
    return "sgrun_paged_decode_" + hashlib.sha256(key.encode()).hexdigest()[:12]


def build_dir() -> str:
    from sgrun.models.fetch import cache_dir
    path = cache_dir() / "torch_extensions" / _build_name()
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def load_kernel() -> ModuleType | None:
    """The compiled module (`paged_decode`, `cascade_prefix`), built on first use; None (logged
    once) where it cannot be built. Thread-safe; concurrent processes share the build through
    torch's lock file."""
    with _lock:
        if "op" in _state:
            return _state["op"]  # type: ignore[return-value]
        op = None
        try:
            if os.environ.get(FORCE_BUILD_FAILURE_ENV):
                raise RuntimeError(f"build disabled by {FORCE_BUILD_FAILURE_ENV}")
            from torch.utils.cpp_extension import load_inline
            module = load_inline(_build_name(), cpp_sources=_SOURCE, functions=["paged_decode", "cascade_prefix"],
                                 extra_cflags=_FLAGS, extra_ldflags=["-fopenmp"], build_directory=build_dir(),
                                 verbose=False)
            op = module
        except Exception as exc:  # any build or load failure: the gather path still works
            log.warning("C++ paged decode attention is unavailable (%s); decode attention gathers pages "
                        "with the torch path instead", str(exc).strip().splitlines()[-1] if str(exc).strip() else
                        type(exc).__name__)
        _state["op"] = op
        return op


def reset_for_tests() -> None:
    """Forget the loaded op so the next load_kernel() runs the build (or its failure) again."""
    with _lock:
        _state.clear()
