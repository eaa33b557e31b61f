"""One entry point: a model spec (None, a GGUF path or a folder) -> config, weights, tokenizer;
the dtype names, and the process-wide cache of loaded models."""

from __future__ import annotations

import os
import threading
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


_MODELS: dict[tuple[str, torch.dtype, str, str], tuple[LlamaModel, Tokenizer, str]] = {}
_MODELS_LOCK = threading.Lock()


def load_model(model: str | os.PathLike | None, dtype: torch.dtype,
               quantization: str = "auto", device: str | torch.device = "cpu") -> tuple[LlamaModel, Tokenizer, str]:
    """(model, tokenizer, path), loaded once per process and device: weights are read-only at
    inference, so several engines on the same file (tests, benchmarks comparing settings) share
    them. quantization "auto" follows the file (a Q4 GGUF stays int4, Q8 int8, f16/bf16/f32
    dense) where the CPU level's kernels make that fastest (auto_config.py). "random:<preset>" builds random weights in a known config's shape, drawn directly
    on the device, with a synthetic tokenizer (random_model.py)."""
    if quantization not in ("auto", *QUANT_MODES):
        raise InvalidRequestError(f"quantization must be one of auto, {', '.join(QUANT_MODES)}; got {quantization!r}",
                                  field="quantization")
    device = torch.device(device)
    if is_random_spec(model):
        quantization = "none" if quantization == "auto" else quantization
        key = (str(model), dtype, quantization, str(device))
        with _MODELS_LOCK:
            if key not in _MODELS:
                cfg = preset_config(str(model))
                weights = random_weights(cfg, device=device, dtype=dtype)
                _MODELS[key] = (LlamaModel(cfg, weights, dtype, quantization, device),
                                synthetic_tokenizer(cfg.vocab_size), str(model))
            return _MODELS[key]
    path = str(resolve_model_path(model).resolve())
    if quantization == "auto":
        from sgrun.models.auto_config import auto_quantization
        quantization = auto_quantization(stored_quantization(path), device)
    key = (path, dtype, quantization, str(device))
    with _MODELS_LOCK:
        if key not in _MODELS:
            _MODELS[key] = _build_model(path, dtype, quantization, device)
        return _MODELS[key]


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
