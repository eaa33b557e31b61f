"""ModelRunner: turns a scheduled batch into flat tensors, runs the model, returns logits."""

from __future__ import annotations

import time

import torch

from sgrun.engine.attention import Segment
from sgrun.engine.attention_backend import make_attention_backend
from sgrun.engine.page_pool import PagePool
from sgrun.engine.scheduler import ScheduledBatch
from sgrun.models.llama import LlamaModel


class ModelRunner:
    def __init__(self, model: LlamaModel, pool: PagePool):
        self.model = model
        self.pool = pool
        cfg = model.cfg
        self.attn = make_attention_backend(pool, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim)
        self.forward_calls = 0
        self.tokens_computed = 0  # tokens run through the model (prefill + decode), for cache accounting
        self.model_time = 0.0   # seconds inside the model forward itself (the rest is engine overhead)

    def forward(self, batch: ScheduledBatch, logit_rows_of: dict[int, list[int]]) -> torch.Tensor:
        """logit_rows_of: seq_id -> offsets within that sequence's chunk that need logits.
        Returns logits in the order of batch.items, offsets ascending."""
        ps = self.pool.page_size
        ids: list[int] = []
        positions: list[torch.Tensor] = []
        segments: list[Segment] = []
        rows: list[int] = []
        t = 0
        for seq, n in batch.items:
            start, end = seq.num_computed, seq.num_computed + n
            ids.extend(seq.tokens[start:end])
            positions.append(torch.arange(start, end))
            pages = torch.tensor(seq.page_table[: -(-end // ps)], dtype=torch.long)
            segments.append(Segment(q_start=t, q_len=n, ctx_len=end, pages=pages))
            rows.extend(t + off for off in logit_rows_of.get(seq.seq_id, ()))
            t += n
        pos = torch.cat(positions)
        # Page and offset of every new token, from its sequence's page table.
        write_pages = torch.cat([seg.pages[p // ps] for seg, p in zip(segments, positions)])
        self.attn.prepare(write_pages, pos % ps, segments)
        self.forward_calls += 1
        self.tokens_computed += t
        input_ids, rows_t = torch.tensor(ids, dtype=torch.long), torch.tensor(rows, dtype=torch.long)
        t0 = time.perf_counter()
        logits = self.model.forward(input_ids, pos, self.attn, rows_t)
        self.model_time += time.perf_counter() - t0
        return logits
