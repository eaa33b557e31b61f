"""Random-weight models of the family from config shapes (like SGLang's `--load-format dummy`), for
kernel and throughput checks on machines where the real weights cannot travel.

`random_model("random:llama-3-8b", device="cuda", dtype=torch.bfloat16)` returns a LoadedModel
whose weights are drawn directly on the target device, and whose tokenizer is synthetic:
byte-level BPE over the model's full vocabulary width (256 byte tokens, two-letter merges, then
filler tokens that decode to short strings), so prompts encode, every sampled id decodes, and
the constraint compiler sees a real token table. The last id is the end-of-text token.
"""

from __future__ import annotations

import itertools
import string

import torch

from sgrun.errors import ModelLoadError
from sgrun.models.config import ModelConfig
from sgrun.models.tokenizer import Tokenizer, bytes_to_unicode

PREFIX = "random:"

# Shapes from the models' config.json files (hidden, intermediate, layers, heads, kv heads, ...).
PRESETS: dict[str, dict] = {
    "tiny": dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                 num_kv_heads=2, head_dim=16, max_position=2048, tie_embeddings=True),
    "smollm2-135m": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30,
                         num_heads=9, num_kv_heads=3, head_dim=64, max_position=8192, rope_theta=100000.0,
                         tie_embeddings=True),
    "llama-3-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_layers=32,
                       num_heads=32, num_kv_heads=8, head_dim=128, max_position=8192, rope_theta=500000.0),
    # The shapes issue 52's benchmarks run (contexts cut to 8,192 to keep the RoPE tables small).
    "qwen3-1.7b": dict(arch="qwen3", vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_layers=28,
                       num_heads=16, num_kv_heads=8, head_dim=128, max_position=8192, rope_theta=1e6,
                       rms_eps=1e-6, tie_embeddings=True, qk_norm="head"),
    "gemma3-1b": dict(arch="gemma3", vocab_size=262144, hidden_size=1152, intermediate_size=6912, num_layers=26,
                      num_heads=4, num_kv_heads=1, head_dim=256, max_position=8192, rope_theta=1e6, rms_eps=1e-6,
                      tie_embeddings=True, qk_norm="head", sandwich_norm=True, hidden_act="gelu_tanh",
                      embed_scale=1152 ** 0.5, attn_scale=256 ** -0.5, sliding_window=512, rope_local_theta=10000.0,
                      layer_windows=[None if (i + 1) % 6 == 0 else 512 for i in range(26)]),
    "qwen3moe-16x2": dict(arch="qwen3moe", vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_layers=24,
                          num_heads=32, num_kv_heads=4, head_dim=128, max_position=8192, rope_theta=1e6, rms_eps=1e-6,
                          qk_norm="head", num_experts=16, experts_per_token=2, norm_topk_prob=True,
                          moe_intermediate_size=768),
    "phi4-mini": dict(arch="phi3", vocab_size=200064, hidden_size=3072, intermediate_size=8192, num_layers=32,
                      num_heads=24, num_kv_heads=8, head_dim=128, rotary_dim=96, max_position=8192, rope_theta=10000.0,
                      tie_embeddings=True),
}


def is_random_spec(model: object) -> bool:
    return isinstance(model, str) and model.startswith(PREFIX)


def preset_config(spec: str) -> ModelConfig:
    name = spec[len(PREFIX):] if spec.startswith(PREFIX) else spec
    if name not in PRESETS:
        raise ModelLoadError(f"unknown random model {name!r}: use one of "
                             + ", ".join(PREFIX + p for p in PRESETS))
    return ModelConfig(**{"rms_eps": 1e-5, "name": PREFIX + name, **PRESETS[name]})


def synthetic_tokenizer(vocab_size: int) -> Tokenizer:
    """Byte-level BPE with exactly vocab_size ids: bytes, two-letter merges, filler, end-of-text."""
    chars = bytes_to_unicode()
    tokens = [chars[b] for b in range(256)]
    letters = string.ascii_letters + string.digits
    merges: list[str] = []
    for a, b in itertools.product(letters, repeat=2):
        if len(tokens) >= vocab_size - 1:
            break
        tokens.append(a + b)
        merges.append(f"{a} {b}")
    # Unreachable by encoding but decodable (e.g. when a random model samples them).
    for a, b, c in itertools.product(string.ascii_lowercase, repeat=3):
        if len(tokens) >= vocab_size - 1:
            break
        tokens.append(a + b + c)
    n = 0
    while len(tokens) < vocab_size - 1:
        tokens.append(f"{chars[ord('~')]}{n}")
        n += 1
    tokens.append("<|endoftext|>")
    eos = len(tokens) - 1
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": [1] * eos + [3], "tokenizer.ggml.merges": merges,
            "tokenizer.ggml.eos_token_id": eos}
    return Tokenizer.from_gguf_fields(meta, vocab_size=vocab_size)


def random_weights(cfg: ModelConfig, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                   seed: int = 0, std: float = 0.02) -> dict[str, torch.Tensor]:
    """Normal(0, std) matrices and unit norm weights, in the names the decoder reads
    (models/decoder.py), for any architecture of the family."""
    from sgrun.models.decoder import expected_shapes, required_weights
    gen = torch.Generator(device=device).manual_seed(seed)
    shapes = expected_shapes(cfg)
    w: dict[str, torch.Tensor] = {}
    for name in required_weights(cfg):
        shape = shapes[name]
        if len(shape) == 1:
            w[name] = torch.ones(shape, device=device, dtype=dtype)
        else:
            w[name] = torch.randn(*shape, generator=gen, device=device, dtype=dtype) * std
    return w
