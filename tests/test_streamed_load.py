"""A GGUF model is built one tensor at a time (gguf_loader.GGUFWeights) and each linear quantized a
block of rows at a time (quant_linear.row_blocks): the packed weights must be bit for bit what
dequantizing every tensor whole, then quantizing each weight whole, made."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gguf
from gguf.quants import dequantize

from model_family import tiny_model, write_gguf
from sgrun.models import quant_linear
from sgrun.models.decoder import DecoderModel
from sgrun.models.gguf_loader import GGUFWeights, _unpermute_rope, load_gguf


@pytest.fixture(scope="module")
def tok_meta(model_path):
    from sgrun.models.gguf_file import GGUFFile
    return GGUFFile(model_path).metadata


def whole_tensor_reference(weights: GGUFWeights, name: str) -> np.ndarray:
    """The tensor as the whole-file loader read it: the GGUF tensor dequantized whole, then the
    expert taken, the fused rows split, the Q/K rows unpermuted."""
    src = weights.sources[name]
    arr = np.asarray(dequantize(src.tensor.data, src.tensor.qtype), dtype=np.float32).reshape(src.tensor.shape)
    if src.expert is not None:
        arr = arr[src.expert]
    if src.rows is not None:
        arr = arr[src.rows[0]:src.rows[1]]
    if src.unpermute_heads is not None:
        arr = _unpermute_rope(arr, src.unpermute_heads)
    return arr


def packed_state(model: DecoderModel) -> dict[str, torch.Tensor]:
    """Every tensor the built model holds (packed codes, scales, norms, tables), by path."""
    out: dict[str, torch.Tensor] = {}

    def walk(prefix: str, obj) -> None:
        if isinstance(obj, torch.Tensor):
            out[prefix] = obj
        elif isinstance(obj, (list, tuple)):
            for i, x in enumerate(obj):
                walk(f"{prefix}[{i}]", x)
        elif hasattr(obj, "__dict__") and not isinstance(obj, (type, torch.nn.Module)) and "sgrun" in type(obj).__module__:
            for k, v in vars(obj).items():
                if k not in ("cfg", "ops"):
                    walk(f"{prefix}.{k}", v)

    walk("model", model)
    return out


# Experts, fused rows, permuted Q/K, an F16 file requantized to int4: 0.6-3.5 s each on the quiet
# 2-core machine (65-95 s at load 11 from other work).
@pytest.mark.parametrize("arch,qtype", [("qwen3moe", "Q4_0"), ("phi3", "Q8_0"), ("llama", "Q4_1"), ("qwen3", "F16")])
def test_streamed_load_is_bit_identical_to_whole_tensors(arch, qtype, tmp_path, tok_meta, monkeypatch):
    path = tmp_path / f"{arch}-{qtype}.gguf"
    write_gguf(arch, tiny_model(arch), path, getattr(gguf.GGMLQuantizationType, qtype), tok_meta)
    cfg, meta, weights = load_gguf(path, torch.float32)
    assert isinstance(weights, GGUFWeights)

    # Each tensor read alone (an expert, a fused tensor's rows, cut from the quantized bytes)
    # equals the same part of the whole tensor dequantized.
    whole = {}
    for name in weights:
        ref = whole_tensor_reference(weights, name)
        assert weights.shape(name) == ref.shape, name
        got = weights[name]
        assert torch.equal(got, torch.from_numpy(np.array(ref, copy=True))), name
        whole[name] = got

    quantization = meta["sgrun.file_quantization"] if qtype != "F16" else "int4"
    # The previous path: every tensor in memory, each weight quantized in one block.
    monkeypatch.setattr(quant_linear, "LOAD_BLOCK_BYTES", 1 << 40)
    before = packed_state(DecoderModel(cfg, whole, torch.float32, quantization))
    # Streamed: tensors read as used, quantized 64 rows at a time (the embedding in row blocks).
    monkeypatch.setattr(quant_linear, "LOAD_BLOCK_BYTES", 1)
    after = packed_state(DecoderModel(cfg, weights, torch.float32, quantization))
    assert before.keys() == after.keys()
    assert any(k.endswith(("codes", "blocked", "packed", ".q")) for k in after)
    for key in before:
        assert before[key].dtype == after[key].dtype and torch.equal(before[key], after[key]), key


def test_row_blocks_cover_the_weight_in_whole_tiles(monkeypatch):
    monkeypatch.setattr(quant_linear, "LOAD_BLOCK_BYTES", 64 * 4 * 32 * 2)
    w = torch.randn(300, 32)
    blocks = list(quant_linear.row_blocks(w))
    assert [(s, e) for s, e, _ in blocks] == [(0, 128), (128, 256), (256, 300)]
    assert torch.equal(torch.cat([b for _, _, b in blocks]), w)


_PEAK_CHILD = r"""
import json, resource, sys
import torch
from sgrun.kernels.cpu import matmul
from sgrun.models.loader import load_model
matmul.kernels()            # the kernels' module and the tokenizer library loaded before the baseline
import tokenizers  # noqa: E401,F401
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
model, _, _ = load_model(sys.argv[1], torch.float32, "auto", "cpu")
print(json.dumps({"base_kb": base, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "quantization": model.quantization}))
"""


def test_loading_a_q8_file_grows_the_process_by_about_its_size(tmp_path):
    """Peak resident growth of loading an 85M-parameter Q8_0 file (90 MB), in a fresh process: the
    int8 model it becomes is about the file's size; the whole-file float32 copy the loader used to
    make was four bytes a parameter (3.8x the file) before any packing. 4.6 s on the quiet 2-core
    machine (a fresh interpreter; 89 s at load 11)."""
    import json
    import os
    import subprocess
    import sys
    from gguf import GGUFWriter, GGMLQuantizationType, quants
    rng = np.random.default_rng(0)
    hidden, ffn, vocab, layers = 1024, 2816, 32768, 4
    path = tmp_path / "q8.gguf"
    w = GGUFWriter(str(path), "llama")
    for add, v in ((w.add_block_count, layers), (w.add_context_length, 256), (w.add_embedding_length, hidden),
                   (w.add_feed_forward_length, ffn), (w.add_head_count, 8), (w.add_head_count_kv, 8),
                   (w.add_rope_dimension_count, hidden // 8), (w.add_vocab_size, vocab)):
        add(v)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(vocab)])
    w.add_token_merges([])

    def q8(*shape):
        arr = rng.standard_normal(shape, dtype=np.float32) * 0.02
        return quants.quantize(arr, GGMLQuantizationType.Q8_0)

    tensors = {"token_embd.weight": q8(vocab, hidden), "output_norm.weight": np.ones(hidden, np.float32)}
    for i in range(layers):
        p = f"blk.{i}."
        tensors.update({p + "attn_norm.weight": np.ones(hidden, np.float32), p + "ffn_norm.weight": np.ones(hidden, np.float32),
                        p + "attn_q.weight": q8(hidden, hidden), p + "attn_k.weight": q8(hidden, hidden),
                        p + "attn_v.weight": q8(hidden, hidden), p + "attn_output.weight": q8(hidden, hidden),
                        p + "ffn_gate.weight": q8(ffn, hidden), p + "ffn_up.weight": q8(ffn, hidden),
                        p + "ffn_down.weight": q8(hidden, ffn)})
    for name, arr in tensors.items():
        if arr.dtype == np.uint8:
            w.add_tensor(name, arr, raw_shape=arr.shape, raw_dtype=GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    env = dict(os.environ, SGRUN_MODEL_CACHE="0")
    out = subprocess.run([sys.executable, "-c", _PEAK_CHILD, str(path)], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["quantization"] == "int8"
    grown = (got["peak_kb"] - got["base_kb"]) * 1024
    size = path.stat().st_size
    assert grown < 2.0 * size, f"loading grew the process by {grown / size:.2f}x the file's size"
