"""One entry point: a model spec (None, a GGUF path or a folder) -> config, weights, tokenizer."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from sgrun.models.config import ModelConfig
from sgrun.models.fetch import resolve_model_path
from sgrun.models.gguf_loader import load_gguf
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
