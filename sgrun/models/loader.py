"""One entry point: a model spec (None, a GGUF path or a folder) -> config, weights, tokenizer;
the dtype names, and the process-wide cache of loaded models (one beside those in use)."""

from __future__ import annotations

import gc
import os
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path

import torch

from sgrun.errors import InvalidRequestError
from sgrun.models.config import ModelConfig
from sgrun.models.fetch import resolve_model_path
from sgrun.models.gguf_loader import load_gguf
from sgrun.models.llama import LlamaModel
from sgrun.models.quant_linear import QUANT_MODES
from sgrun.models.random_model import is_random_spec, preset_config, random_weights, synthetic_tokenizer
from sgrun.models.safetensors_loader import load_folder
from sgrun.models.tokenizer import Tokenizer


@dataclass
class LoadedModel:
    config: ModelConfig
    weights: dict[str, torch.Tensor]
    tokenizer: Tokenizer
    path: str
    quantization: str = "none"   # what the file's linears are stored as (none, int8, int4)


def load_model_files(model: str | os.PathLike | None, dtype: torch.dtype = torch.float32) -> LoadedModel:
    path = resolve_model_path(model)
    if path.is_dir():
        cfg, raw, weights = load_folder(path, dtype)
        tok = Tokenizer.from_folder(path, vocab_size=cfg.vocab_size, eos_from_config=raw.get("eos_token_id"))
    else:
        cfg, meta, weights = load_gguf(path, dtype)
        tok = Tokenizer.from_gguf_fields(meta, vocab_size=cfg.vocab_size)
        return LoadedModel(cfg, weights, tok, str(path), meta["sgrun.file_quantization"])
    return LoadedModel(cfg, weights, tok, str(path))


def load_tokenizer(model: str | os.PathLike | None) -> Tokenizer:
    """The tokenizer alone (cheap: no weights are dequantized)."""
    path = resolve_model_path(model)
    if path.is_dir():
        return Tokenizer.from_folder(path)
    from sgrun.models.gguf_file import GGUFFile
    from sgrun.models.gguf_loader import config_from_metadata
    meta = GGUFFile(path).metadata
    return Tokenizer.from_gguf_fields(meta, vocab_size=config_from_metadata(meta, path.stem).vocab_size)


def stored_quantization(model: str | os.PathLike | None) -> str:
    """What the file's layer linears are stored as (none, int8, int4), from the header alone."""
    path = resolve_model_path(model)
    if path.is_dir():
        return "none"
    from sgrun.models.gguf_file import GGUFFile
    from sgrun.models.gguf_loader import file_quantization
    return file_quantization(GGUFFile(path))


_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
           "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


