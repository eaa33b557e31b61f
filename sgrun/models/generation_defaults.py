"""The sampling a model recommends, for places where a person reads the output (`sgrun generate`,
the web page). Programs (the Python API, the HTTP API) keep OpenAI's defaults instead.

Looked up in this order, first hit wins:
1. the model files: a folder's `generation_config.json` (transformers' keys), or a GGUF's
   `general.sampling.*` metadata (llama.cpp's keys);
2. the model card of a known family whose published files carry none (SmolLM2's card generates
   with temperature 0.2, top_p 0.9; its generation_config.json and GGUFs have no sampling keys);
3. DEFAULT: temperature 0.7, top_p 0.9, repetition penalty 1.05 — a common chat setting: varied
   enough not to loop like greedy decoding can, the small penalty discourages verbatim repeats.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RecommendedSampling:
    temperature: float
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    source: str = "default"          # where the values came from, shown to the user

    def as_params(self) -> dict[str, Any]:
        """Keyword arguments for SamplingParams."""
        d = asdict(self)
        d.pop("source")
        return d


DEFAULT = RecommendedSampling(temperature=0.7, top_p=0.9, repetition_penalty=1.05, source="default")

# Families whose published files carry no sampling settings, with what their model card uses.
MODEL_CARDS: dict[str, RecommendedSampling] = {
    "smollm2": RecommendedSampling(temperature=0.2, top_p=0.9, source="SmolLM2 model card"),
}

_GGUF_KEYS = {"general.sampling.temp": "temperature", "general.sampling.top_p": "top_p",
              "general.sampling.top_k": "top_k", "general.sampling.min_p": "min_p",
              "general.sampling.penalty_repeat": "repetition_penalty"}
_HF_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


def _from_generation_config(cfg: dict[str, Any], source: str) -> RecommendedSampling | None:
    found = {k: cfg[k] for k in _HF_KEYS if cfg.get(k) is not None}
    if cfg.get("do_sample") is False:
        return RecommendedSampling(temperature=0.0, source=source)  # the authors ask for greedy
    if not found:
        return None
    return RecommendedSampling(**{"temperature": 1.0, **found}, source=source)  # transformers' default T


def _family(names: list[str]) -> RecommendedSampling | None:
    for name in names:
        low = name.lower()
        for family, rec in MODEL_CARDS.items():
            if family in low:
                return rec
    return None


def recommended_sampling(model_path: str | os.PathLike) -> RecommendedSampling:
    path = Path(model_path)
    if path.is_dir():
        gen = path / "generation_config.json"
        if gen.exists():
            rec = _from_generation_config(json.loads(gen.read_text()), "generation_config.json")
            if rec is not None:
                return rec
        cfg = path / "config.json"
        names = [path.name] + ([str(json.loads(cfg.read_text()).get("_name_or_path", ""))] if cfg.exists() else [])
    else:
        from sgrun.models.gguf_file import GGUFFile
        meta = GGUFFile(path).metadata
        found = {field: meta[key] for key, field in _GGUF_KEYS.items() if key in meta}
        if found:
            return RecommendedSampling(**{"temperature": 1.0, **found}, source="GGUF metadata")
        names = [str(meta.get("general.basename", "")), str(meta.get("general.name", "")), path.stem]
    return _family(names) or DEFAULT
