"""Token-by-token logits of one sequence through the real paged path (prefill of the prompt,
then one decode step per token), on a private pool: the yardstick for numerics (bf16 against a
float32 reference, see benchmarks/bench_bf16_accuracy.py and tests/test_bf16_accuracy.py).

Greedy when `forced` is None (stops after an EOS), teacher-forced otherwise: step i is fed
forced[i - 1], so every configuration is compared at the same positions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from sgrun.engine.parts.attention.backend import Segment
from sgrun.engine.parts.attention.torch_backend import TorchPagedAttention
from sgrun.engine.state.page_pool import PagePool
from sgrun.models.llama import LlamaModel


@dataclass
class DecodeTrace:
    tokens: list[int]            # the argmax at each step (the greedy choice)
    logits: torch.Tensor         # [steps, V] float32, step i predicts token i
    decode_seconds: float        # time inside the decode-step forwards (prefill excluded)


@torch.inference_mode()
def decode_trace(model: LlamaModel, prompt_ids: list[int], steps: int, forced: list[int] | None = None,
                 stop_ids: set[int] | frozenset[int] = frozenset(), score_dtype: torch.dtype = torch.float32,
                 page_size: int = 16, kv_dtype: torch.dtype | None = None) -> DecodeTrace:
    """kv_dtype: the pool's (default the model's; bf16 under a float32 model, as kv_cache_dtype)."""
    cfg = model.cfg
    total = len(prompt_ids) + steps
    pool = PagePool(cfg.num_layers, -(-total // page_size), page_size, cfg.num_kv_heads, cfg.head_dim,
                    kv_dtype or model.dtype)
    attn = TorchPagedAttention(pool, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim)  # CPU: the numerics under test
    attn.score_dtype = score_dtype
    pages = torch.tensor(pool.alloc(pool.num_pages), dtype=torch.long)
    tokens, rows = list(prompt_ids), []
    picked: list[int] = []
    decode_seconds = 0.0
    start = 0
    for step in range(steps if forced is None else len(forced)):
        end = len(tokens)
        pos = torch.arange(start, end)
        attn.prepare(pages[pos // page_size], pos % page_size,
                     [Segment(q_start=0, q_len=end - start, ctx_len=end, pages=pages[: -(-end // page_size)])])
        t0 = time.perf_counter()
        logits = model.forward(torch.tensor(tokens[start:end]), pos, attn, torch.tensor([end - start - 1]))[0]
        if step > 0:
            decode_seconds += time.perf_counter() - t0
        rows.append(logits)
        best = int(logits.argmax())
        picked.append(best)
        nxt = best if forced is None else forced[step]
        tokens.append(nxt)
        start = end
        if forced is None and nxt in stop_ids:
            break
    return DecodeTrace(picked, torch.stack(rows), decode_seconds)


@dataclass
class Drift:
    mean_kl: float               # mean over positions of KL(reference || candidate), nats
    top1: float                  # fraction of positions whose argmax agrees
    exact: bool                  # every position agrees: free-running greedy output is identical
    positions: int


def drift(reference: torch.Tensor, candidate: torch.Tensor) -> Drift:
    ref_lp = torch.log_softmax(reference.double(), dim=-1)
    cand_lp = torch.log_softmax(candidate.double(), dim=-1)
    kl = (ref_lp.exp() * (ref_lp - cand_lp)).sum(-1)
    agree = reference.argmax(-1) == candidate.argmax(-1)
    return Drift(float(kl.mean()), float(agree.float().mean()), bool(agree.all()), reference.shape[0])
