"""The C++ decode blocks (sgrun/kernels/cpu/decode_block.cpp, driven by sgrun/models/fused_decode.py)
on the real SmolLM2 weights at every CPU level with matmul tiles: each block is at least as close to
the exact (float64) block as llama.py's eager block in the same dtype, a row is bit-identical alone and in any batch, and the default engine
serves its decode steps with them, compiling nothing."""

from __future__ import annotations

import gc

import pytest
import torch

import sgrun
from cpu_levels import at_level, each_level  # noqa: F401  (at_level is a fixture)
from sgrun.models.compiled_forward import _NoAttention
from sgrun.models.fused_decode import FusedDecode, fused_decode_for, supports
from sgrun.models.llama import first_block, inner_block, layer_tail
from sgrun.models.llama import LlamaModel
from sgrun.models.loader import load_model, load_model_files
from paged_batch import segments_over_tables
from sgrun.kernels.cpu import paged_decode as paged_decode_cpp
from sgrun.engine.parts.attention.cpp_backend import CppPagedAttention
from sgrun.engine.state.page_pool import PagePool


@pytest.fixture(scope="module")
def weights(model_path):
    return load_model_files(str(model_path), torch.float32)


def _model(weights, dtype):
    """Built here, at the forced level (the process's model cache is not keyed by level)."""
    return LlamaModel(weights.config, weights.weights, dtype, "int4")


class _Exact:
    """A linear as float64 over its dequantized weight: the reference both paths are measured against."""

    def __init__(self, lin):
        self.w = lin.dequantized().double()
        self.out_features = lin.out_features

    def __call__(self, x):
        return x.double() @ self.w.T


@each_level()
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_each_block_is_as_close_to_exact_as_the_eager_block(weights, at_level, dtype):
    """Each C++ block against the same block in float64 over the same int4 weights, beside eager's
    block in the same dtype: the C++ block's relative error is at most eager's (plus a little).
    Both carry the tiles' rounding (int8 activations where the level quantizes them, bf16 inputs),
    so neither is exact; a wrong formula (norm, RoPE, SiLU, a residual) would be off by tens of percent."""
    model = _model(weights, dtype)
    assert supports(model) and model.layers[0].qkv.ops.level == at_level
    fused = FusedDecode(model)
    cfg = model.cfg
    heads, eps = (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim), cfg.rms_eps
    g = torch.Generator().manual_seed(0)
    T = 3
    positions = torch.tensor([4, 17, 90])
    cos, sin = model.cos[positions], model.sin[positions]
    c1, s1 = cos.unsqueeze(1), sin.unsqueeze(1)
    c64, s64 = c1.double(), s1.double()
    h = model.embed_table.rows(torch.randint(0, cfg.vocab_size, (T,), generator=g)).float()
    o = (torch.randn(T, cfg.num_heads, cfg.head_dim, generator=g) * 0.5).to(dtype)
    run = fused.module.decode_block_run
    f64 = torch.float64

    def rel(a, ref):
        return float((a.double() - ref).norm() / ref.norm())

    def check(got, eager, exact):
        assert len(got) == len(eager) == len(exact)
        for a, b, ref in zip(got, eager, exact):
            assert a.shape == b.shape and a.dtype == b.dtype
            ours, theirs = rel(a, ref), rel(b, ref)
            assert ours <= 1.25 * theirs + 2e-3, (ours, theirs)

    L0 = model.layers[0]
    got = run(fused.first, h, None, cos, sin)
    assert torch.equal(got[0], h)
    check(got[1:], first_block(h, L0.attn_norm, L0.qkv, c1, s1, heads, eps, dtype),
          first_block(h.double(), L0.attn_norm.double(), _Exact(L0.qkv), c64, s64, heads, eps, f64))
    for li in (0, 7, cfg.num_layers - 2):
        lw, nxt = model.layers[li], model.layers[li + 1]
        exact_lins = [_Exact(x) for x in (lw.o, lw.gate_up, lw.down)]
        check(run(fused.inner[li], h, o, cos, sin),
              inner_block(h, o, lw.o, lw.mlp_norm, lw.gate_up, lw.down, nxt.attn_norm, nxt.qkv, c1, s1, heads, eps, dtype),
              inner_block(h.double(), o.double(), exact_lins[0], lw.mlp_norm.double(), exact_lins[1], exact_lins[2],
                          nxt.attn_norm.double(), _Exact(nxt.qkv), c64, s64, heads, eps, f64))
    last = model.layers[-1]
    got = run(fused.last, h, o, None, None)
    assert got[1].dtype == torch.float32
    check(got, layer_tail(h, o, last.o, last.mlp_norm, last.gate_up, last.down, model.final_norm, eps, dtype),
          layer_tail(h.double(), o.double(), _Exact(last.o), last.mlp_norm.double(), _Exact(last.gate_up),
                     _Exact(last.down), model.final_norm.double(), eps, f64))


