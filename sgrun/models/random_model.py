"""Random-weight Llama models from config shapes (like SGLang's `--load-format dummy`), for
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
}


def is_random_spec(model: object) -> bool:
    return isinstance(model, str) and model.startswith(PREFIX)


def preset_config(spec: str) -> ModelConfig:
    name = spec[len(PREFIX):] if spec.startswith(PREFIX) else spec
    if name not in PRESETS:
        raise ModelLoadError(f"unknown random model {name!r}: use one of "
                             + ", ".join(PREFIX + p for p in PRESETS))
    return ModelConfig(rms_eps=1e-5, name=PREFIX + name, **PRESETS[name])


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
    """Normal(0, std) matrices and unit norm weights, in the checkpoint names LlamaModel reads."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def normal(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, device=device, dtype=dtype) * std)

    H, KV, D, hid = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.hidden_size
    w = {"model.embed_tokens.weight": normal(cfg.vocab_size, hid),
         "model.norm.weight": torch.ones(hid, device=device, dtype=dtype)}
    if not cfg.tie_embeddings:
        w["lm_head.weight"] = normal(cfg.vocab_size, hid)
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = torch.ones(hid, device=device, dtype=dtype)
        w[p + "post_attention_layernorm.weight"] = torch.ones(hid, device=device, dtype=dtype)
        w[p + "self_attn.q_proj.weight"] = normal(H * D, hid)
        w[p + "self_attn.k_proj.weight"] = normal(KV * D, hid)
        w[p + "self_attn.v_proj.weight"] = normal(KV * D, hid)
        w[p + "self_attn.o_proj.weight"] = normal(hid, H * D)
        w[p + "mlp.gate_proj.weight"] = normal(cfg.intermediate_size, hid)
        w[p + "mlp.up_proj.weight"] = normal(cfg.intermediate_size, hid)
        w[p + "mlp.down_proj.weight"] = normal(hid, cfg.intermediate_size)
    return w