def resolve_dtype(dtype: str | torch.dtype, device: torch.device | None = None) -> torch.dtype:
    """A dtype name, or "auto": bf16 on CUDA, on the CPU what measured fastest at its level
    (auto_config.py). `device` is where the model will run (default: CUDA when present)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        from sgrun.models.auto_config import auto_dtype
        return auto_dtype(device)
    if dtype not in _DTYPES:
        raise InvalidRequestError(f"dtype must be one of auto, {', '.join(_DTYPES)}; got {dtype!r}", field="dtype")
    return _DTYPES[dtype]


class _Cached:
    """A loaded model in the process cache: held strongly while it is the one in use, weakly
    once another model is loaded (then it lives only as long as an engine or caller holds it)."""

    def __init__(self, model: LlamaModel, tokenizer: Tokenizer, path: str):
        self.strong: LlamaModel | None = model
        self.weak = weakref.ref(model)
        self.tokenizer, self.path = tokenizer, path

    def get(self) -> tuple[LlamaModel, Tokenizer, str] | None:
        model = self.strong or self.weak()
        if model is None:
            return None
        self.strong = model
        return model, self.tokenizer, self.path


_MODELS: dict[tuple[str, torch.dtype, str, str], _Cached] = {}
_MODELS_LOCK = threading.Lock()


def _cached(key: tuple[str, torch.dtype, str, str], build) -> tuple[LlamaModel, Tokenizer, str]:
    """The model under `key`, built on a miss. Before a miss builds, every other model is let go
    by the cache (held weakly): one no engine or caller holds any more (a closed engine's, once
    the engine is dropped) is freed first, so loading a second model never holds both; one still
    in use stays shared and is taken back on its next hit."""
    with _MODELS_LOCK:
        entry = _MODELS.get(key)
        got = entry.get() if entry is not None else None
        if got is not None:
            return got
        for other in _MODELS.values():
            other.strong = None
        gc.collect()
        for stale in [k for k, e in _MODELS.items() if e.weak() is None]:
            del _MODELS[stale]
        model, tokenizer, path = build()
        _MODELS[key] = _Cached(model, tokenizer, path)
        return model, tokenizer, path


def load_model(model: str | os.PathLike | None, dtype: torch.dtype,
               quantization: str = "auto", device: str | torch.device = "cpu") -> tuple[LlamaModel, Tokenizer, str]:
    """(model, tokenizer, path), loaded once per process and device: weights are read-only at
    inference, so several engines on the same file (tests, benchmarks comparing settings) share
    them; the cache keeps one model beside those in use (_cached). quantization "auto" follows the file (a Q4 GGUF stays int4, Q8 int8, f16/bf16/f32
    dense) where the CPU level's kernels make that fastest (auto_config.py). "random:<preset>" builds random weights in a known config's shape, drawn directly
    on the device, with a synthetic tokenizer (random_model.py)."""
    if quantization not in ("auto", *QUANT_MODES):
        raise InvalidRequestError(f"quantization must be one of auto, {', '.join(QUANT_MODES)}; got {quantization!r}",
                                  field="quantization")
    device = torch.device(device)
    if is_random_spec(model):
        quantization = "none" if quantization == "auto" else quantization

        def build_random() -> tuple[LlamaModel, Tokenizer, str]:
            cfg = preset_config(str(model))
            weights = random_weights(cfg, device=device, dtype=dtype)
            return LlamaModel(cfg, weights, dtype, quantization, device), synthetic_tokenizer(cfg.vocab_size), str(model)
        return _cached((str(model), dtype, quantization, str(device)), build_random)
    path = str(resolve_model_path(model).resolve())
    if quantization == "auto":
        from sgrun.models.auto_config import auto_quantization
        quantization = auto_quantization(stored_quantization(path), device)
    return _cached((path, dtype, quantization, str(device)), lambda: _build_model(path, dtype, quantization, device))


def _build_model(path: str, dtype: torch.dtype, quantization: str,
                 device: torch.device) -> tuple[LlamaModel, Tokenizer, str]:
    """The LlamaModel for one file; on the CPU from the built-model cache when a previous process
    built the same one (model_cache.py), which skips dequantizing and repacking every tensor."""
    def build() -> tuple[LlamaModel, Tokenizer]:
        loaded = load_model_files(path, torch.float32)
        return LlamaModel(loaded.config, loaded.weights, dtype, quantization, device), loaded.tokenizer
    # Only quantized CPU models from a file: they are the slow ones to build (requantize + pack),
    # and the small ones to keep (a dense float32 copy would be 4x the int4 file's size).
    if device.type != "cpu" or Path(path).is_dir() or quantization == "none":
        return (*build(), path)
    from sgrun.kernels.cpu import matmul
    from sgrun.models import model_cache
    key = model_cache.model_key(path, dtype, quantization, device, matmul.available())
    model = model_cache.cached_build(Path(path).stem, key, lambda: build()[0])
    return model, load_tokenizer(path), path


def forget_model(model: str | os.PathLike | None, dtype: torch.dtype, device: str | torch.device) -> None:
    """Drop a cached model, every quantization of it (e.g. a benchmark freeing device memory)."""
    spec = str(model) if is_random_spec(model) else str(resolve_model_path(model).resolve())
    with _MODELS_LOCK:
        for key in [k for k in _MODELS if k[0] == spec and k[1] == dtype and k[3] == str(torch.device(device))]:
            del _MODELS[key]
