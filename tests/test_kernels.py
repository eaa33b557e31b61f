"""Triton kernels against their torch references, run on the CPU by Triton's interpreter, and the
Triton attention backend against the torch one. A missing triton fails this module, on purpose:
it is in the `test` extra."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# Triton picks interpreter or GPU compiler when a function is decorated, i.e. when its module is
# imported, and that includes triton's own library (tl.zeros, ...): the flag must be set before
# triton is first imported in this process. Nothing in the suite imports it earlier; if that
# changes, this module fails with the reason instead of a confusing interpreter error.
_saved_flag = os.environ.get("TRITON_INTERPRET")
os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402
import triton.language as tl  # noqa: E402  (an ImportError here is the loud failure we want)

import sgrun.kernels.triton.decode_attention as decode_kernels  # noqa: E402

if _saved_flag is None:
    del os.environ["TRITON_INTERPRET"]
else:
    os.environ["TRITON_INTERPRET"] = _saved_flag
for _fn in (tl.zeros, decode_kernels._decode_split_kernel):
    if type(_fn).__name__ != "InterpretedFunction":
        raise RuntimeError("triton was imported before tests/test_kernels.py could set TRITON_INTERPRET=1; "
                           "run with TRITON_INTERPRET=1 in the environment, or find the earlier import")

from sgrun.constrain.bitmask import apply_bitmask as torch_apply_bitmask  # noqa: E402
from paged_batch import segments_over_tables  # noqa: E402
from sgrun.engine.parts.attention.choice import make_attention_backend  # noqa: E402
from sgrun.engine.parts.attention.torch_backend import TorchPagedAttention  # noqa: E402
from sgrun.engine.parts.attention.triton_backend import TritonPagedAttention  # noqa: E402
from sgrun.engine.state.page_pool import PagePool  # noqa: E402
from sgrun.errors import InvalidRequestError  # noqa: E402
from sgrun.kernels.triton import (  # noqa: E402
    apply_bitmask,
    apply_bitmask_reference,
    decode_num_splits,
    paged_decode_attention,
    paged_decode_attention_reference,
    paged_prefill_attention,
    paged_prefill_attention_reference,
    write_kv,
    write_kv_reference,
)



@pytest.fixture(autouse=True)
def _interpreting(monkeypatch: pytest.MonkeyPatch) -> None:
    # The interpreter also reads the flag while it runs a kernel, not only at decoration.
    monkeypatch.setenv("TRITON_INTERPRET", "1")


TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}


def _paged_kv(ctx_lens: list[int], kv_heads: int, page_size: int, head_dim: int, dtype: torch.dtype,
              gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A pool with the sequences' pages scattered at random, NaN everywhere a kernel must not read
    (slots past each context, spare pages, the page-table padding), and the int32 page table."""
    need = [-(-n // page_size) for n in ctx_lens]
    num_pages = sum(need) + 3
    shape = (kv_heads, num_pages, page_size, head_dim)
    k = torch.full(shape, float("nan"), dtype=dtype)
    v = torch.full(shape, float("nan"), dtype=dtype)
    order = torch.randperm(num_pages - 1, generator=gen) + 1   # page 0 stays poison: the padding
    table = torch.zeros(len(ctx_lens), max(need), dtype=torch.int32)
    used = 0
    for i, (n, p) in enumerate(zip(ctx_lens, need)):
        pages = order[used:used + p]
        used += p
        table[i, :p] = pages.int()
        for j, page in enumerate(pages.tolist()):
            filled = min(page_size, n - j * page_size)
            k[:, page, :filled] = torch.randn(kv_heads, filled, head_dim, generator=gen).to(dtype)
            v[:, page, :filled] = torch.randn(kv_heads, filled, head_dim, generator=gen).to(dtype)
    return k, v, table


# (kv heads, query heads per kv head, page size, head dim): GQA ratios 1 and 3, page sizes 16 and 4,
# a head dim that is not a power of two.
SHAPES = [(2, 1, 16, 32), (1, 3, 4, 24), (2, 3, 16, 16)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kv_heads,group,page_size,head_dim", SHAPES)
def test_decode_matches_reference(dtype, kv_heads, group, page_size, head_dim):
    gen = torch.Generator().manual_seed(kv_heads * 100 + group * 10 + page_size)
    for ctx_lens in ([1], [page_size, page_size + 1, 3], [2 * page_size + 3, 5, page_size - 1, 70, 33]):
        k, v, table = _paged_kv(ctx_lens, kv_heads, page_size, head_dim, dtype, gen)
        q = torch.randn(len(ctx_lens), kv_heads * group, head_dim, generator=gen).to(dtype)
        lens = torch.tensor(ctx_lens, dtype=torch.int32)
        got = paged_decode_attention(q, k, v, table, lens)
        want = paged_decode_attention_reference(q, k, v, table, lens)
        assert got.dtype == dtype
        torch.testing.assert_close(got.float(), want.float(), **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_k_decode_matches_reference(dtype):
    # Splits past a short context see no key (weight 0 in the merge); a split count that does not
    # divide the blocks; GQA group 4 as in Llama-3-8B.
    gen = torch.Generator().manual_seed(21)
    ctx_lens = [1, 5, 17, 130, 64]
    k, v, table = _paged_kv(ctx_lens, 2, 8, 16, dtype, gen)
    q = torch.randn(len(ctx_lens), 8, 16, generator=gen).to(dtype)
    lens = torch.tensor(ctx_lens, dtype=torch.int32)
    want = paged_decode_attention_reference(q, k, v, table, lens)
    for splits in (2, 3, 8):
        got = paged_decode_attention(q, k, v, table, lens, num_splits=splits, block_n=16)
        torch.testing.assert_close(got.float(), want.float(), **TOL[dtype])


def test_split_count_fills_the_device_without_tiny_chunks():
    assert decode_num_splits(batch=1, kv_heads=8, max_ctx_len=4096, num_sms=132) == 16
    assert decode_num_splits(batch=1, kv_heads=8, max_ctx_len=600, num_sms=132) == 2
    assert decode_num_splits(batch=64, kv_heads=8, max_ctx_len=4096, num_sms=132) == 1
    assert decode_num_splits(batch=4, kv_heads=8, max_ctx_len=100, num_sms=132) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kv_write_matches_reference(dtype):
    gen = torch.Generator().manual_seed(5)
    kv_heads, head_dim = 2, 24
    kv = torch.randn(6, 3 * kv_heads, head_dim, generator=gen).to(dtype)
    k, v = kv[:, kv_heads:2 * kv_heads], kv[:, 2 * kv_heads:]      # strided, as the model passes them
    pages = torch.tensor([3, 3, 1, 0, 2, 3], dtype=torch.int32)
    offsets = torch.tensor([0, 1, 3, 2, 0, 3], dtype=torch.int32)
    caches = [torch.randn(kv_heads, 4, 4, head_dim, generator=gen).to(dtype) for _ in range(2)]
    got = [c.clone() for c in caches]
    want = [c.clone() for c in caches]
    write_kv(k, v, got[0], got[1], pages, offsets)
    write_kv_reference(k, v, want[0], want[1], pages, offsets)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_decode_writes_only_its_rows_of_a_strided_batch():
    gen = torch.Generator().manual_seed(7)
    k, v, table = _paged_kv([9, 20], 1, 4, 16, torch.float32, gen)
    # q as the model produces it: a [T, H, D] view into a wider [T, H + KV, D] projection.
    qk = torch.randn(4, 3 + 1, 16, generator=gen)
    q = qk[:, :3]
    rows = torch.tensor([3, 1], dtype=torch.int32)
    out = torch.full((4, 3, 16), 5.0)
    paged_decode_attention(q, k, v, table, torch.tensor([9, 20], dtype=torch.int32), rows=rows, out=out)
    want = paged_decode_attention_reference(q[[3, 1]], k, v, table, torch.tensor([9, 20]))
    torch.testing.assert_close(out[[3, 1]], want, **TOL[torch.float32])
    assert bool((out[[0, 2]] == 5.0).all())


def _prefill_batch(kv_heads: int, group: int, page_size: int, head_dim: int, dtype: torch.dtype,
                   gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """(q, k, v, table, q_starts, q_lens, ctx_lens) of four prefill segments, (q_len, ctx_len): a
    fresh prompt, chunks after a cached prefix (one longer than a query block), a single token, a
    chunk ending mid-page; pages as _paged_kv lays them out."""
    segs = [(7, 7), (20, 37), (1, page_size + 1), (5, 2 * page_size + 1)]
    k, v, table = _paged_kv([c for _, c in segs], kv_heads, page_size, head_dim, dtype, gen)
    q_lens = torch.tensor([m for m, _ in segs], dtype=torch.int32)
    ctx_lens = torch.tensor([c for _, c in segs], dtype=torch.int32)
    q_starts = torch.cumsum(q_lens, 0, dtype=torch.int32) - q_lens
    q = torch.randn(int(q_lens.sum()), kv_heads * group, head_dim, generator=gen).to(dtype)
    return q, k, v, table, q_starts, q_lens, ctx_lens


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kv_heads,group,page_size,head_dim", SHAPES)
def test_prefill_matches_reference(dtype, kv_heads, group, page_size, head_dim):
    gen = torch.Generator().manual_seed(kv_heads * 100 + group * 10 + page_size + 1)
    batch = _prefill_batch(kv_heads, group, page_size, head_dim, dtype, gen)
    got = paged_prefill_attention(*batch, max_q_len=int(batch[5].max()))
    want = paged_prefill_attention_reference(*batch)
    torch.testing.assert_close(got.float(), want.float(), **TOL[dtype])


def test_prefill_reference_is_causal_attention_without_a_cache():
    # Anchor the reference itself: a fresh prompt is ordinary causal attention.
    gen = torch.Generator().manual_seed(3)
    k, v, table = _paged_kv([10], 1, 4, 16, torch.float32, gen)
    q = torch.randn(10, 2, 16, generator=gen)
    one = torch.tensor([0], dtype=torch.int32)
    got = paged_prefill_attention_reference(q, k, v, table, one, torch.tensor([10]), torch.tensor([10]))
    kc = k[:, table[0].long()].reshape(1, -1, 16)[:, :10].expand(2, 10, 16)
    vc = v[:, table[0].long()].reshape(1, -1, 16)[:, :10].expand(2, 10, 16)
    want = torch.nn.functional.scaled_dot_product_attention(q.transpose(0, 1), kc, vc, is_causal=True)
    torch.testing.assert_close(got, want.transpose(0, 1), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("vocab,words", [(100, 4), (100, 3), (64, 2)])
def test_bitmask_matches_reference(vocab, words):
    gen = torch.Generator().manual_seed(vocab + words)
    logits = torch.randn(5, vocab, generator=gen)
    bits = torch.randint(-(2 ** 31), 2 ** 31, (5, words), generator=gen, dtype=torch.int64).to(torch.int32)
    bits[1] = -1                    # everything allowed (past the width still masked)
    bits[2] = 0                     # nothing allowed
    for rows in (torch.tensor([3, 1, 2]), torch.tensor([], dtype=torch.long), None):
        got, want, via_torch = logits.clone(), logits.clone(), logits.clone()
        apply_bitmask(got, bits, rows)
        apply_bitmask_reference(want, bits, rows)
        torch_apply_bitmask(via_torch, bits, rows)
        assert torch.equal(got, want) and torch.equal(got, via_torch)


def _mixed_batch(page_size: int) -> tuple[list[tuple[int, int]], list[list[int]]]:
    """(q_len, ctx_len) per request and each request's page table: decodes, a prefill chunk after a
    cached prefix, and a fresh prompt."""
    segs = [(1, 9), (13, 21), (1, 1), (6, 6), (1, 2 * page_size)]
    tables, next_page = [], 1
    for _, ctx in segs:
        n = -(-ctx // page_size)
        tables.append(list(range(next_page, next_page + n))[::-1])   # descending: not contiguous
        next_page += n
    return segs, tables


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kv_heads,group,page_size", [(2, 1, 4), (1, 3, 16)])
def test_triton_backend_matches_torch_backend(dtype, kv_heads, group, page_size):
    head_dim, layers = 16, 2
    heads = kv_heads * group
    gen = torch.Generator().manual_seed(11)
    segs, tables = _mixed_batch(page_size)
    num_pages = 1 + sum(len(t) for t in tables) + 2
    pools = [PagePool(layers, num_pages, page_size, kv_heads, head_dim, dtype) for _ in range(2)]
    for layer in range(layers):   # the cached prefixes: same random K/V in both pools
        for cache in ("k", "v"):
            init = torch.randn(kv_heads, num_pages, page_size, head_dim, generator=gen).to(dtype)
            for pool in pools:
                getattr(pool, cache)[layer][:, :num_pages].copy_(init)
    segments, write_pages, write_offsets, t = segments_over_tables(segs, tables, page_size)
    backends = [TorchPagedAttention(pools[0], heads, kv_heads, head_dim),
                TritonPagedAttention(pools[1], heads, kv_heads, head_dim)]
    for b in backends:
        b.prepare(write_pages, write_offsets, segments)
    for layer in range(layers):
        qk = torch.randn(t, heads + kv_heads, head_dim, generator=gen).to(dtype)
        q, k = qk[:, :heads], qk[:, heads:]          # strided views, as the model passes them
        v = torch.randn(t, kv_heads, head_dim, generator=gen).to(dtype)
        want, got = (b.forward(layer, q, k, v) for b in backends)
        torch.testing.assert_close(got.float(), want.float(), **TOL[dtype])
        assert torch.equal(pools[0].k[layer], pools[1].k[layer]) and torch.equal(pools[0].v[layer], pools[1].v[layer])


def test_backend_choice_follows_the_device():
    pool = PagePool(1, 4, 4, 1, 16, torch.float32)
    assert isinstance(make_attention_backend(pool, 2, 1, 16), TorchPagedAttention)   # CPU default
    assert isinstance(make_attention_backend(pool, 2, 1, 16, backend="triton"), TritonPagedAttention)
    with pytest.raises(InvalidRequestError, match="attention_backend"):
        make_attention_backend(pool, 2, 1, 16, backend="flash")


@pytest.mark.gpu
def test_kernels_compiled_on_cuda():
    assert torch.cuda.is_available(), "the gpu marker needs a CUDA device"
    env = {k: val for k, val in os.environ.items() if k != "TRITON_INTERPRET"}   # compiled, not interpreted
    # One source for the CUDA kernel checks: step 1 of the prepared GPU check.
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_check.py"
    proc = subprocess.run([sys.executable, str(script), "--only", "kernels"], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_windowed_decode_matches_reference_and_never_reads_before_the_window():
    # Keys before each query's window are NaN: a kernel that read one would return NaN. Windows
    # shorter than a block, longer than one, longer than the context; one and several splits.
    dtype = torch.float32
    gen = torch.Generator().manual_seed(5)
    ctx_lens = [1, 5, 17, 70]
    for window in (6, 40, 500):
        k, v, table = _paged_kv(ctx_lens, 2, 8, 16, dtype, gen)
        q = torch.randn(len(ctx_lens), 8, 16, generator=gen).to(dtype)
        lens = torch.tensor(ctx_lens, dtype=torch.int32)
        want = paged_decode_attention_reference(q, k, v, table, lens, scale=0.3, window=window)
        assert not want.isnan().any()
        for i, n in enumerate(ctx_lens):     # the reference has read them; the kernel must not
            for pos in range(max(0, n - window)):
                page, slot = int(table[i, pos // 8]), pos % 8
                k[:, page, slot] = float("nan")
                v[:, page, slot] = float("nan")
        for splits in (1, 3):
            got = paged_decode_attention(q, k, v, table, lens, scale=0.3, num_splits=splits, block_n=16, window=window)
            torch.testing.assert_close(got.float(), want.float(), **TOL[dtype])


def test_windowed_prefill_matches_reference():
    # test_prefill_matches_reference's batch under windows: rows whose window starts past the first
    # key block (a row that sees nothing in a block before its first visible key), chunks after a
    # cached prefix, a window wider than the context.
    dtype = torch.float32
    batch = _prefill_batch(2, 3, 16, 16, dtype, torch.Generator().manual_seed(8))
    for window in (3, 100):
        got = paged_prefill_attention(*batch, max_q_len=int(batch[5].max()), window=window)
        want = paged_prefill_attention_reference(*batch, window=window)
        torch.testing.assert_close(got.float(), want.float(), **TOL[dtype])


def test_windowed_backends_agree():
    """configure(scale, windows): the Triton and torch backends on a mixed batch with a windowed
    and a global layer, and a backend that cannot apply windows refuses them."""
    dtype, kv_heads, group, page_size, head_dim, layers = torch.float32, 2, 2, 4, 16, 2
    heads = kv_heads * group
    gen = torch.Generator().manual_seed(13)
    segs, tables = _mixed_batch(page_size)
    num_pages = 1 + sum(len(t) for t in tables) + 2
    pools = [PagePool(layers, num_pages, page_size, kv_heads, head_dim, dtype) for _ in range(2)]
    for layer in range(layers):
        for cache in ("k", "v"):
            init = torch.randn(kv_heads, num_pages, page_size, head_dim, generator=gen).to(dtype)
            for pool in pools:
                getattr(pool, cache)[layer][:, :num_pages].copy_(init)
    segments, write_pages, write_offsets, t = segments_over_tables(segs, tables, page_size)
    backends = [TorchPagedAttention(pools[0], heads, kv_heads, head_dim),
                TritonPagedAttention(pools[1], heads, kv_heads, head_dim)]
    for b in backends:
        b.configure(0.2, [5, None])
        b.prepare(write_pages, write_offsets, segments)
    outs = []
    for layer in range(layers):
        q = torch.randn(t, heads, head_dim, generator=gen)
        k = torch.randn(t, kv_heads, head_dim, generator=gen)
        v = torch.randn(t, kv_heads, head_dim, generator=gen)
        want, got = (b.forward(layer, q, k, v) for b in backends)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        outs.append(want)

    class NoWindows(TorchPagedAttention):   # a subclass that does not declare applies_windows
        pass
    with pytest.raises(ValueError, match="does not apply sliding windows"):
        NoWindows(pools[0], heads, kv_heads, head_dim).configure(0.2, [5, None])
