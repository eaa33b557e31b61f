"""The C++ decode blocks and attention kernels for every architecture option of the model family
(kernels/cpu/decode_block.cpp through models/fused_decode.py, windows in paged_decode.cpp and
prefill_attention.cpp through engine/parts/attention/cpp_backend.py), on small random-weight models
(fused_archs.py) at every CPU level with matmul tiles:

- prefill then decode steps match a float64 reference forward over the same dequantized weights
  (the tiles' int8 activation rounding apart), and ignoring the model's windows would not;
- a sequence's logits are bitwise the same alone and inside a batch, through the one-call forward
  and the per-layer loop, chunked or whole;
- an MoE step reads only the experts its rows chose;
- each architecture's file, written as llama.cpp's converter writes it and loaded by sgrun, decodes
  on the blocks as the family's eager forward (decoder.py) does, up to float rounding.
"""

from __future__ import annotations

import pytest
import torch

from cpu_levels import at_level, each_level  # noqa: F401  (at_level is a fixture)
from fused_archs import ARCHS, Sequences, _rms, _w, build, reference_logits
from sgrun.engine.parts.attention.cpp_backend import CppPagedAttention
from sgrun.engine.parts.attention.torch_backend import TorchPagedAttention
from sgrun.kernels.cpu import paged_decode as paged_decode_cpp
from sgrun.kernels.cpu import prefill_attention as prefill_cpp
from sgrun.models.fused_decode import FusedDecode, supports

PROMPT = [3, 17, 101, 44, 250, 9, 61, 200, 7, 130, 55, 12]


def _fused(arch, level, dtype=torch.float32):
    model = build(arch, dtype)
    assert supports(model) and model.layers[0].qkv.ops.level == level
    return model, FusedDecode(model)


def _kernels(level):
    return paged_decode_cpp.load_kernel(level), prefill_cpp.load_kernel(level)


def _rel(a: torch.Tensor, ref: torch.Tensor) -> float:
    return float((a.double() - ref).norm() / ref.norm())


@each_level()
@pytest.mark.parametrize("arch", list(ARCHS))
def test_prefill_and_decode_match_the_float64_reference(arch, at_level):
    """A 5-token prefill chunk, then 7 decode steps: each step's logits against the float64
    forward of the whole sequence. The tolerance covers the int4 tiles' int8 activations; a model
    with windows is also checked to be far from the reference that ignores them."""
    model, fused = _fused(arch, at_level)
    op, pf = _kernels(at_level)
    ref = reference_logits(model, PROMPT)
    seqs = Sequences(model, [len(PROMPT)], op, pf)
    got = [seqs.step(fused, {0: PROMPT[:5]})[0]]
    for t in range(5, len(PROMPT)):
        got.append(seqs.step(fused, {0: [PROMPT[t]]})[0])
    got = torch.stack(got)
    want = ref[4:]
    err = _rel(got, want)
    assert err < 0.04, err
    if any(w is not None for w in model.cfg.layer_windows):
        global_ref = reference_logits(model, PROMPT, windows=[None] * model.cfg.num_layers)[4:]
        assert _rel(global_ref, want) > 5 * err


@each_level()
@pytest.mark.parametrize("arch", list(ARCHS))
def test_a_sequence_is_bitwise_the_same_alone_and_in_a_batch(arch, at_level):
    """Three sequences decode together (the one-call forward, then the per-layer loop) and each
    alone; a prefill chunk alone, beside other sequences' decodes, and split in two: every
    sequence's logits bitwise the same."""
    model, fused = _fused(arch, at_level)
    op, pf = _kernels(at_level)
    prompts = [PROMPT, PROMPT[::-1], [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]]

    def run(batched: bool, one_call: bool, split: bool):
        seqs = Sequences(model, [len(p) for p in prompts], op, pf)
        out = {s: [] for s in range(3)}
        if batched:   # prefills of 6 tokens in one batch (or 2 + 4 for the first)
            if split:
                out[0].append(seqs.step(fused, {0: prompts[0][:2]}, one_call)[0])
                res = seqs.step(fused, {0: prompts[0][2:6], 1: prompts[1][:6], 2: prompts[2][:6]}, one_call)
            else:
                res = seqs.step(fused, {s: prompts[s][:6] for s in range(3)}, one_call)
            for s in range(3):
                out[s].append(res[s])
            for t in range(6, 12):
                res = seqs.step(fused, {s: [prompts[s][t]] for s in range(3)}, one_call)
                for s in range(3):
                    out[s].append(res[s])
        else:
            for s in range(3):
                if split and s == 0:
                    out[0].append(seqs.step(fused, {0: prompts[0][:2]}, one_call)[0])
                    out[0].append(seqs.step(fused, {0: prompts[0][2:6]}, one_call)[0])
                else:
                    out[s].append(seqs.step(fused, {s: prompts[s][:6]}, one_call)[s])
                for t in range(6, 12):
                    out[s].append(seqs.step(fused, {s: [prompts[s][t]]}, one_call)[s])
        return {s: torch.stack(v) for s, v in out.items()}

    alone = run(False, True, False)
    for batched, one_call, split in ((True, True, False), (True, False, False), (True, True, True),
                                     (False, False, True)):
        got = run(batched, one_call, split)
        for s in range(3):
            a, b = (alone[s][-6:], got[s][-6:])
            assert torch.equal(a, b), (arch, s, batched, one_call, split)
    assert all(torch.isfinite(v).all() for v in alone.values())


