"""How rank 0 sends each forward's batch metadata to the tensor-parallel workers: two tensor
broadcasts, no pickling.

1. A fixed-shape int64 header: what the message is (a step, or stop), whether rank 0's tensors
   were on its accelerator, the length and dtype of each array, the segment count.
2. For a step, one int64 body: token ids, positions, write pages, write offsets, a
   [segments, 4] table (q_start, q_len, ctx_len, page count), then every segment's pages.

The header has the same shape every step, so the receiver can post it before it knows the batch;
its sizes then let it allocate the body. Pickling a StepMessage (broadcast_object_list) cost a
pickle, a size broadcast and a byte broadcast per step, and the unpickling on every worker.

Under NCCL both tensors live on the rank's CUDA device (NCCL moves device memory only); under
gloo on the CPU."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from sgrun.engine.parts.attention.backend import Segment

STOP, STEP = 0, 1
# Header slots.
_KIND, _ON_DEVICE, _N_SEGMENTS, _N_PAGES = 0, 1, 2, 3
_LENGTHS = slice(4, 8)        # input_ids, positions, write_pages, write_offsets
_DTYPES = slice(8, 13)        # the same four, then pages
HEADER_LEN = 13
# The integer dtypes a step's arrays may have, by code (the body carries them all as int64).
_DTYPE_CODES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


@dataclass
class StepMessage:
    """One forward pass, as every rank needs it (tensors on the CPU; workers move them)."""
    input_ids: torch.Tensor
    positions: torch.Tensor
    write_pages: torch.Tensor
    write_offsets: torch.Tensor
    segments: list[Segment]
    on_device: bool = False   # rank 0's tensors were on its accelerator: workers move them to theirs


def send_step(msg: StepMessage, comm_device: torch.device) -> None:
    """Rank 0: broadcast `msg` (its tensors on the CPU)."""
    arrays = (msg.input_ids, msg.positions, msg.write_pages, msg.write_offsets)
    pages = [seg.pages for seg in msg.segments]
    page_dtype = pages[0].dtype if pages else torch.long
    header = [STEP, int(msg.on_device), len(msg.segments), sum(p.numel() for p in pages),
              *(a.numel() for a in arrays), *(_DTYPE_CODES.index(dt) for dt in (*(a.dtype for a in arrays), page_dtype))]
    table = torch.tensor([[s.q_start, s.q_len, s.ctx_len, s.pages.numel()] for s in msg.segments],
                         dtype=torch.long).reshape(-1)
    body = torch.cat([a.reshape(-1).long() for a in arrays] + [table] + [p.reshape(-1).long() for p in pages])
    dist.broadcast(torch.tensor(header, dtype=torch.long, device=comm_device), src=0)
    dist.broadcast(body.to(comm_device), src=0)


def send_stop(comm_device: torch.device) -> None:
    """Rank 0: tell the workers to leave their loop."""
    header = torch.zeros(HEADER_LEN, dtype=torch.long, device=comm_device)   # _KIND == STOP
    dist.broadcast(header, src=0)


def receive_step(comm_device: torch.device) -> StepMessage | None:
    """Workers: the next step, or None when rank 0 said stop. Tensors are on `comm_device`."""
    header_t = torch.empty(HEADER_LEN, dtype=torch.long, device=comm_device)
    dist.broadcast(header_t, src=0)
    header: list[Any] = header_t.tolist()
    if header[_KIND] == STOP:
        return None
    lengths, n_seg, n_pages = header[_LENGTHS], header[_N_SEGMENTS], header[_N_PAGES]
    dtypes = [_DTYPE_CODES[c] for c in header[_DTYPES]]
    body = torch.empty(sum(lengths) + 4 * n_seg + n_pages, dtype=torch.long, device=comm_device)
    dist.broadcast(body, src=0)
    parts = list(torch.split(body, [*lengths, 4 * n_seg, n_pages]))
    arrays = [p.to(dt) for p, dt in zip(parts[:4], dtypes)]
    table = parts[4].view(n_seg, 4).tolist()
    seg_pages = torch.split(parts[5].to(dtypes[4]), [row[3] for row in table]) if n_seg else ()
    segments = [Segment(q_start=q0, q_len=ql, ctx_len=cl, pages=pg) for (q0, ql, cl, _), pg in zip(table, seg_pages)]
    return StepMessage(*arrays, segments, on_device=bool(header[_ON_DEVICE]))
