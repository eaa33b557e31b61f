"""Read a Hugging Face-style model folder: config.json + *.safetensors."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from tqdm.auto import tqdm

from sgrun.errors import ModelLoadError
from sgrun.models.config import ModelConfig

SUPPORTED_MODEL_TYPES = {"llama", "qwen2", "mistral"}


def load_folder(folder: Path, dtype: torch.dtype) -> tuple[ModelConfig, dict, dict[str, torch.Tensor]]:
    cfg_path = folder / "config.json"
    if not cfg_path.exists():
        raise ModelLoadError(f"{folder} has no config.json")
    raw = json.loads(cfg_path.read_text())
    if raw.get("model_type") not in SUPPORTED_MODEL_TYPES:
        raise ModelLoadError(f"model_type {raw.get('model_type')!r} is not supported "
                             f"(supported: {sorted(SUPPORTED_MODEL_TYPES)})")
    cfg = ModelConfig.from_hf(raw, name=folder.name)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"{folder} has no *.safetensors files")
    weights: dict[str, torch.Tensor] = {}
    for f in tqdm(files, desc=f"loading {folder.name}", unit="file", disable=None, leave=False):
        for name, t in load_file(str(f)).items():
            weights[name] = t.to(dtype)
    if "lm_head.weight" not in weights:
        cfg.tie_embeddings = True
    return cfg, raw, weights