@each_level()
@pytest.mark.parametrize("rows", [1, 5])
def test_an_moe_step_reads_only_the_chosen_experts(at_level, rows):
    """The experts no row of the step chose get NaN scales: the step's logits do not change (a read
    of any of their weights would make them NaN)."""
    model, fused = _fused("qwen3moe", at_level)
    op, pf = _kernels(at_level)
    tokens = PROMPT[:rows]
    seqs = Sequences(model, [1] * rows, op, pf)
    before = seqs.step(fused, {s: [tokens[s]] for s in range(rows)})
    # Which experts each layer's rows chose: from the float64 reference's routing (no near ties here).
    cfg = model.cfg
    h = model.embed_table.rows(torch.tensor(tokens)).double()
    chosen_by_layer = []
    for lw in model.layers:   # one token per sequence: each attends only itself, so o = v
        T = rows
        x = _rms(h, lw.attn_norm, cfg.rms_eps)
        _, _, v = (x @ _w(lw.qkv).T).split([cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim,
                                             cfg.num_kv_heads * cfg.head_dim], dim=-1)
        o = v.view(T, cfg.num_kv_heads, 1, cfg.head_dim).expand(T, cfg.num_kv_heads, cfg.num_heads // cfg.num_kv_heads,
                                                                cfg.head_dim).reshape(T, -1)
        h = h + o @ _w(lw.o).T
        x = _rms(h, lw.mlp_norm, cfg.rms_eps)
        top_w, top_i = (x @ lw.moe.router.double().T).softmax(-1).topk(lw.moe.top_k, dim=-1)
        top_w = top_w / top_w.sum(-1, keepdim=True)
        chosen_by_layer.append(set(top_i.flatten().tolist()))
        mlp = torch.zeros_like(h)
        for t in range(T):
            for wt, e in zip(top_w[t], top_i[t].tolist()):
                gate, up = (x[t] @ _w(lw.moe.gate_up[e]).T).chunk(2)
                mlp[t] += wt * ((torch.nn.functional.silu(gate) * up) @ _w(lw.moe.down[e]).T)
        h = h + mlp
    unread = 0
    for lw, chosen in zip(model.layers, chosen_by_layer):
        for e in range(cfg.num_experts):
            if e not in chosen:
                lw.moe.gate_up[e].group_scales.fill_(float("nan"))
                lw.moe.down[e].group_scales.fill_(float("nan"))
                unread += 1
    assert unread > 0
    seqs = Sequences(model, [1] * rows, op, pf)
    after = seqs.step(fused, {s: [tokens[s]] for s in range(rows)})
    for s in range(rows):
        assert torch.isfinite(after[s]).all() and torch.equal(before[s], after[s])


def test_windows_without_a_kernel_that_applies_them_are_refused():
    """A backend that cannot apply a window refuses at configure, never attends globally."""
    model = build("gemma3")
    op, _ = _kernels(None)
    seqs = Sequences(model, [4], op, None)
    cfg = model.cfg
    attn = CppPagedAttention(seqs.pool, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, op, prefill_op=None)
    if not hasattr(TorchPagedAttention, "configure"):
        with pytest.raises(ValueError, match="window"):
            attn.configure(0.2, [4, None, 4, None])
    with pytest.raises(ValueError, match="one per layer"):
        attn.configure(0.2, [4])
    with pytest.raises(ValueError, match="positive"):
        attn.configure(0.2, [0, None, None, None])


@pytest.fixture(scope="module")
def family_models(tmp_path_factory, model_path):
    """Each architecture's tiny transformers model (tests/model_family.py) as a Q4_0 GGUF, loaded by sgrun."""
    import gguf
    import model_family
    from sgrun.models.gguf_file import GGUFFile
    from sgrun.models.loader import load_model_files

    tok_meta = GGUFFile(model_path).metadata
    folder = tmp_path_factory.mktemp("family")
    loaded = {}
    for arch in model_family.ARCHS:
        path = folder / f"{arch}.gguf"
        model_family.write_gguf(arch, model_family.tiny_model(arch), path, gguf.GGMLQuantizationType.Q4_0, tok_meta)
        loaded[arch] = load_model_files(path, torch.float32)
    return loaded


@pytest.mark.parametrize("arch", ["llama", "qwen3", "qwen3moe", "gemma3", "phi3", "smollm3", "olmoe", "mixtral"])
def test_the_family_files_decode_on_the_blocks_as_the_eager_forward(family_models, arch):
    """A file of each architecture (written as llama.cpp's converter writes it, loaded by sgrun's own
    loader): FusedDecode's logits over a prefill chunk and decode steps against the model's eager
    family forward (decoder.py, the reference) on the same int4 linears and the same attention
    backend: equal up to float rounding, the same greedy token."""
    from sgrun.models.decoder import DecoderModel

    loaded = family_models[arch]
    model = DecoderModel(loaded.config, loaded.weights, torch.float32, "int4")
    assert supports(model)
    fused = FusedDecode(model)
    op, pf = _kernels(None)
    prompt = [3, 17, 101, 44, 250, 9, 61, 200, 7, 130, 55, 12, 300, 41, 19, 8]
    runs = []
    for forward in (fused, model):
        seqs = Sequences(model, [len(prompt)], op, pf)
        got = [seqs.step(forward, {0: prompt[:6]})[0]]
        for t in range(6, len(prompt)):
            got.append(seqs.step(forward, {0: [prompt[t]]})[0])
        runs.append(torch.stack(got))
    ours, eager = runs
    assert torch.isfinite(ours).all()
    err = _rel(ours, eager.double())
    assert err < 1e-4, err   # measured 2.6e-6 to 4.7e-6 (AMX Xeon, native, 7 December 2026)
    assert torch.equal(ours.argmax(-1), eager.argmax(-1))
