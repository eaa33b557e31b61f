"""A batch of attention segments over given page tables, as the scheduler would hand it to an
attention backend: each (q_len, ctx_len) segment's new tokens are its context's last q_len
positions, written at their page/offset. Shared by the attention backend and kernel tests."""

from __future__ import annotations

import torch

from sgrun.engine.parts.attention.backend import Segment


def segments_over_tables(specs: list[tuple[int, int]], tables: list[list[int]], page_size: int):
    """specs: (q_len, ctx_len) per segment; tables: its page ids. Returns (segments,
    write_pages, write_offsets, total new tokens)."""
    segments, write_pages, write_offsets, t = [], [], [], 0
    for (q_len, ctx), table in zip(specs, tables):
        pages = torch.tensor(table, dtype=torch.long)
        segments.append(Segment(q_start=t, q_len=q_len, ctx_len=ctx, pages=pages))
        pos = torch.arange(ctx - q_len, ctx)
        write_pages.append(pages[pos // page_size])
        write_offsets.append(pos % page_size)
        t += q_len
    return segments, torch.cat(write_pages), torch.cat(write_offsets), t
