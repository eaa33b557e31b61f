"""The streamed weights on transparent huge pages (sgrun/models/huge_pages.py): moved in place,
contents kept, on the kernels that can, and said plainly where they cannot."""

from __future__ import annotations

import platform
import sys

import torch

from sgrun.models import huge_pages


def kernel_collapses() -> bool:
    """Linux 6.1+ (MADV_COLLAPSE) with THP not `never`: where the move must happen."""
    if not sys.platform.startswith("linux") or huge_pages.thp_mode() in (None, "never"):
        return False
    major, minor = (int(x) for x in platform.release().split(".")[:2])
    return (major, minor) >= (6, 1)


def anon_huge_kb(ptr: int, nbytes: int) -> int:
    """AnonHugePages of the mappings that overlap [ptr, ptr + nbytes), from /proc/self/smaps."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(x, 16) for x in head.split("-"))
                inside = start < ptr + nbytes and ptr < end
            elif inside and head == "AnonHugePages:":
                total += int(line.split()[1])
    return total


def test_weights_move_onto_huge_pages_in_place_with_their_contents():
    w = torch.randint(-128, 127, (24 << 20,), dtype=torch.int8)   # 24 MiB: whole 2 MB blocks inside
    scales = torch.randn(3000)
    before_w, before_s, ptr = w.clone(), scales.clone(), w.data_ptr()
    report = huge_pages.back_with_huge_pages([w, scales, w[10:20], None])
    assert w.data_ptr() == ptr and torch.equal(w, before_w) and torch.equal(scales, before_s)
    if not sys.platform.startswith("linux"):   # nothing to move: the report says why
        assert report.summary() == "off (not Linux)" and report.huge_bytes == 0
        return
    assert report.weight_bytes == w.numel() + scales.numel() * 4   # the view and None add nothing
    assert w.data_ptr() == ptr and torch.equal(w, before_w) and torch.equal(scales, before_s)
    if kernel_collapses():
        assert report.huge_bytes >= 20 << 20, report.summary()
        assert anon_huge_kb(ptr, w.numel()) >= 20 << 10, "the kernel says the block is still on 4 KB pages"
        assert "of weights on huge pages" in report.summary()
    else:   # nothing to move: the report names why
        assert report.huge_bytes == 0 and ("off" in report.summary() or "refused" in report.summary())


def test_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setattr(huge_pages.sys, "platform", "linux")
    monkeypatch.setenv(huge_pages.DISABLE_ENV, "0")
    w = torch.zeros(4 << 20, dtype=torch.uint8)
    report = huge_pages.back_with_huge_pages([w])
    assert report.huge_bytes == 0 and report.summary() == f"off ({huge_pages.DISABLE_ENV}=0)"


def test_thp_never_is_reported(monkeypatch):
    monkeypatch.setattr(huge_pages.sys, "platform", "linux")
    monkeypatch.setattr(huge_pages, "thp_mode", lambda: "never")
    report = huge_pages.back_with_huge_pages([torch.zeros(4 << 20, dtype=torch.uint8)])
    assert report.summary() == "off (transparent huge pages never)"


def test_default_engine_streams_weights_from_huge_pages(engine):
    import sgrun
    got = engine.startup_report().get("weight_pages")
    assert got is not None, "the default engine's C++ decode must report its weight pages"
    if kernel_collapses() and huge_pages.enabled():
        report = engine.runner.fused.huge_pages
        assert report.huge_bytes >= 0.8 * report.weight_bytes > 0, got
    out = engine.generate(["The capital of France is"], sgrun.SamplingParams(max_new_tokens=4, temperature=0,
                                                                            ignore_eos=True))[0]
    assert len(out.token_ids) == 4


def test_the_kv_pool_faults_in_on_huge_pages():
    from sgrun.engine.state.page_pool import PagePool
    pool = PagePool(num_layers=1, num_pages=8191, page_size=16, kv_heads=3, head_dim=64, dtype=torch.bfloat16)
    k = pool.k[0]
    assert k.shape == (3, 8192, 16, 64) and k.dtype == torch.bfloat16 and not k.any(), "a pool starts zeroed"
    if huge_pages._usable():   # THP madvise or always: nothing is resident until written, then 2 MB pages
        assert anon_huge_kb(k.data_ptr(), k.numel() * 2) == 0, "the pool must be faulted lazily, not at start-up"
        k.fill_(1.0)
        assert anon_huge_kb(k.data_ptr(), k.numel() * 2) >= 40 << 10