@each_level()
def test_a_row_is_bit_identical_alone_and_in_a_batch(weights, at_level):
    model = _model(weights, torch.bfloat16)
    fused = FusedDecode(model)
    ids = torch.tensor([17, 9000, 300, 41, 12345, 7, 2024])
    positions = torch.arange(3, 10)
    batch = fused.forward(ids, positions, _NoAttention(), torch.arange(7))
    for r in (0, 3, 6):
        alone = fused.forward(ids[r:r + 1], positions[r:r + 1], _NoAttention(), torch.arange(1))
        assert torch.equal(alone[0], batch[r]), r
    # and the logits are the eager forward's up to int8-activation rounding (same greedy token)
    eager = model.forward(ids[:1], positions[:1], _NoAttention(), torch.arange(1))
    assert eager.argmax(-1).item() == batch[0].argmax(-1).item()


def _pool_and_decodes(model, contexts, seed, pool_dtype=None):
    """A pool (of the model's dtype, or `pool_dtype`) holding random K/V for decoding rows with
    `contexts` tokens (the new token's slot included), their segments and write slots, as the
    scheduler would hand them over."""
    cfg = model.cfg
    ps = 16
    tables, first = [], 0
    for ctx in contexts:
        n = -(-ctx // ps)
        tables.append(list(range(first, first + n)))
        first += n
    pool = PagePool(cfg.num_layers, first, ps, cfg.num_kv_heads, cfg.head_dim, pool_dtype or model.dtype)
    g = torch.Generator().manual_seed(seed)
    for cache in (*pool.k, *pool.v):
        cache.copy_(torch.randn(cache.shape, generator=g) * 0.5)
    segments, wp, wo, _ = segments_over_tables([(1, c) for c in contexts], tables, ps)
    return pool, segments, wp, wo


@each_level()
@pytest.mark.parametrize("dtype,pool_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                              (torch.float32, torch.float16)], ids=["f32", "bf16", "f32-f16-pool"])
def test_an_all_decode_batch_runs_in_one_call_bitwise_as_the_per_layer_loop(weights, at_level, dtype, pool_dtype):
    """FusedDecode runs an all-decode batch's every layer, attention included, in one C++ call
    (decode_block.cpp's decode_forward, the attention reached by its address in the paged-decode
    module): its logits and the pool it leaves are bitwise those of the loop over decode_block_run
    and CppPagedAttention.forward, whose per-layer calls it must not make; a float32 model over a
    float16 pool (kv_cache_dtype's default under float32) too, the C++ write rounding K and V. A
    float32 model's call takes the tokens and gives the logits (decode_logits: the int8 embedding
    rows, cos / sin and the lm_head in C++), bitwise the Python around decode_forward. A batch with
    a prefill or a cascade prefix keeps the loop."""
    model = _model(weights, dtype)
    fused = FusedDecode(model)
    op = paged_decode_cpp.load_kernel(at_level)
    cfg = model.cfg
    contexts = [5, 37, 300]
    ids = torch.tensor([17, 9000, 12345])
    positions = torch.tensor([c - 1 for c in contexts])
    rows = torch.arange(3)
    results = []
    for one_call in (True, False):
        pool, segments, wp, wo = _pool_and_decodes(model, contexts, seed=5, pool_dtype=pool_dtype)
        attn = CppPagedAttention(pool, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, op)
        attn.prepare(wp, wo, segments)
        assert attn.decode_forward_args(dtype) is not None
        if one_call:
            attn.forward = lambda *a: pytest.fail("the one-call forward went back to Python per layer")
            # A float32 model's int8 embedding and lm_head go into the same call (decode_logits).
            tokens_to_logits = fused.token_tables is not None
            assert tokens_to_logits == (dtype == torch.float32)
            fused.module = type("NoBlocks", (), {"decode_forward": (lambda *a: pytest.fail("not decode_logits"))
                                                 if tokens_to_logits else fused.module.decode_forward,
                                                 "decode_logits": fused.module.decode_logits,
                                                 "decode_block_run": lambda *a: pytest.fail("a block from Python")})
        else:
            attn.decode_forward_args = lambda dt: None
        try:
            logits = fused.forward(ids, positions, attn, rows)
        finally:
            fused.module = model.layers[0].qkv.ops.module
        results.append((logits, pool))
    (a, pa), (b, pb) = results
    assert a.shape == (3, cfg.vocab_size) and torch.isfinite(a).all()
    assert torch.equal(a, b)
    for layer in range(cfg.num_layers):
        assert torch.equal(pa.k[layer], pb.k[layer]) and torch.equal(pa.v[layer], pb.v[layer])
    # and the pool took each row's new K/V: its slot changed from the random fill
    fresh = _pool_and_decodes(model, contexts, seed=5, pool_dtype=pool_dtype)[0]
    assert not torch.equal(pa.k[0][:, wp, wo], fresh.k[0][:, wp, wo])

    pool, segments, wp, wo = _pool_and_decodes(model, [40, 3], seed=6, pool_dtype=pool_dtype)
    mixed, mwp, mwo, _ = segments_over_tables([(1, 40), (3, 3)], [seg.pages.tolist() for seg in segments], 16)
    attn = CppPagedAttention(pool, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, op)
    attn.prepare(mwp, mwo, mixed)
    assert attn.decode_forward_args(dtype) is None          # a prefill chunk in the batch
    attn.prepare(wp, wo, segments)
    assert attn.decode_forward_args(dtype) is not None
    # The one call takes a pool of the GEMM's dtype, or a narrower one under float32 only.
    if pool_dtype == torch.float32:
        assert attn.decode_forward_args(torch.bfloat16) is None       # float32 pages under a bf16 GEMM
    if pool_dtype == torch.bfloat16:
        assert attn.decode_forward_args(torch.float32) is not None    # bf16 pages under float32
    if pool_dtype == torch.float16:
        assert attn.decode_forward_args(torch.bfloat16) is None       # float16 pages under bf16
    attn.prefixes = [object()]
    assert attn.decode_forward_args(dtype) is None          # a cascade prefix to attend first


def test_the_idle_weight_prefetch_changes_no_bit_and_ends_before_its_model_is_freed(weights, monkeypatch):
    """After decode_logits the thread team's idle worker reads the next step's first weights into
    the cache while Python runs (decode_block.cpp's post_weight_prefetch; SGRUN_PREFETCH_MB, read
    at every call, sets how many). It only reads: the logits are bitwise the same with none, the
    default and every weight posted. Each model is freed right after its step, while the worker may
    still be reading it (4 GB covers all of it): freeing cancels the read and the plan holds the
    blocks, so the process goes on to decode the next model as before. The worker does read:
    with no budget nothing, with one, bytes (the module's count of what it read)."""
    import time
    contexts = [5, 37, 300]
    ids, positions, rows = torch.tensor([17, 9000, 12345]), torch.tensor([c - 1 for c in contexts]), torch.arange(3)
    results = []
    for budget_mb in ("0", None, "4096"):
        if budget_mb is None:
            monkeypatch.delenv("SGRUN_PREFETCH_MB", raising=False)
        else:
            monkeypatch.setenv("SGRUN_PREFETCH_MB", budget_mb)
        model = _model(weights, torch.float32)
        fused = FusedDecode(model)
        assert fused.token_tables is not None   # the default model's call: decode_logits, which posts the read
        cfg = model.cfg
        pool, segments, wp, wo = _pool_and_decodes(model, contexts, seed=5)
        attn = CppPagedAttention(pool, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, paged_decode_cpp.load_kernel())
        attn.prepare(wp, wo, segments)
        module = fused.module
        before = module.weight_prefetch_bytes()
        results.append(fused.forward(ids, positions, attn, rows))
        deadline = time.monotonic() + 2.0   # the spinning worker reads its pieces within a millisecond or so
        while budget_mb != "0" and module.weight_prefetch_bytes() == before and time.monotonic() < deadline:
            time.sleep(0.001)
        read = module.weight_prefetch_bytes() - before
        assert (read == 0) if budget_mb == "0" else (read > 0), (budget_mb, read)
        del fused, model, attn, pool
        gc.collect()   # the blocks go (decode_block_free) while the read may still run
    assert torch.equal(results[0], results[1]) and torch.equal(results[0], results[2])


def test_models_of_one_qkv_width_with_other_heads_take_turns_on_one_thread(tmp_path):
    """The one-call forward keeps its activations per thread and shape (decode_block.cpp's
    Scratch). Two tiny random models with the same widths but other head layouts (4 heads x 32 and
    2 x 64 over hidden 128: both a 256-wide q/k/v) decode in turn on this thread, each through the
    one call and through the per-layer loop: each gets its own q/k/v views, so both agree bitwise
    every time (with the first model's views the second one's attention refused its shape)."""
    import transformers

    from sgrun.models.safetensors_loader import load_folder
    models = []
    for heads, kv_heads in ((4, 2), (2, 1)):
        torch.manual_seed(heads)
        cfg = transformers.LlamaConfig(vocab_size=1024, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                       num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=128 // heads,
                                       max_position_embeddings=512, tie_word_embeddings=False)
        hf = transformers.LlamaForCausalLM(cfg).eval()
        with torch.no_grad():
            for name, p in hf.named_parameters():
                p.normal_(0, 0.2) if "norm" not in name else p.fill_(1.0)
        folder = tmp_path / f"heads{heads}"
        hf.save_pretrained(folder, safe_serialization=True)
        config, _, weights = load_folder(folder, torch.float32)
        model = LlamaModel(config, weights, torch.float32, "int4")
        assert supports(model)
        models.append(model)
    widths = {(m.cfg.num_heads + 2 * m.cfg.num_kv_heads) * m.cfg.head_dim for m in models}
    assert len(widths) == 1 and len({m.cfg.head_dim for m in models}) == 2
    contexts = [5, 37, 300]
    ids, positions, rows = torch.tensor([17, 900, 345]), torch.tensor([c - 1 for c in contexts]), torch.arange(3)
    op = paged_decode_cpp.load_kernel()
    for model in models * 2:
        fused = FusedDecode(model)
        cfg = model.cfg
        got = []
        for one_call in (True, False):
            pool, segments, wp, wo = _pool_and_decodes(model, contexts, seed=7)
            attn = CppPagedAttention(pool, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, op)
            attn.prepare(wp, wo, segments)
            if one_call:
                assert attn.decode_forward_args(torch.float32) is not None
            else:
                attn.decode_forward_args = lambda dt: None
            got.append(fused.forward(ids, positions, attn, rows))
        assert torch.isfinite(got[0]).all() and torch.equal(got[0], got[1])


def test_the_default_engine_decodes_with_the_blocks_and_compiles_nothing(model_path):
    with sgrun.Engine(str(model_path), num_threads=2, memory_gb=0.3) as engine:
        runner = engine.runner
        assert runner.fused is not None and runner.compiled is None
        report = engine.startup_report()
        assert report["decode_blocks"] == "sgrun C++" and report["compile"] is False
        calls = {"n": 0}
        forward = runner.fused.forward

        def counted(*args):
            calls["n"] += 1
            return forward(*args)

        runner.fused.forward = counted
        prompt = engine.tokenizer.apply_chat_template(
            [{"role": "user", "content": "Repeat exactly: alpha beta gamma delta epsilon"}])
        params = sgrun.SamplingParams(max_new_tokens=12, temperature=0)
        try:
            out = engine.generate([prompt], params)[0]
        finally:
            del runner.fused.forward
        assert "alpha beta gamma" in out.text, out.text
        assert calls["n"] >= len(out.token_ids)   # every step: the prompt (37 tokens) and each decode
        runner.fused = None                        # the same request on the eager forward
        try:
            assert engine.generate([prompt], params)[0].token_ids == out.token_ids
        finally:
            runner.fused = engine.parts.fused


def test_models_off_the_tiles_keep_the_torch_forward(model_path):
    dense32, _, _ = load_model(str(model_path), torch.float32, "none", "cpu")
    assert not supports(dense32) and fused_decode_for(dense32) is None
