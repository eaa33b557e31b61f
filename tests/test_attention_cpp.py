"""The C++ in-place decode attention (paged_decode_cpp.py) against a float64 torch reference,
its backend against the gather backend on mixed batches, cascade attention against the plain
path, and the clean fallback to the gather path where the kernel cannot be built.

The kernel is built once per machine (cached under the sgrun cache folder); the first test to
need it pays the build (about 30 s idle)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import sgrun
from cpu_levels import LEVELS, op_level  # noqa: F401  (op_level is a fixture)
from sgrun.kernels.cpu import paged_decode as paged_decode_cpp
from paged_batch import segments_over_tables
from sgrun.engine.parts.attention.choice import make_attention_backend
from sgrun.engine.parts.attention.cpp_backend import CppPagedAttention
from sgrun.engine.parts.attention.torch_backend import TorchPagedAttention
from sgrun.engine.parts.attention.cascade import find_shared_prefixes
from sgrun.engine.state.page_pool import PagePool


# The chunk path each level's build takes for (float32, bf16) pools by head dim; a level missing
# here (scalar) runs the portable GCC-vector path for these head dims.
DECODE_PATHS = {"avx2": {64: ("avx2", "avx2"), 16: ("avx2", "avx2")},
                "avx512": {64: ("avx2", "avx2"), 16: ("avx2", "avx2")},
                "avx512_bf16": {64: ("avx2", "avx512_bf16"), 16: ("avx2", "avx2")},
                "neon": {64: ("neon", "neon"), 16: ("neon", "neon")},
                "neon_dotprod": {64: ("neon", "neon"), 16: ("neon", "neon")}}


@pytest.fixture(scope="module", params=LEVELS, ids=LEVELS)
def op(request):
    """The kernel built for each CPU level this machine runs (tests/cpu_levels.py): AVX2's build
    on an AVX-512 machine too. A level whose build fails fails here, and so does one whose build
    lacks the vector path its CPU features give; nothing is skipped."""
    kernel = paged_decode_cpp.load_kernel(request.param)
    assert kernel is not None, f"the C++ kernel must build at CPU level {request.param} (g++ is in .ci/run)"
    want = DECODE_PATHS.get(request.param, {64: ("portable", "portable"), 16: ("portable", "portable")})
    got = {d: (kernel.decode_path("float32", d), kernel.decode_path("bfloat16", d)) for d in want}
    assert got == want, (request.param, got)
    assert kernel.decode_path("float32", 24) == "any"
    return kernel


@pytest.fixture(scope="module")
def native_op():
    kernel = paged_decode_cpp.load_kernel()
    assert kernel is not None, "the C++ kernel must build on the test machines (g++ is in .ci/run)"
    return kernel


def reference(q, k_cache, v_cache, table, lens, scale):
    """float64 softmax attention of each row's queries over its first lens[r] paged tokens."""
    R, KV, G, D = q.shape
    ps = k_cache.shape[2]
    out, lse = torch.zeros(R, KV, G, D), torch.full((R, KV, G), float("-inf"))
    for r in range(R):
        n = int(lens[r])
        if n == 0:
            continue
        pages = table[r, : -(-n // ps)]
        k = k_cache[:, pages].reshape(KV, -1, D)[:, :n].double()
        v = v_cache[:, pages].reshape(KV, -1, D)[:, :n].double()
        s = torch.einsum("hgd,htd->hgt", q[r].double(), k) * scale
        lse[r] = torch.logsumexp(s, -1).float()
        out[r] = torch.einsum("hgt,htd->hgd", torch.softmax(s, -1), v).float()
    return out, lse


def decode(op, q, k_cache, v_cache, table, lens, scale, starts=None, out=None, lse=None):
    """paged_decode into fresh (out [R, KV, G, D], lse [R, KV, G]), no cascade prefix unless given."""
    R, KV = q.shape[0], k_cache.shape[0]
    G, D = q.shape[1] // KV, q.shape[2]
    out = torch.empty(R, KV, G, D) if out is None else out
    lse = torch.empty(R, KV, G) if lse is None else lse
    op.paged_decode(q, k_cache, v_cache, table, lens, torch.zeros_like(lens) if starts is None else starts,
                    scale, out, lse)
    return out, lse


@pytest.mark.parametrize("dtype,q_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                           (torch.bfloat16, torch.float32), (torch.float16, torch.float32)])
@pytest.mark.parametrize("head_dim,page_size", [(64, 16), (16, 5), (24, 3), (128, 7)])
def test_kernel_matches_reference(op, dtype, q_dtype, head_dim, page_size):
    """Random (shuffled) pages, GQA (3 query heads per kv head), ragged lengths including an
    empty context, one past a page boundary and several over more than one chunk (folded by
    log-sum-exp); head dims on the vector paths (the bf16 one: multiples of 32) and not; a
    float32 query against a bf16 cache (split into bf16 parts on the bf16 path, nothing lost)."""
    gen = torch.Generator().manual_seed(head_dim * 100 + page_size)
    kv, g, num_pages = 2, 3, 800
    chunk = op.chunk_tokens()
    k_cache = (3 * torch.randn(kv, num_pages, page_size, head_dim, generator=gen)).to(dtype)
    v_cache = torch.randn(kv, num_pages, page_size, head_dim, generator=gen).to(dtype)
    lens = torch.tensor([1, page_size + 1, 37, 0, 2 * page_size, 70 * page_size // 2, chunk, 2 * chunk + 17, 600])
    width = -(-int(lens.max()) // page_size)
    table = torch.stack([torch.randperm(num_pages, generator=gen)[:width] for _ in lens])
    q = torch.randn(len(lens), kv, g, head_dim, generator=gen)
    qkv = torch.cat([q.view(len(lens), kv * g, head_dim), torch.randn(len(lens), 2, head_dim)], 1)
    q_rows = qkv[:, : kv * g].to(q_dtype)   # a strided view, as the model passes it; read in place
    out, lse = decode(op, q_rows, k_cache, v_cache, table, lens, head_dim ** -0.5)
    want_out, want_lse = reference(q_rows.float().view(q.shape), k_cache, v_cache, table, lens, head_dim ** -0.5)
    torch.testing.assert_close(out, want_out, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(lse, want_lse, atol=2e-5, rtol=1e-5)
    assert torch.all(lse[3] == float("-inf")) and torch.all(out[3] == 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_rows_are_invariant_to_batch_and_threads(op, dtype):
    """A row's result is bitwise the same alone (few rows: its chunks run as separate work items
    and are folded afterwards), in a batch of many (each item folds its own chunks), and at 1 or
    2 threads: what lets a speculative verify row match the plain decode at its position."""
    gen = torch.Generator().manual_seed(3)
    kv, g, d, ps, num_pages = 3, 3, 64, 16, 700
    k_cache = torch.randn(kv, num_pages, ps, d, generator=gen).to(dtype)
    v_cache = torch.randn(kv, num_pages, ps, d, generator=gen).to(dtype)
    lens = torch.tensor([700, 5, 256, 1000, 33] * 3)
    table = torch.stack([torch.randperm(num_pages, generator=gen)[:63] for _ in lens])
    q = torch.randn(len(lens), kv * g, d, generator=gen).to(dtype)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        out, lse = decode(op, q, k_cache, v_cache, table, lens, d ** -0.5)
        torch.set_num_threads(1)
        out1, lse1 = decode(op, q, k_cache, v_cache, table, lens, d ** -0.5)
        torch.set_num_threads(2)
        alone = [decode(op, q[r:r + 1], k_cache, v_cache, table[r:r + 1], lens[r:r + 1], d ** -0.5)
                 for r in range(len(lens))]
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(out, out1) and torch.equal(lse, lse1)
    for r, (o, l) in enumerate(alone):
        assert torch.equal(o[0], out[r]) and torch.equal(l[0], lse[r]), f"row {r} differs alone"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_items_on_the_thread_team_give_openmps_bits(op, op_level, dtype):
    """load_kernel puts the kernel's work items on the matmul module's thread team at every level
    with matmul tiles (its spinning worker splits even a batch-1 layer's attention; the scalar
    reference level keeps OpenMP); the same calls with the team unset run them on one thread or
    OpenMP's pool. Batch-1 rows of one chunk (3 kv-head items), of several (chunk items folded
    afterwards), and a batch: bitwise the same either way."""
    from sgrun.kernels.cpu import matmul
    team = matmul.KERNEL.load(op_level)
    assert team is not None, f"the matmul module must build at {op_level}"
    wired = op.parallel_address()
    assert wired == (team.team_parallel_address() if matmul.has_tiles(op_level) else 0), "load_kernel wires the team"
    gen = torch.Generator().manual_seed(11)
    kv, g, d, ps, num_pages = 3, 3, 64, 16, 400
    k_cache = torch.randn(kv, num_pages, ps, d, generator=gen).to(dtype)
    v_cache = torch.randn(kv, num_pages, ps, d, generator=gen).to(dtype)
    lens = torch.tensor([60, 200, 256, 700, 1500, 2300])
    table = torch.stack([torch.randperm(num_pages, generator=gen)[:150] for _ in lens])
    q = torch.randn(len(lens), kv * g, d, generator=gen).to(dtype)
    cases = [slice(r, r + 1) for r in range(len(lens))] + [slice(0, len(lens))]
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        op.set_parallel(0)
        off_team = [decode(op, q[c], k_cache, v_cache, table[c], lens[c], d ** -0.5) for c in cases]
        op.set_parallel(team.team_parallel_address())   # the scalar level too, for this comparison
        on_team = [decode(op, q[c], k_cache, v_cache, table[c], lens[c], d ** -0.5) for c in cases]
    finally:
        op.set_parallel(wired)
        torch.set_num_threads(threads)
    for c, (o, l), (o0, l0) in zip(cases, on_team, off_team):
        assert torch.equal(o, o0) and torch.equal(l, l0), f"rows {c} differ on the team"
    want = reference(q.float().view(len(lens), kv, g, d), k_cache, v_cache, table, lens, d ** -0.5)
    torch.testing.assert_close(on_team[-1][0], want[0], atol=2e-5, rtol=1e-5)


def _pools_and_batch(dtype, page_size=16, shared_pages=17):
    """Three identical pools and a mixed batch: 3 decodes sharing `shared_pages` leading pages
    (a radix-cache hit; a cascade takes the whole chunks of them), 1 unrelated decode, 1 prefill
    chunk over a cached prefix, 1 fresh prefill."""
    gen = torch.Generator().manual_seed(7)
    layers, heads, kv_heads, head_dim = 2, 6, 2, 16
    num_pages = 64
    pools = [PagePool(layers, num_pages, page_size, kv_heads, head_dim, dtype) for _ in range(3)]
    for layer in range(layers):
        for cache in ("k", "v"):
            init = torch.randn(kv_heads, num_pages + 1, page_size, head_dim, generator=gen).to(dtype)
            for pool in pools:
                getattr(pool, cache)[layer].copy_(init)
    shared = list(range(1, 1 + shared_pages))
    free = iter(range(1 + shared_pages, num_pages))
    specs = [(1, shared_pages * page_size + 3), (1, shared_pages * page_size + 1), (1, shared_pages * page_size + 7),
             (1, 9), (5, 14), (6, 6)]
    tables = []
    for i, (_, ctx) in enumerate(specs):   # the first three share their leading pages
        n = -(-ctx // page_size)
        tables.append((shared + [next(free) for _ in range(n - shared_pages)]) if i < 3
                      else [next(free) for _ in range(n)])
    segments, write_pages, write_offsets, t = segments_over_tables(specs, tables, page_size)
    qkv = [(torch.randn(t, heads, head_dim, generator=gen).to(dtype),
            torch.randn(t, kv_heads, head_dim, generator=gen).to(dtype),
            torch.randn(t, kv_heads, head_dim, generator=gen).to(dtype)) for _ in range(layers)]
    return pools, (heads, kv_heads, head_dim), segments, write_pages, write_offsets, qkv


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_backend_and_cascade_match_the_gather_path(op, op_level, dtype):
    pools, shape, segments, wp, wo, qkv = _pools_and_batch(dtype)
    gather = TorchPagedAttention(pools[0], *shape)
    plain = CppPagedAttention(pools[1], *shape, op, cascade=False)
    cascade = CppPagedAttention(pools[2], *shape, op, cascade=True)
    for b in (gather, plain, cascade):
        b.prepare(wp, wo, segments)
    assert cascade.prefixes and cascade.prefixes[0].members.tolist() == [0, 1, 2]
    assert cascade.prefixes[0].tokens == op.chunk_tokens()   # 17 shared pages: one whole chunk
    assert not plain.prefixes and cascade.cascade_steps == 1
    for layer, (q, k, v) in enumerate(qkv):
        want, got_plain, got_cascade = (b.forward(layer, q, k, v) for b in (gather, plain, cascade))
        # The gather path rounds probabilities to bf16 before P.V; the kernel stays in float32.
        tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(got_plain.float(), want.float(), **tol)
        # Cascade against the plain kernel path: bitwise (the prefix ends on a chunk boundary).
        assert torch.equal(got_cascade, got_plain)
        assert torch.equal(pools[0].k[layer], pools[2].k[layer])


@pytest.mark.parametrize("dtype,act", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                       (torch.bfloat16, torch.float32), (torch.float16, torch.float32)])
def test_all_decode_fast_path_takes_strided_qkv_and_writes_the_pool_as_the_gather_path(op, op_level, dtype, act):
    """An all-decode batch takes CppPagedAttention.forward's fast path (the C++ KV write, the
    output converted from the kernel's rows): with q, k, v as column views of one fused
    projection, as FusedDecode passes them, the pools end bitwise equal to the gather path's
    indexed write, and the outputs equal the same backend's on contiguous copies bitwise. `act`:
    the model's dtype (float32 activations on a bf16 or float16 pool: kv_cache_dtype under a
    float32 model, the C++ write rounding as torch's conversion does)."""
    pools, shape, segments, wp, wo, _ = _pools_and_batch(dtype)
    heads, kv_heads, head_dim = shape
    decodes = [s for s in segments if s.q_len == 1]
    assert len(decodes) == 4 and [s.q_start for s in decodes] == [0, 1, 2, 3]   # rows 0..3, in order
    wp, wo = wp[:4].contiguous(), wo[:4].contiguous()
    gather = TorchPagedAttention(pools[0], *shape)
    strided = CppPagedAttention(pools[1], *shape, op, cascade=True)
    dense = CppPagedAttention(pools[2], *shape, op, cascade=True)
    for b in (gather, strided, dense):
        b.prepare(wp, wo, decodes)
    for b in (strided, dense):   # the fast path never goes through the general decode path
        b._attend_decodes = lambda *a: pytest.fail("an all-decode batch took the general path")
    gen = torch.Generator().manual_seed(3)
    for layer in range(len(pools[0].k)):
        fused = torch.randn(4, (heads + 2 * kv_heads) * head_dim, generator=gen).to(act)
        q = fused[:, : heads * head_dim].view(4, heads, head_dim)
        k = fused[:, heads * head_dim: (heads + kv_heads) * head_dim].view(4, kv_heads, head_dim)
        v = fused[:, (heads + kv_heads) * head_dim:].view(4, kv_heads, head_dim)
        assert not k.is_contiguous()
        want = gather.forward(layer, q.contiguous(), k.contiguous(), v.contiguous())
        got = strided.forward(layer, q, k, v)
        got_dense = dense.forward(layer, q.contiguous(), k.contiguous(), v.contiguous())
        assert got.dtype == act and got.shape == (4, heads, head_dim)
        assert torch.equal(got, got_dense)
        tol = dict(atol=1e-5, rtol=1e-5) if act == torch.float32 else dict(atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(got.float(), want.float(), **tol)
        for cache in ("k", "v"):
            assert torch.equal(getattr(pools[0], cache)[layer], getattr(pools[1], cache)[layer])
        # The fast path's output is a copy: the next layer's kernel call does not change it.
        before = got.clone()
        strided.forward(layer, q, k, v)
        assert torch.equal(got, before)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_write_kv_rounds_float32_into_a_narrower_pool_as_torch_does(op, dtype):
    """A float32 model's bf16 or float16 KV cache: the C++ write rounds each value as torch's
    conversion does (to nearest even; ties both ways, infinities, NaN, subnormals, bf16's overflow to
    inf), but a float16 pool saturates values past its range at +-65504 (an infinite key would make
    its row's scores NaN), as the torch backend's write does."""
    pool = PagePool(1, 4, 8, 2, 32, dtype)
    gen = torch.Generator().manual_seed(11)
    k = torch.randn(3, 2, 32, generator=gen) * 50
    v = torch.randn(3, 2, 32, generator=gen)
    special = torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), float("inf"), float("-inf"), float("nan"),
                            1e-40, -1e-40, 3.4e38, 0.0, -0.0, 2 ** -133, 1 + 2 ** -9, 65504.0, 1e-3, -7.77,
                            70000.0, -1e6, 65519.0, 2 ** -24, 2 ** -25 * 1.5, 1 + 2 ** -11, 1 + 3 * 2 ** -11,
                            -65520.0, 6e-8, 1e30, -2.5, 0.1, 1 / 3, 1e-5, -1e-6, 12345.678])
    k[0, 0] = special
    v[2, 1] = special.flip(0)
    pages, offsets = torch.tensor([3, 0, 3]), torch.tensor([7, 0, 1])
    op.write_kv(k, v, pool.k[0], pool.v[0], pages, offsets)
    for cache, src in ((pool.k[0], k), (pool.v[0], v)):
        got = cache[:, pages, offsets].transpose(0, 1)
        want = src.clamp(-65504, 65504).to(dtype) if dtype == torch.float16 else src.to(dtype)
        nan = want.isnan()   # a NaN's bits differ between torch's own conversion paths (ATen's levels)
        assert nan.sum() == 1 and torch.equal(got.isnan(), nan)
        assert torch.equal(got[~nan].view(torch.int16), want[~nan].view(torch.int16))   # bitwise


def test_write_kv_rejects_a_slot_outside_the_pool(native_op):
    pool = PagePool(1, 4, 8, 2, 16, torch.float32)
    k = torch.zeros(1, 2, 16)
    with pytest.raises(RuntimeError, match="out of the pool"):
        native_op.write_kv(k, k, pool.k[0], pool.v[0], torch.tensor([99]), torch.tensor([0]))
    with pytest.raises(RuntimeError, match="dtype"):
        native_op.write_kv(k.bfloat16(), k.bfloat16(), pool.k[0], pool.v[0], torch.tensor([1]), torch.tensor([0]))


def test_shared_prefix_detection():
    ps = 4
    a, b, c, d = [1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 9], [1, 2, 3, 7, 8], [20, 21]
    table = torch.nn.utils.rnn.pad_sequence([torch.tensor(x) for x in (a, b, c, d)], batch_first=True)
    lens = [24, 22, 18, 5]
    # a, b share 5 pages, c 3 more: {a, b, c} at 3 pages saves 6 reads, {a, b} at 5 saves 5.
    (p,) = find_shared_prefixes(table, lens, ps, min_saved_pages=1)
    assert p.members.tolist() == [0, 1, 2] and p.pages.tolist() == [1, 2, 3] and p.tokens == 12
    # A context that ends inside a shared page caps the prefix at its whole pages.
    (p,) = find_shared_prefixes(table[:2], [24, 9], ps, min_saved_pages=1)
    assert p.pages.tolist() == [1, 2]
    assert find_shared_prefixes(table, lens, ps, min_saved_pages=7) == []   # not worth it
    assert find_shared_prefixes(table[3:], lens[3:], ps, min_saved_pages=1) == []
    # Aligned to 8 tokens (2 pages): {a, b} at 4 pages saves 4, {a, b, c} at 2 pages saves 4 too.
    (p,) = find_shared_prefixes(table, lens, ps, min_saved_pages=1, align_tokens=8)
    assert p.members.tolist() == [0, 1] and p.pages.tolist() == [1, 2, 3, 4] and p.tokens == 16
    # An alignment that is no multiple of the page size: lcm(4, 6) = 12 tokens, 3 pages.
    (p,) = find_shared_prefixes(table, lens, ps, min_saved_pages=1, align_tokens=6)
    assert p.members.tolist() == [0, 1, 2] and p.tokens == 12


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cascade_prefix_then_own_tokens_equals_the_plain_kernel_bitwise(op, dtype):
    """The shared prefix (two chunks) by cascade_prefix with the members' queries stacked, then
    each member's own tokens by paged_decode folded onto it (starts = prefix tokens): bitwise the
    plain kernel over each whole context, and the float64 reference. A member whose context is
    exactly the prefix, and a row that is no member, are covered."""
    gen = torch.Generator().manual_seed(11)
    kv, g, d, ps, num_pages = 3, 3, 64, 16, 80
    chunk = op.chunk_tokens()
    k_cache = (2 * torch.randn(kv, num_pages, ps, d, generator=gen)).to(dtype)
    v_cache = torch.randn(kv, num_pages, ps, d, generator=gen).to(dtype)
    prefix = torch.randperm(num_pages, generator=gen)[: 2 * chunk // ps]
    own = [torch.tensor([60, 61]), torch.tensor([], dtype=torch.long), torch.tensor([70]), torch.tensor([71, 72, 73])]
    lens = torch.tensor([2 * chunk + 20, 2 * chunk, 2 * chunk + 3, 40])
    members = torch.tensor([0, 1, 2])                            # row 3 does not share the prefix
    table = torch.nn.utils.rnn.pad_sequence([torch.cat([prefix, own[i]]) for i in range(3)] + [own[3]],
                                            batch_first=True)
    q = torch.randn(4, kv * g, d, generator=gen).to(dtype)
    plain = decode(op, q, k_cache, v_cache, table, lens, d ** -0.5)
    out, lse = torch.empty(4, kv, g, d), torch.empty(4, kv, g)
    op.cascade_prefix(q, k_cache, v_cache, prefix, 2 * chunk, members, d ** -0.5, out, lse)
    starts = torch.tensor([2 * chunk] * 3 + [0])
    decode(op, q, k_cache, v_cache, table, lens, d ** -0.5, starts, out, lse)
    assert torch.equal(out, plain[0]) and torch.equal(lse, plain[1])
    want_out, want_lse = reference(q.float().view(4, kv, g, d), k_cache, v_cache, table, lens, d ** -0.5)
    torch.testing.assert_close(out, want_out, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(lse, want_lse, atol=2e-5, rtol=1e-5)


_FALLBACK_CHECK = """
import logging, torch
logging.basicConfig(level=logging.WARNING, format="LOG %(name)s %(message)s")
from sgrun.engine.parts.attention.choice import make_attention_backend
from sgrun.engine.state.page_pool import PagePool
pool = PagePool(1, 4, 4, 1, 16, torch.float32)
print("BACKENDS", type(make_attention_backend(pool, 2, 1, 16)).__name__,
      type(make_attention_backend(pool, 2, 1, 16, backend="cpp")).__name__)
"""


def test_missing_compiler_falls_back_to_the_gather_path(tmp_path):
    """A machine without a working C++ compiler, in a fresh process with an empty cache: the
    build really runs and fails, the backend is the gather path, and the log says so once.
    (A subprocess, because torch renames a JIT extension whose build arguments change within
    one process, which would make the next test process rebuild the real kernel.)"""
    env = {**os.environ, "SGRUN_CACHE": str(tmp_path), "CXX": str(tmp_path / "no-such-compiler")}
    run = subprocess.run([sys.executable, "-c", _FALLBACK_CHECK], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "BACKENDS TorchPagedAttention TorchPagedAttention" in run.stdout
    logs = [line for line in run.stderr.splitlines() if line.startswith("LOG sgrun.engine")]
    assert len(logs) == 1 and "C++ paged decode attention is unavailable" in logs[0], run.stderr[-2000:]


def test_forced_build_failure_falls_back(monkeypatch):
    """The same fallback through the switch that skips the build (SGRUN_CPP_ATTENTION_FAIL)."""
    monkeypatch.setenv(paged_decode_cpp.FORCE_BUILD_FAILURE_ENV, "1")
    paged_decode_cpp.reset_for_tests()
    try:
        pool = PagePool(1, 4, 4, 1, 16, torch.float32)
        assert type(make_attention_backend(pool, 2, 1, 16)) is TorchPagedAttention
    finally:
        paged_decode_cpp.reset_for_tests()   # later tests load the real build again


def test_engine_greedy_cascade_on_off_and_gather_agree(float32_engine, native_op):
    """Real SmolLM2 weights, float32, greedy: requests sharing a long system prompt decode the
    same tokens with cascade attention on and off, and as the gather backend would."""
    engine = float32_engine
    assert engine.runner.backend == "CppPagedAttention"
    attn = engine.runner.attn
    system = list(range(1000, 1400))   # 25 pages of 16: a radix-cache hit for requests 2..4
    prompts = [system + [2000 + 7 * i, 2100 + i] for i in range(4)]
    params = sgrun.SamplingParams(max_new_tokens=6, temperature=0)
    engine.generate([system + [5]], params.replace(max_new_tokens=1))   # the system prompt into the radix cache
    before = attn.cascade_steps
    on = [o.outputs[0].token_ids for o in engine.generate(prompts, params)]
    assert attn.cascade_steps > before, "no step attended the shared prefix once"
    attn.cascade = False
    try:
        off = [o.outputs[0].token_ids for o in engine.generate(prompts, params)]
    finally:
        attn.cascade = True
    assert on == off
    gather = TorchPagedAttention(engine.pool, attn.H, attn.KV, attn.D)
    engine.runner.attn = gather
    try:
        old = [o.outputs[0].token_ids for o in engine.generate(prompts, params)]
    finally:
        engine.runner.attn = attn
    assert on == old
