"""Is a speculative verify row computed exactly as the plain decode at its position? A direct
experiment on the real model, outside the engine's scheduling.

    python benchmarks/check_verify_rows.py [--quantization none,int4] [--compile on,off]
                                           [--dtype bfloat16] [--context 300] [--rows 7]

For each setting: a prompt of `--context` tokens is prefilled into two fresh KV pools. Pool A
then decodes `--rows` given tokens one forward at a time (T = 1, as plain greedy decoding does);
pool B runs them in one forward (T = rows, each row a decode segment at its own position, as a
verify step does). Printed per row: whether the logits are bitwise equal and the largest
difference; then the same for the K/V the forward wrote, and, layer by layer, for one linear
(the first layer's QKV projection) run on the same input rows at M = 1 and M = rows, eagerly
and through the compiled T = 1 / dynamic-T graphs' `first_block`.
"""

from __future__ import annotations

import argparse

import torch
from bench_options import add_dtype, add_quantization, add_threads, load_avg, machine_line

from sgrun.engine.parts.attention.backend import Segment
from sgrun.engine.parts.attention.choice import make_attention_backend
from sgrun.engine.state.page_pool import PagePool
from sgrun.models.loader import load_model


def forward_rows(model, forward, pool: PagePool, tokens: list[int], start: int, one_by_one: bool) -> torch.Tensor:
    """Logits of `tokens` at positions start.. into `pool` (whose first `start` positions are
    filled), one T = 1 forward per token or one forward of all of them as decode segments."""
    cfg = model.cfg
    attn = make_attention_backend(pool, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, backend="cpp")
    ps = pool.page_size
    n = len(tokens)
    pages = torch.arange(-(-(start + n) // ps), dtype=torch.long)
    groups = [[j] for j in range(n)] if one_by_one else [list(range(n))]
    out = []
    for g in groups:
        pos = [start + j for j in g]
        segs = [Segment(q_start=i, q_len=1, ctx_len=p + 1, pages=pages[: -(-(p + 1) // ps)]) for i, p in enumerate(pos)]
        p_t = torch.tensor(pos, dtype=torch.long)
        attn.prepare(pages[p_t // ps], p_t % ps, segs)
        out.append(forward(torch.tensor([tokens[j] for j in g]), p_t, attn, torch.arange(len(g))))
    return torch.cat(out)


def prefill(model, pool: PagePool, prompt: list[int]) -> None:
    cfg = model.cfg
    attn = make_attention_backend(pool, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, backend="cpp")
    ps, n = pool.page_size, len(prompt)
    pages = torch.arange(-(-n // ps), dtype=torch.long)
    pos = torch.arange(n)
    attn.prepare(pages[pos // ps], pos % ps, [Segment(q_start=0, q_len=n, ctx_len=n, pages=pages)])
    model.forward(torch.tensor(prompt), pos, attn, torch.tensor([n - 1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    add_quantization(ap, "none,int4", several=True)
    ap.add_argument("--compile", default="on,off")
    add_dtype(ap, "bfloat16")
    ap.add_argument("--context", type=int, default=300)
    ap.add_argument("--rows", type=int, default=7)
    add_threads(ap)
    args = ap.parse_args()
    print(machine_line(args.threads), flush=True)
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, 40000, (args.context,), generator=gen).tolist()
    tokens = torch.randint(100, 40000, (args.rows,), generator=gen).tolist()
    print(f"load {load_avg()}, {args.threads} threads, dtype {args.dtype}, context {args.context}, "
          f"{args.rows} rows")
    for quant in args.quantization.split(","):
        model, _, _ = load_model(None, dtype, quant, torch.device("cpu"))
        for comp in args.compile.split(","):
            forward = model.forward
            if comp == "on":
                from sgrun.models.compiled_forward import compiled_forward_for
                compiled = compiled_forward_for(model)
                compiled.warm_up()
                forward = compiled.forward
            cfg = model.cfg
            pools = [PagePool(cfg.num_layers, -(-(args.context + args.rows) // 16) + 1, 16, cfg.num_kv_heads,
                              cfg.head_dim, dtype) for _ in range(2)]
            with torch.inference_mode():
                for pool in pools:
                    prefill(model, pool, prompt)
                a = forward_rows(model, forward, pools[0], tokens, args.context, one_by_one=True)
                b = forward_rows(model, forward, pools[1], tokens, args.context, one_by_one=False)
            same = [bool(torch.equal(a[j], b[j])) for j in range(args.rows)]
            diff = [(a[j] - b[j]).abs().max().item() for j in range(args.rows)]
            kv_same = all(torch.equal(x, y) for x, y in zip(pools[0].k + pools[0].v, pools[1].k + pools[1].v))
            print(f"[{quant}, compile {comp}] logits bitwise equal per row: {same}; max |diff| "
                  f"{max(diff):.3g}; KV written bitwise equal: {kv_same}")
            lin = model.layers[0].qkv
            x = torch.randn(args.rows, cfg.hidden_size, generator=gen).to(dtype)
            with torch.inference_mode():
                full = lin(x)
                rows = torch.cat([lin(x[j:j + 1]) for j in range(args.rows)])
            print(f"  layer-0 QKV linear alone (eager): M = 1 vs M = {args.rows} bitwise equal: {torch.equal(full, rows)}"
                  f" (max |diff| {(full.float() - rows.float()).abs().max().item():.3g})")


if __name__ == "__main__":
    main()
