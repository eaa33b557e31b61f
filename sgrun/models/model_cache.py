"""Built models kept on disk, so a later start skips dequantizing and repacking the file.

Building SmolLM2's LlamaModel from its Q4_1 GGUF dequantizes every tensor to float32, then
requantizes and packs each linear for the kernels in force: ~13 s of CPU on this machine's two
cores, the largest part of a start-up (docs/benchmarks.md, "Start-up"). The result depends only on
the file, the dtype, the quantization, the kernels that serve it (the ISA level, whether the C++
kernels built) and sgrun's packing code, so it is saved once with `torch.save` under
$SGRUN_CACHE/built_models and loaded on later starts (~0.6 s of CPU). loader.py keeps only
quantized models here (the slow ones to build, and the small ones to keep).

The key covers all of that: the file's path, size and mtime; dtype, quantization, device;
torch's version; the CPU's flags and $SGRUN_CPU_ISA; a hash of every source file under
sgrun/models and sgrun/kernels/cpu (the classes and the packing); and the availability of the
C++ matmul kernel (a process whose build failed packs for torch's kernels instead). A stale or
unreadable entry is rebuilt, never trusted. At most KEEP entries stay; the least recently used
go first. `SGRUN_MODEL_CACHE=0` turns the cache off.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import tempfile
from pathlib import Path
from typing import Callable, TypeVar

import torch

log = logging.getLogger("sgrun.engine")

KEEP = 6
DISABLE_ENV = "SGRUN_MODEL_CACHE"
_T = TypeVar("_T")


def enabled() -> bool:
    return os.environ.get(DISABLE_ENV, "1").strip().lower() not in ("0", "false", "off", "no")


def source_hash() -> str:
    """Every source file that decides how a model is built and packed."""
    pkg = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for folder in (pkg / "models", pkg / "kernels" / "cpu"):
        if folder.is_dir():
            for path in sorted(folder.rglob("*")):
                if path.suffix in (".py", ".cpp", ".h", ".hpp") and path.is_file():
                    h.update(path.name.encode())
                    h.update(path.read_bytes())
    return h.hexdigest()


def model_key(path: str, dtype: torch.dtype, quantization: str, device: torch.device,
              kernels_available: bool) -> str:
    from sgrun.kernels.cpu.isa import cpu_features
    st = os.stat(path)
    parts = [os.path.realpath(path), str(st.st_size), str(st.st_mtime_ns), str(dtype), quantization, str(device),
             torch.__version__, platform.machine(), " ".join(sorted(cpu_features())), os.environ.get("SGRUN_CPU_ISA", ""),
             str(kernels_available), source_hash()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def cache_folder() -> Path:
    from sgrun.models.fetch import cache_dir
    return cache_dir() / "built_models"


def cached_build(name: str, key: str, build: Callable[[], _T]) -> _T:
    """build(), or the object a previous process built under the same key."""
    if not enabled():
        return build()
    folder = cache_folder()
    target = folder / f"{name}-{key}.pt"
    if target.exists():
        _register_kernel_pickling()
        try:
            obj = torch.load(target, weights_only=False, map_location="cpu")
            os.utime(target)        # recently used: kept by _prune
            return obj
        except Exception as exc:    # noqa: BLE001 - a truncated or stale file: rebuild it
            log.warning("built-model cache entry %s unreadable (%s): rebuilding", target.name, type(exc).__name__)
    obj = build()
    _register_kernel_pickling()
    tmp = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, suffix=".tmp", delete=False) as tmp:
            torch.save(obj, tmp)
        os.replace(tmp.name, target)   # atomic: a concurrent reader sees the old file or the whole new one
        _prune(folder)
    except Exception as exc:  # noqa: BLE001 - a read-only or full cache, an unpicklable part: the model still runs
        log.warning("could not save the built model to %s (%s: %s)", folder, type(exc).__name__, exc)
        if tmp is not None:
            Path(tmp.name).unlink(missing_ok=True)
    return obj


def _register_kernel_pickling() -> None:
    """The linears hold their level's kernel ops (a loaded C++ module): saved as the level's
    name and looked up again on load, where the key guarantees the same level and build."""
    import copyreg

    from sgrun.kernels.cpu import matmul
    copyreg.pickle(matmul.MatmulKernels, lambda k: (matmul.kernels, (k.level,)))


def _prune(folder: Path) -> None:
    entries = sorted(folder.glob("*.pt"), key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in entries[KEEP:]:
        stale.unlink(missing_ok=True)
