"""CUDA graphs for decode: one graph per captured batch size, replayed for any decode-only
batch up to the largest size (padded up to the next captured one).

A decode step of a small batch is mostly kernel-launch overhead (about 10 launches per layer);
a replayed graph issues them all at once. The graph reads its inputs from persistent buffers —
token ids, positions, the page table, context lengths, KV write slots — which `run` refills
before each replay. Padding rows attend to one key in a scratch page the pool never hands out,
and write their K/V there, so they touch no request's pages. The split-K decode kernel's grid
depends only on the batch size (the chunk length is computed in the kernel), so one capture
serves every context length up to the engine's limit.
"""

from __future__ import annotations

import bisect
import logging
import time
from dataclasses import dataclass

import torch

from sgrun.engine.parts.attention.triton_backend import DecodeMeta, TritonPagedAttention
from sgrun.kernels.triton import decode_num_splits

log = logging.getLogger("sgrun.engine")

CAPTURE_SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256)


def capture_sizes(max_batch: int) -> list[int]:
    sizes = [s for s in CAPTURE_SIZES if s < max_batch]
    return sizes + [max_batch]


@dataclass
class CaptureReport:
    sizes: list[int]
    seconds: float
    memory_bytes: int


class CudaGraphRunner:
    def __init__(self, model, attn: TritonPagedAttention, max_batch: int, max_context: int, scratch_page: int):
        self.model = model
        self.attn = attn
        self.scratch_page = scratch_page
        self.sizes = capture_sizes(max_batch)
        self.max_batch = self.sizes[-1]
        dev = attn.device
        n, ps = self.max_batch, attn.pool.page_size
        self.max_pages = -(-max_context // ps)
        self.max_context = max_context
        self.input_ids = torch.zeros(n, dtype=torch.long, device=dev)
        self.positions = torch.zeros(n, dtype=torch.long, device=dev)
        self.page_table = torch.full((n, self.max_pages), scratch_page, dtype=torch.int32, device=dev)
        self.ctx_lens = torch.ones(n, dtype=torch.int32, device=dev)
        self.write_pages = torch.full((n,), scratch_page, dtype=torch.int32, device=dev)
        self.write_offsets = torch.zeros(n, dtype=torch.int32, device=dev)
        self.rows = torch.arange(n, dtype=torch.int32, device=dev)
        self.logit_rows = torch.arange(n, dtype=torch.long, device=dev)
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor, DecodeMeta]] = {}
        self.report: CaptureReport | None = None

    def _meta(self, bs: int) -> DecodeMeta:
        splits = decode_num_splits(bs, self.attn.KV, self.max_context, self.attn.num_sms)
        return DecodeMeta(self.page_table[:bs], self.ctx_lens[:bs], self.rows[:bs], splits)

    def _bind(self, bs: int, meta: DecodeMeta) -> None:
        self.attn.bind_static_decode(self.write_pages[:bs], self.write_offsets[:bs], meta)

    def _forward(self, bs: int) -> torch.Tensor:
        return self.model.forward(self.input_ids[:bs], self.positions[:bs], self.attn, self.logit_rows[:bs])

    def capture(self) -> CaptureReport:
        """Capture every size, largest first so the smaller graphs reuse its memory pool."""
        dev = self.attn.device
        with torch.cuda.device(dev):
            return self._capture(dev)

    def _capture(self, dev: torch.device) -> CaptureReport:
        torch.cuda.synchronize(dev)
        free_before = torch.cuda.mem_get_info(dev)[0]
        t0 = time.perf_counter()
        mempool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream(dev)
        for bs in reversed(self.sizes):
            meta = self._meta(bs)
            self._bind(bs, meta)
            stream.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(stream):
                for _ in range(2):   # warm-up: Triton compiles, cuBLAS picks its kernels
                    self._forward(bs)
            torch.cuda.current_stream(dev).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=mempool, stream=stream):
                out = self._forward(bs)
            self.graphs[bs] = (graph, out, meta)
        torch.cuda.synchronize(dev)
        self.report = CaptureReport(list(self.sizes), time.perf_counter() - t0,
                                    free_before - torch.cuda.mem_get_info(dev)[0])
        log.info("captured %d CUDA graphs (batch %s) in %.1f s, %.0f MiB", len(self.sizes), self.sizes,
                 self.report.seconds, self.report.memory_bytes / 2**20)
        return self.report

    def can_run(self, batch_size: int, max_ctx_len: int) -> bool:
        return 0 < batch_size <= self.max_batch and max_ctx_len <= self.max_context

    def run(self, input_ids: torch.Tensor, positions: torch.Tensor, table: torch.Tensor, ctx_lens: torch.Tensor,
            write_pages: torch.Tensor, write_offsets: torch.Tensor) -> torch.Tensor:
        """A decode-only batch of b rows (device tensors; table [b, w] int32) -> logits [b, V]."""
        b = input_ids.shape[0]
        bs = self.sizes[bisect.bisect_left(self.sizes, b)]
        graph, out, _ = self.graphs[bs]
        self.input_ids[:b].copy_(input_ids, non_blocking=True)
        self.positions[:b].copy_(positions, non_blocking=True)
        self.page_table[:b, : table.shape[1]].copy_(table, non_blocking=True)
        self.ctx_lens[:b].copy_(ctx_lens, non_blocking=True)
        self.write_pages[:b].copy_(write_pages, non_blocking=True)
        self.write_offsets[:b].copy_(write_offsets, non_blocking=True)
        if bs > b:   # padding rows: one key in the scratch page, written there too
            self.input_ids[b:bs].zero_()
            self.positions[b:bs].zero_()
            self.page_table[b:bs, 0].fill_(self.scratch_page)
            self.ctx_lens[b:bs].fill_(1)
            self.write_pages[b:bs].fill_(self.scratch_page)
            self.write_offsets[b:bs].zero_()
        graph.replay()
        return out[:b]
