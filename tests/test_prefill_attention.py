"""The C++ causal prefill attention (kernels/cpu/prefill_attention.py): the kernel against a float64
reference at every CPU level the machine runs (its AMX path where the CPU has the tiles, its
AVX512-BF16 path, its AVX2 path on bf16 and
float32 pools, its portable path; chunks with and without earlier context in the pages), a row's
result the same whether its prompt runs whole or in chunks, the CPU backend with it against
the SDPA path on mixed batches, the real model with it against SDPA (greedy tokens in float32, logprobs in bf16, a chunked prefill and a
radix-cache hit included), and the fallback where it cannot be built.

The kernel is built once per machine (cached under the sgrun cache folder, ~40 s)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import sgrun
from paged_batch import segments_over_tables
from cpu_levels import LEVELS, op_level  # noqa: F401  (op_level is a fixture)
from sgrun.kernels.cpu import isa
from sgrun.kernels.cpu import prefill_attention as prefill_attention_cpp
from sgrun.kernels.cpu.prefill_attention import dtype_name
from sgrun.engine.parts.attention.choice import make_attention_backend
from sgrun.engine.parts.attention.cpp_backend import CppPagedAttention
from sgrun.engine.parts.attention.torch_backend import TorchPagedAttention
from sgrun.engine.state.page_pool import PagePool


# The vector path each level's build takes for (bf16, float32) pools of head dim 64 and 16: a
# level missing here (scalar) has none and keeps SDPA.
FAST_PATHS = {"avx2": {64: ("avx2", "avx2"), 16: ("avx2", "avx2")},
              "avx512": {64: ("avx2", "avx2"), 16: ("avx2", "avx2")},
              "avx512_bf16": {64: ("avx512_bf16", "avx512_bf16"), 16: ("avx2", "avx2")},
              "amx": {64: ("avx512_bf16", "avx512_bf16"), 16: ("avx2", "avx2")},   # that walk, on tiles
              "neon": {64: ("neon", "neon"), 16: ("neon", "neon")},
              "neon_dotprod": {64: ("neon", "neon"), 16: ("neon", "neon")}}


# amx runs avx512_bf16's build, with the products of that path on AMX tiles: a level of its own here.
KERNEL_LEVELS = LEVELS + [lv.name for lv in isa.supported_levels() if lv.name == "amx"]


class AtLevel:
    """A level's kernel module called as the engine calls it there: prefill_attention's last
    argument (`amx`) is whether the level is amx."""

    def __init__(self, module, level: str):
        self.module, self.amx = module, level == "amx"

    def prefill_attention(self, *args, window=0):
        return self.module.prefill_attention(*args, self.amx, window)

    def __getattr__(self, name):
        return getattr(self.module, name)


@pytest.fixture(scope="module", params=KERNEL_LEVELS, ids=KERNEL_LEVELS)
def op(request):
    """The kernel built for each CPU level this machine runs (tests/cpu_levels.py, plus amx); a level whose
    build fails fails here, nothing is skipped, and so does one whose build lacks the vector path
    its CPU features give (a guard macro that no longer matches the level's flags), or whose CPU has
    AMX tiles the kernel cannot use."""
    kernel = AtLevel(prefill_attention_cpp.load_kernel(request.param), request.param)
    assert kernel is not None, f"the C++ kernel must build at CPU level {request.param} (g++ is in .ci/run)"
    want = FAST_PATHS.get(request.param, {64: ("", ""), 16: ("", "")})
    got = {d: (kernel.fast_path("bfloat16", d), kernel.fast_path("float32", d)) for d in want}
    assert got == want, (request.param, got)
    assert kernel.fast_path_available() == (request.param in FAST_PATHS)
    # float16 pools (a float32 model's fp16 KV cache) take the level's float32 FMA path: the
    # float32 one, except at avx512_bf16, which builds no bf16 tiles for them (its head dim 16's path)
    assert kernel.fast_path("float16", 64) == want[16][1]
    cpu_has_tiles = {"amx_tile", "amx_bf16"} <= isa.cpu_features()
    assert kernel.amx_ready() == (cpu_has_tiles and request.param in ("avx512_bf16", "amx")), request.param
    return kernel


@pytest.fixture(scope="module")
def native_op():
    kernel = prefill_attention_cpp.load_kernel()
    assert kernel is not None, "the C++ kernel must build on the test machines (g++ is in .ci/run)"
    return kernel


def allowed_keys(q_len, ctx, window=0):
    """[q_len, ctx]: which keys each of the context's last q_len positions attends: every key up to
    its own position, and under a sliding window only the last `window` of them (transformers'
    sliding mask: p - window < j <= p)."""
    key, pos = torch.arange(ctx)[None, :], torch.arange(ctx - q_len, ctx)[:, None]
    return (key <= pos) & ((key > pos - window) if window else True)


def reference(q, k_cache, v_cache, pages, ctx, scale, window=0):
    """float64 causal attention of q [q_len, H, D] (the context's last q_len positions) over the
    first ctx tokens held in `pages`, under a sliding window of `window` tokens if not 0."""
    q_len, H, D = q.shape
    KV = k_cache.shape[0]
    k = k_cache[:, pages].reshape(KV, -1, D)[:, :ctx].double().repeat_interleave(H // KV, 0)
    v = v_cache[:, pages].reshape(KV, -1, D)[:, :ctx].double().repeat_interleave(H // KV, 0)
    s = torch.einsum("qhd,htd->hqt", q.double(), k) * scale
    allowed = allowed_keys(q_len, ctx, window)
    p = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1)
    return torch.einsum("hqt,htd->qhd", p, v)


def sdpa_bf16(q, k_cache, v_cache, pages, ctx, scale, window=0):
    """Today's path (attention/torch_backend.py) on the same inputs, for an error yardstick."""
    q_len, H, D = q.shape
    KV = k_cache.shape[0]
    k = k_cache[:, pages].reshape(KV, -1, D)[:, :ctx][None]
    v = v_cache[:, pages].reshape(KV, -1, D)[:, :ctx][None]
    allowed = allowed_keys(q_len, ctx, window)
    o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k, v, attn_mask=allowed, enable_gqa=True, scale=scale)
    return o[0].transpose(0, 1)


# (q_len, ctx_len): whole prompts of block and non-block lengths, chunks after earlier context
# (chunked prefill / a radix-cache hit), a 2-row verify-like chunk, a single row.
SPECS = [(37, 37), (64, 64), (200, 200), (77, 203), (5, 130), (2, 65), (1, 1), (150, 1000)]


def _shuffled_pages(seed, KV, D, page_size, dtype):
    """(gen, k_cache, v_cache, segments, T): random K (scale 2) and V of `dtype` in shuffled pages
    holding SPECS' contexts, and their segments; `gen` goes on drawing the queries."""
    gen = torch.Generator().manual_seed(seed)
    need = [-(-ctx // page_size) for _, ctx in SPECS]
    num_pages = sum(need) + 2
    k_cache = (2 * torch.randn(KV, num_pages, page_size, D, generator=gen)).to(dtype)
    v_cache = torch.randn(KV, num_pages, page_size, D, generator=gen).to(dtype)
    order = torch.randperm(num_pages, generator=gen).tolist()
    tables = [[order.pop() for _ in range(n)] for n in need]
    segments, _, _, T = segments_over_tables(SPECS, tables, page_size)
    return gen, k_cache, v_cache, segments, T


@pytest.mark.parametrize("dtype,portable,head_dim,page_size,bf16_from,window", [
    (torch.bfloat16, False, 64, 16, 0, 0),       # the AVX512-BF16 path at avx512_bf16, the AVX2 one at avx2 / avx512
    (torch.bfloat16, False, 128, 5, 0, 0),       # the other register tiling; pages that split key blocks
    (torch.bfloat16, False, 16, 7, 0, 0),        # AVX2 at every x86 level (no bf16 tile for 16)
    (torch.float32, False, 64, 16, 0, 0),        # float32 pools: every row on the AVX512-BF16 path (bf16 products) ...
    (torch.float32, False, 128, 5, 10 ** 9, 0),  # ... none of them (float32 products, the AVX2 path) ...
    (torch.float32, False, 64, 7, 100, 0),       # ... rows from position 100 on; below avx512_bf16 the AVX2 path
    (torch.bfloat16, True, 64, 16, 0, 0),        # the portable path
    (torch.float32, True, 24, 3, 0, 0),          # portable, a head dim without a fast path
    # Sliding windows (Gemma 3's local layers) on every path: narrower than a 16-key step, than a
    # tile's span, than a 64-key block; wider than a block, than some contexts and than all of them.
    (torch.bfloat16, False, 64, 16, 0, 100),
    (torch.bfloat16, False, 128, 5, 0, 7),
    (torch.bfloat16, False, 16, 7, 0, 70),
    (torch.float32, False, 64, 7, 100, 50),
    (torch.float32, False, 128, 5, 10 ** 9, 3),
    (torch.float32, False, 32, 16, 0, 64),
    (torch.bfloat16, False, 256, 16, 0, 130),    # Gemma-3-1B's head dim: the AVX2 path at every x86 level
    (torch.float32, True, 24, 3, 0, 9),          # portable
    (torch.bfloat16, False, 96, 9, 0, 5000),     # wider than every context: the causal result
])
def test_kernel_matches_float64_reference(op, dtype, portable, head_dim, page_size, bf16_from, window):
    """Shuffled pages, GQA (3 query heads per kv head), several segments in one call (prompts that
    are not a multiple of a tile, chunks after earlier context); q rows strided as the model's
    fused QKV leaves them; causal (window 0) or under a sliding window. bf16 error stays within 2x
    SDPA's own; a float32 pool's rows keep float32 accuracy except those at or past `bf16_from` on
    the AVX512-BF16 path."""
    H, KV, D = 6, 2, head_dim
    gen, k_cache, v_cache, segments, T = _shuffled_pages(head_dim + page_size, KV, D, page_size, dtype)
    qkv = torch.randn(T, H + 2 * KV, D, generator=gen).to(dtype)
    q = qkv[:, :H]
    out = torch.full((T, H, D), float("nan"), dtype=dtype)
    meta = [torch.tensor([getattr(s, f) for s in segments]) for f in ("q_start", "q_len", "ctx_len")]
    table = torch.nn.utils.rnn.pad_sequence([s.pages for s in segments], batch_first=True)
    op.prefill_attention(q, k_cache, v_cache, table, *meta, D ** -0.5, out, portable, bf16_from, window=window)
    assert not out.isnan().any()
    bf16_path = not portable and op.fast_path(dtype_name(dtype), D) == "avx512_bf16"
    checked = {"float32": 0, "bf16": 0}
    for s in segments:
        rows = slice(s.q_start, s.q_start + s.q_len)
        want = reference(q[rows], k_cache, v_cache, s.pages, s.ctx_len, D ** -0.5, window)
        pos = torch.arange(s.ctx_len - s.q_len, s.ctx_len)
        # bf16 products: a bf16 pool's rows, a float32 pool's from bf16_from on the AVX512-BF16 path
        rounded = torch.full_like(pos, dtype == torch.bfloat16, dtype=torch.bool) | (bf16_path & (pos >= bf16_from))
        err = (out[rows].double() - want).abs().amax(dim=(1, 2))
        if (~rounded).any():
            assert err[~rounded].max() < 1e-5, (s, err[~rounded].max())
            checked["float32"] += 1
        if rounded.any():   # within 2x the error of SDPA on the bf16-rounded inputs
            bf = [t.to(torch.bfloat16) for t in (q[rows], k_cache, v_cache)]
            yard = (sdpa_bf16(*bf, s.pages, s.ctx_len, D ** -0.5, window).double() - want).abs().amax(dim=(1, 2))
            assert (err[rounded] <= 2 * yard[rounded] + 4e-3).all(), (s, err[rounded].max(), yard.max())
            if dtype == torch.float32:   # and no output rounding: tighter than a bf16 pool's (a narrow
                # window averages fewer values, so its outputs and their bf16-product errors are larger)
                assert err[rounded].max() < (4e-2 if window else 2e-2), (s, err[rounded].max())
            checked["bf16"] += 1
    if dtype == torch.float32 and bf16_path and bf16_from == 100:
        assert checked["float32"] and checked["bf16"], checked   # the split crossed some segments
        # The rows below the split are bitwise the float32 path's; the rows past it are not (so
        # they did take bf16 products, not merely stay within their tolerance).
        plain = torch.full_like(out, float("nan"))
        op.prefill_attention(q, k_cache, v_cache, table, *meta, D ** -0.5, plain, portable, 10 ** 9, window=window)
        for s in segments:
            pos = torch.arange(s.ctx_len - s.q_len, s.ctx_len)
            rows = torch.arange(s.q_start, s.q_start + s.q_len)
            low, high = rows[pos < bf16_from], rows[pos >= bf16_from]
            assert torch.equal(out[low], plain[low]), s
            if len(high):
                assert not torch.equal(out[high], plain[high]), s


@pytest.mark.parametrize("dtype,head_dim,bf16_from,window", [
    (torch.bfloat16, 64, 0, 0), (torch.float32, 64, 0, 0), (torch.float32, 64, 100, 0), (torch.bfloat16, 16, 0, 0),
    # sliding windows: narrower than a tile's span of positions, than a block, wider than a block
    (torch.bfloat16, 64, 0, 5), (torch.float32, 64, 100, 40), (torch.bfloat16, 16, 0, 100),
    (torch.float32, 128, 0, 70),
])
def test_rows_same_whole_or_chunked(op, dtype, head_dim, bf16_from, window):
    """A prompt's rows come out bitwise the same from one call over the whole prompt and from
    calls over its chunks (a chunked prefill, each chunk attending the earlier ones in the
    pages), and from a call batched with another segment: a row's result depends on its own
    query, position and context only, not on the tiles it shares (nor, on a float32 pool split at
    `bf16_from`, on whether its chunk starts before or after the split: the chunk 65-150 crosses 100),
    nor, under a sliding window, on which blocks its tile's other rows made the walk visit."""
    gen = torch.Generator().manual_seed(5)
    H, KV, D, ps, ctx = 6, 2, head_dim, 16, 203
    pages = -(-ctx // ps)
    k_cache = torch.randn(KV, pages + 4, ps, D, generator=gen).to(dtype)
    v_cache = torch.randn(KV, pages + 4, ps, D, generator=gen).to(dtype)
    table = torch.randperm(pages + 4, generator=gen)[:pages][None]
    q = torch.randn(ctx, H, D, generator=gen).to(dtype)

    def run(q_start, q_len, rows_q):
        out = torch.empty_like(rows_q)
        meta = [torch.tensor([x]) for x in (0, q_len, q_start + q_len)]
        op.prefill_attention(rows_q, k_cache, v_cache, table, *meta, D ** -0.5, out, False, bf16_from,
                             window=window)
        return out

    whole = run(0, ctx, q)
    pieces = torch.cat([run(a, b - a, q[a:b].contiguous()) for a, b in ((0, 64), (64, 65), (65, 150), (150, ctx))])
    assert torch.equal(whole, pieces)
    # Batched with an unrelated 5-row segment ahead of it (other tiles, other thread items).
    other = torch.randn(5, H, D, generator=gen).to(dtype)
    both = torch.cat([other, q])
    out = torch.empty_like(both)
    tables = torch.cat([table, table])
    meta = [torch.tensor(x) for x in ([0, 5], [5, ctx], [40, ctx])]
    op.prefill_attention(both, k_cache, v_cache, tables, *meta, D ** -0.5, out, False, bf16_from, window=window)
    assert torch.equal(out[5:], whole)
    if window:   # and it is the windowed attention (a row alone, from the pages, as a decode-like chunk)
        for p in (0, 3, 99, ctx - 1):
            want = reference(q[p:p + 1], k_cache, v_cache, table[0], p + 1, D ** -0.5, window)
            assert (whole[p:p + 1].double() - want).abs().max() < 2e-2, p


def test_windowed_chunk_reads_no_key_before_its_windows_block(op):
    """A chunk after a long cached prefix, under a sliding window: the kernel packs and reads the
    context only from the 64-key block holding its first row's window start, so keys before it
    may hold anything (NaN here, which any read would spread) and the result is still the
    float64 reference's. Without the window the same keys are read (the output is NaN)."""
    gen = torch.Generator().manual_seed(11)
    H, KV, D, ps, ctx, q_len, window = 6, 2, 64, 16, 700, 37, 100
    pages = -(-ctx // ps)
    k_cache = torch.randn(KV, pages, ps, D, generator=gen).to(torch.bfloat16)
    v_cache = torch.randn(KV, pages, ps, D, generator=gen).to(torch.bfloat16)
    first_read = (ctx - q_len - window + 1) // 64 * 64
    for cache in (k_cache, v_cache):
        cache.view(KV, -1, D)[:, :first_read] = float("nan")
    table = torch.arange(pages)[None]
    q = torch.randn(q_len, H, D, generator=gen).to(torch.bfloat16)
    meta = [torch.tensor([x]) for x in (0, q_len, ctx)]
    out = torch.empty_like(q)
    op.prefill_attention(q, k_cache, v_cache, table, *meta, D ** -0.5, out, False, 0, window=window)
    want = reference(q, k_cache.nan_to_num(), v_cache.nan_to_num(), table[0], ctx, D ** -0.5, window)
    assert (out.double() - want).abs().max() < 2e-2
    op.prefill_attention(q, k_cache, v_cache, table, *meta, D ** -0.5, out, False, 0, window=0)
    assert out.isnan().any()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("head_dim", [32, 64, 96, 128])
def test_amx_tiles_run_where_the_kernel_has_them(op, dtype, head_dim):
    """Asked for AMX tiles (the amx level's call), a kernel that has them runs the AVX512-BF16
    walk's products on them: the output is not bitwise the dot-product path's (another order of
    float32 sums), yet as close to it as two bf16 attentions are; every head dim with bf16 tiles
    (C tiles in one group of four and two). A kernel without them (another build, a CPU without
    the tiles) ignores the request: bitwise its own path."""
    H, KV, D, ps = 9, 3, head_dim, 16
    gen, k_cache, v_cache, segments, T = _shuffled_pages(head_dim + 3, KV, D, ps, dtype)
    q = torch.randn(T, H, D, generator=gen).to(dtype)
    meta = [torch.tensor([getattr(s, f) for s in segments]) for f in ("q_start", "q_len", "ctx_len")]
    table = torch.nn.utils.rnn.pad_sequence([s.pages for s in segments], batch_first=True)
    outs = {}
    for amx in (False, True):
        outs[amx] = torch.full((T, H, D), float("nan"), dtype=dtype)
        op.module.prefill_attention(q, k_cache, v_cache, table, *meta, D ** -0.5, outs[amx], False, 0, amx, 0)
    assert not outs[True].isnan().any()
    if op.amx_ready() and op.fast_path(dtype_name(dtype), D) == "avx512_bf16":
        assert not torch.equal(outs[True], outs[False])
        torch.testing.assert_close(outs[True].float(), outs[False].float(), atol=2e-2, rtol=2e-2)
        for s in segments:   # and each against the float64 reference, as tight as the dot products'
            rows = slice(s.q_start, s.q_start + s.q_len)
            want = reference(q[rows], k_cache, v_cache, s.pages, s.ctx_len, D ** -0.5)
            errs = [(outs[a][rows].double() - want).abs().max().item() for a in (False, True)]
            assert errs[1] <= 1.5 * errs[0] + 1e-3, (s, errs)
    else:
        assert torch.equal(outs[True], outs[False])


@pytest.mark.parametrize("pool", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("portable,head_dim,page_size,bf16_from", [
    (False, 64, 16, 0), (False, 64, 7, 100), (False, 128, 5, 10 ** 9), (False, 16, 7, 0), (True, 64, 16, 0),
])
def test_float32_queries_on_a_narrower_pool_match_a_float32_pool_of_its_values(op, pool, portable, head_dim,
                                                                               page_size, bf16_from):
    """A float32 model's bf16 or float16 KV cache (kv_cache_dtype): every path widens a key or
    value to float32 exactly, so float32 queries over such a pool give what they give over a float32
    pool holding the same (representable) values, bitwise on the vector paths, on the float32
    products and, past `bf16_from` on the AVX512-BF16 path, the bf16 ones. A float16 pool takes
    float32 products on every row there (no bf16 tiles are built for it), as a float32 pool does
    below `bf16_from`. The output stays float32."""
    H, KV, D = 6, 2, head_dim
    gen, k16, v16, segments, T = _shuffled_pages(head_dim * 7 + page_size, KV, D, page_size, pool)
    q = torch.randn(T, H + 2 * KV, D, generator=gen)[:, :H]   # strided rows, as the fused QKV leaves them
    meta = [torch.tensor([getattr(s, f) for s in segments]) for f in ("q_start", "q_len", "ctx_len")]
    table = torch.nn.utils.rnn.pad_sequence([s.pages for s in segments], batch_first=True)
    # The float32 pool's rows take the narrower pool's products: bf16 ones past bf16_from only on
    # the path both share.
    same_path = op.fast_path(dtype_name(pool), D) == op.fast_path("float32", D)
    outs = []
    for k_cache, v_cache, from_ in ((k16, v16, bf16_from), (k16.float(), v16.float(), bf16_from if same_path else 10 ** 9)):
        out = torch.full((T, H, D), float("nan"))
        op.prefill_attention(q, k_cache, v_cache, table, *meta, D ** -0.5, out, portable, from_)
        outs.append(out)
    assert not outs[0].isnan().any()
    if portable:   # plain C++ loops: GCC may contract a product into an FMA in one instantiation only
        torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-4)
    else:
        assert torch.equal(outs[0], outs[1])
    for s in segments[:3]:   # and it is attention: the float64 reference over the rounded pool
        rows = slice(s.q_start, s.q_start + s.q_len)
        want = reference(q[rows], k16, v16, s.pages, s.ctx_len, D ** -0.5)
        tol = 2e-2 if (not portable and op.fast_path(dtype_name(pool), D) == "avx512_bf16") else 1e-5
        assert (outs[0][rows].double() - want).abs().max() < tol, s
    with pytest.raises(RuntimeError, match="under float32 q"):   # bf16 queries on a float32 pool: refused
        op.prefill_attention(q.to(torch.bfloat16), k16.float(), v16.float(), table, *meta, D ** -0.5,
                             torch.empty(T, H, D, dtype=torch.bfloat16), portable, bf16_from)


def test_backend_with_kernel_matches_sdpa_backend(op, op_level):
    """A mixed bf16 batch (decodes, whole prompts, chunks after context) through the CPU
    backend with the prefill kernel and through the SDPA backend: same K/V written, close outputs."""
    H, KV, D, ps = 9, 3, 64, 16
    specs = [(1, 40), (300, 300), (1, 7), (90, 250), (3, 33)]
    gen = torch.Generator().manual_seed(7)
    pools = [PagePool(1, 64, ps, KV, D, torch.bfloat16) for _ in range(2)]
    old = torch.randn(KV, 65, ps, D, generator=gen).to(torch.bfloat16)   # earlier context in the pages
    for p in pools:
        p.k[0].copy_(old)
        p.v[0].copy_(old.flip(0))
    order = torch.randperm(64, generator=gen).tolist()
    tables = [[order.pop() for _ in range(-(-ctx // ps))] for _, ctx in specs]
    segments, wp, wo, T = segments_over_tables(specs, tables, ps)
    q = torch.randn(T, H, D, generator=gen).to(torch.bfloat16)
    k, v = (torch.randn(T, KV, D, generator=gen).to(torch.bfloat16) for _ in range(2))
    kernel = make_attention_backend(pools[0], H, KV, D)
    assert isinstance(kernel, CppPagedAttention)
    assert kernel.prefill_op is (op.module if op.fast_path("bfloat16", D) else None)   # no vector path: SDPA
    assert kernel.prefill_amx == (op_level == "amx")
    kernel.prefill_op = op.module   # at such a level, the portable path
    sdpa = TorchPagedAttention(pools[1], H, KV, D)
    outs = []
    for backend in (kernel, sdpa):
        backend.prepare(wp, wo, segments)
        outs.append(backend.forward(0, q, k, v).float())
    assert torch.equal(pools[0].k[0], pools[1].k[0]) and torch.equal(pools[0].v[0], pools[1].v[0])
    torch.testing.assert_close(outs[0], outs[1], atol=2e-2, rtol=2e-2)


def _generate(engine, prompts, params):
    return [o.token_ids for o in engine.generate(prompts, params)]


def test_engine_float32_greedy_equal_with_kernel(float32_engine, native_op):
    """Real SmolLM2 weights, float32 (the kernel's AVX512-BF16 path, bf16 products, at avx512_bf16
    and amx; its AVX2 path at the other x86 levels with AVX2; the portable one forced on elsewhere):
    greedy tokens equal SDPA's for whole prompts, a prefill split into 64-token chunks, and a
    request whose prefix is a radix-cache hit."""
    engine, op = float32_engine, native_op
    attn = engine.runner.attn
    assert isinstance(attn, CppPagedAttention)
    chosen = attn.prefill_op
    assert chosen is (op if op.fast_path("float32", attn.D) else None)   # no vector path: SDPA
    system = list(range(1000, 1200))
    prompts = [list(range(3000, 3150)), system + [2000, 2001, 2002]]
    params = sgrun.SamplingParams(max_new_tokens=5, temperature=0)
    batch_tokens = engine.scheduler.max_batch_tokens
    results = []
    try:
        for prefill_op in (op, None):
            attn.prefill_op = prefill_op
            engine.flush_cache()
            got = _generate(engine, prompts, params)
            engine.scheduler.max_batch_tokens = 64   # chunked prefill: chunks attend earlier pages
            got += _generate(engine, [list(range(5000, 5170))], params)
            engine.scheduler.max_batch_tokens = batch_tokens
            got += _generate(engine, [system + [2500, 2600]], params)   # radix-cache hit on `system`
            results.append(got)
    finally:
        attn.prefill_op = chosen
        engine.scheduler.max_batch_tokens = batch_tokens
    assert results[0] == results[1]


def test_engine_bf16_logprobs_close_with_kernel(bf16_engine, native_op):
    op = native_op
    """Real weights in bf16, the kernel (its fast path where the CPU has one): the first token's top-5
    logprobs stay within bf16 noise of SDPA's, for a whole prompt and a radix-cache hit."""
    attn = bf16_engine.runner.attn
    chosen = attn.prefill_op
    assert chosen is (op if op.fast_path("bfloat16", attn.D) else None)   # no vector path: SDPA
    system = list(range(1000, 1300))
    params = sgrun.SamplingParams(max_new_tokens=1, temperature=0, logprobs=5)
    runs = []
    try:
        for prefill_op in (op, None):
            attn.prefill_op = prefill_op
            bf16_engine.flush_cache()
            outs = bf16_engine.generate([list(range(4000, 4333))], params)
            bf16_engine.generate([system + [7]], params)
            outs += bf16_engine.generate([system + [2500, 2600, 2700]], params)   # a radix-cache hit
            assert outs[1].cached_tokens > 0
            runs.append([{t[0]: t[2] for t in o.outputs[0].logprobs[0].top} for o in outs])
    finally:
        attn.prefill_op = chosen
    for kernel_top, sdpa_top in zip(*runs):
        assert max(kernel_top, key=kernel_top.get) == max(sdpa_top, key=sdpa_top.get)
        for tok in set(kernel_top) & set(sdpa_top):
            assert abs(kernel_top[tok] - sdpa_top[tok]) < 0.15, (tok, kernel_top, sdpa_top)


def test_default_engine_long_prompt_across_the_bf16_split(shared_engine, native_op):
    """The default configuration (int4, dtype auto) on a prompt that crosses BF16_FROM: on a
    float32 pool at avx512_bf16 its rows past position 1,024 take bf16 products. The first token's
    top-5 logprobs stay within 0.15 of SDPA's, and a chunked prefill (chunks of 256 that start on
    both sides of the split) gives every token and logprob bit for bit as the whole prompt does."""
    engine = shared_engine
    attn = engine.runner.attn
    chosen = attn.prefill_op
    assert chosen is (native_op if native_op.fast_path(dtype_name(engine.runner.model.dtype), attn.D) else None)
    assert attn.prefill_bf16_from == prefill_attention_cpp.bf16_from() == prefill_attention_cpp.BF16_FROM_DEFAULT
    prompt = [(i * 7919) % 30000 + 100 for i in range(1200)]
    params = sgrun.SamplingParams(max_new_tokens=4, temperature=0, logprobs=5)
    batch_tokens = engine.scheduler.max_batch_tokens

    def run(op, chunk=None):
        attn.prefill_op = op
        engine.flush_cache()
        engine.scheduler.max_batch_tokens = chunk or batch_tokens
        try:
            out = engine.generate([prompt], params)[0]
        finally:
            engine.scheduler.max_batch_tokens = batch_tokens
        return out.token_ids, [(lp.logprob, lp.top) for lp in out.outputs[0].logprobs]

    try:
        whole = run(chosen)
        chunked = run(chosen, chunk=256)
        sdpa = run(None)
    finally:
        attn.prefill_op = chosen
    assert whole == chunked
    kernel_top = {t[0]: t[2] for t in whole[1][0][1]}
    sdpa_top = {t[0]: t[2] for t in sdpa[1][0][1]}
    assert max(kernel_top, key=kernel_top.get) == max(sdpa_top, key=sdpa_top.get), (kernel_top, sdpa_top)
    for tok in set(kernel_top) & set(sdpa_top):
        assert abs(kernel_top[tok] - sdpa_top[tok]) < 0.15, (tok, kernel_top, sdpa_top)


def test_forced_build_failure_keeps_sdpa(monkeypatch, caplog):
    """Where the kernel cannot be built, a bf16 pool's backend keeps SDPA for prefill chunks
    (decodes still use their own kernel), and the log says so once."""
    monkeypatch.setenv(prefill_attention_cpp.FORCE_BUILD_FAILURE_ENV, "1")
    prefill_attention_cpp.KERNEL.reset_for_tests()
    try:
        with caplog.at_level("WARNING", logger="sgrun.engine"):
            pool = PagePool(1, 4, 16, 1, 64, torch.bfloat16)
            backends = [make_attention_backend(pool, 2, 1, 64) for _ in range(2)]
        assert all(isinstance(b, CppPagedAttention) and b.prefill_op is None for b in backends)
        logs = [r.getMessage() for r in caplog.records if "prefill attention" in r.getMessage()]
        assert len(logs) == 1 and "unavailable" in logs[0], logs
    finally:
        prefill_attention_cpp.KERNEL.reset_for_tests()   # later tests load the real build again
