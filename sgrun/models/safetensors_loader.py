"""Read a Hugging Face-style model folder: config.json + *.safetensors, through the
architecture's config reader and name map (models/arch/)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from tqdm.auto import tqdm

from sgrun.errors import ModelLoadError
from sgrun.models import arch as archs
from sgrun.models.config import ModelConfig


def load_folder(folder: Path, dtype: torch.dtype) -> tuple[ModelConfig, dict, dict[str, torch.Tensor]]:
    cfg_path = folder / "config.json"
    if not cfg_path.exists():
        raise ModelLoadError(f"{folder} has no config.json")
    raw = json.loads(cfg_path.read_text())
    if raw.get("model_type") == "gemma3" and "text_config" in raw:   # the multimodal wrapper: its text model
        raw = {**raw["text_config"], "model_type": "gemma3_text"}
    cfg = archs.config_from_hf(raw, name=folder.name)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"{folder} has no *.safetensors files")
    tensors: dict[str, torch.Tensor] = {}
    for f in tqdm(files, desc=f"loading {folder.name}", unit="file", disable=None, leave=False):
        tensors.update(load_file(str(f)))
    weights = {name: t.to(dtype) for name, t in archs.hf_weights(cfg, tensors).items()}
    if "lm_head.weight" not in weights:
        cfg.tie_embeddings = True
    return cfg, raw, weights
