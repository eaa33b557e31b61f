"""The prepared GPU check: kernels, backend equality and throughput on one CUDA device, offline.

    python benchmarks/gpu_check.py                  # on a CUDA machine: all four steps, <= 8 min on an H200
    python benchmarks/gpu_check.py --only kernels   # step 1 alone (what `pytest -m gpu` runs)
    TRITON_INTERPRET=1 python benchmarks/gpu_check.py --smoke   # CPU dry run on tiny shapes

No network and no checkpoint: the models are random weights in the config shapes of
SmolLM2-135M (float32) and Llama-3-8B (bfloat16), with a synthetic byte-level tokenizer
(sgrun/models/random_model.py). Steps:
  1. kernels (split-K decode, extend, KV write, bitmask) against their torch references on CUDA;
  2. greedy equality: engine with the Triton backend vs the torch backend on the same device,
     SmolLM2 shape, 8 prompts, 32 new tokens, float32;
  3. 8B-shape throughput: decode tok/s at batch 1/16/64/256 with 1k-token contexts, prefill
     tok/s at 4k, TTFT, decode attention's achieved bandwidth vs a measured copy rate, CUDA
     graphs on/off, overlap on/off, JSON-schema-constrained vs free at batch 64;
  4. the same decode workload through transformers `generate` (the peer).
Prints one table; writes everything as JSON to $OUT/gpu_check.json when $OUT is set.
Decode rates are differential: (tokens of a long run - tokens of a short run) / (time difference),
so prefill and start-up cancel out.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def _bare_checkout_imports() -> None:
    """Let a checkout that was never pip-installed import sgrun (the Triton kernels and the
    grammars live inside it, as sgrun/kernels and sgrun/grammars)."""
    try:
        import sgrun  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(ROOT))


_bare_checkout_imports()
import sgrun  # noqa: E402
from sgrun.engine.state.sampling_params import SamplingParams  # noqa: E402

# A fixed-length string field: every constrained request runs to the length cap like the free
# ones, so the two runs keep the same batch occupancy and differ only by the masking work.
SCHEMA = {"type": "object", "properties": {"text": {"type": "string", "minLength": 120, "maxLength": 120}},
          "required": ["text"], "additionalProperties": False}


class Shapes:
    """The workload sizes; --smoke shrinks every one so the whole script runs on a CPU."""
    def __init__(self, smoke: bool):
        self.small, self.big = ("random:tiny", "random:tiny") if smoke else ("random:smollm2-135m", "random:llama-3-8b")
        self.ctx = 48 if smoke else 1024
        self.prefill = 256 if smoke else 4096
        self.batches = [1, 4] if smoke else [1, 16, 64, 256]
        self.constrained_batch = 4 if smoke else 64
        self.short, self.long = (2, 6) if smoke else (8, 40)
        self.attn_batch, self.attn_ctx = (2, 64) if smoke else (64, 4096)
        self.equal_prompts, self.equal_tokens = (8, 8) if smoke else (8, 32)
        self.big_dtype = "float32" if smoke else "bfloat16"


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _forget(spec: str, dtype: torch.dtype, device: str) -> None:
    """Drop a random model from the process-wide model cache (its weights are freed)."""
    from sgrun.engine.parts.device import resolve_device
    from sgrun.models.loader import forget_model
    forget_model(spec, dtype, resolve_device(device))
    _free()


def _free() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# --- step 1 -------------------------------------------------------------------------------------
def check_kernels(device: str) -> dict:
    from sgrun.kernels.triton import (apply_bitmask, apply_bitmask_reference, decode_num_splits, paged_decode_attention,
                               paged_decode_attention_reference, paged_prefill_attention,
                               paged_prefill_attention_reference, write_kv, write_kv_reference)
    gen = torch.Generator(device=device).manual_seed(0)
    cases = 0
    on_gpu = device.startswith("cuda")
    dtypes = ((torch.float32, 1e-4), (torch.bfloat16, 3e-2), (torch.float16, 1e-2)) if on_gpu else ((torch.float32, 1e-4),)
    shapes = ((8, 4, 16, 128), (8, 1, 16, 128), (3, 3, 16, 64), (1, 3, 4, 80)) if on_gpu else ((2, 2, 4, 16),)
    lens = [1, 15, 16, 17, 300, 1000] if on_gpu else [1, 5, 9, 20]
    for dtype, tol in dtypes:
        for kv, group, ps, d in shapes:
            pages = sum(-(-n // ps) for n in lens)
            k = torch.randn(kv, pages + 1, ps, d, device=device, generator=gen).to(dtype)
            v = torch.randn(kv, pages + 1, ps, d, device=device, generator=gen).to(dtype)
            width = max(-(-n // ps) for n in lens)
            perm = torch.randperm(pages, device=device, generator=gen).int() + 1
            table = torch.zeros(len(lens), width, dtype=torch.int32, device=device)
            used = 0
            for i, n in enumerate(lens):
                need = -(-n // ps)
                table[i, :need] = perm[used:used + need]
                used += need
            ctx = torch.tensor(lens, dtype=torch.int32, device=device)
            q = torch.randn(len(lens), kv * group, d, device=device, generator=gen).to(dtype)
            want = paged_decode_attention_reference(q, k, v, table, ctx).float()
            for splits in (1, 4, decode_num_splits(len(lens), kv, max(lens), 132)):
                got = paged_decode_attention(q, k, v, table, ctx, num_splits=splits).float()
                torch.testing.assert_close(got, want, atol=tol, rtol=tol)
                cases += 1
            q_lens = torch.tensor([min(n, m) for n, m in zip(lens, [1, 15, 16, 17, 200, 100])],
                                  dtype=torch.int32, device=device)
            starts = (torch.cumsum(q_lens, 0) - q_lens).int()
            q = torch.randn(int(q_lens.sum()), kv * group, d, device=device, generator=gen).to(dtype)
            got = paged_prefill_attention(q, k, v, table, starts, q_lens, ctx, int(q_lens.max()))
            want = paged_prefill_attention_reference(q, k, v, table, starts, q_lens, ctx)
            torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=tol)
            kn, vn = torch.randn(2, 40, kv, d, device=device, generator=gen).to(dtype)
            slots = torch.randperm(pages * ps, device=device, generator=gen)[:40]
            kc, vc, kr, vr = k.clone(), v.clone(), k.clone(), v.clone()
            write_kv(kn, vn, kc, vc, slots // ps, slots % ps)
            write_kv_reference(kn, vn, kr, vr, slots // ps, slots % ps)
            assert torch.equal(kc, kr) and torch.equal(vc, vr)
            cases += 2
    logits = torch.randn(8, 32001 if on_gpu else 300, device=device, generator=gen)
    bits = torch.randint(-2 ** 31, 2 ** 31, (8, logits.shape[1] // 32 + 1), device=device, generator=gen,
                         dtype=torch.int64).int()
    rows = torch.tensor([5, 0, 7], device=device)
    got, want = logits.clone(), logits.clone()
    apply_bitmask(got, bits, rows)
    apply_bitmask_reference(want, bits, rows)
    assert torch.equal(got, want)
    return {"kernel_cases_passed": cases + 1}


# --- step 2 -------------------------------------------------------------------------------------
def check_greedy_equality(sh: Shapes, device: str) -> dict:
    rng = random.Random(1)
    prompts = [[rng.randrange(300, 40000 if not sh.small.endswith("tiny") else 500) for _ in range(rng.randrange(20, 90))]
               for _ in range(sh.equal_prompts)]
    params = SamplingParams(max_new_tokens=sh.equal_tokens, temperature=0.0, ignore_eos=True)
    outs = {}
    for backend in ("torch", "triton"):
        eng = sgrun.Engine(sh.small, dtype="float32", device=device, attention_backend=backend, memory_gb=1.0)
        outs[backend] = [o.outputs[0].token_ids for o in eng.generate(prompts, params)]
        eng.close()
        del eng
        _free()
    _forget(sh.small, torch.float32, device)
    same = sum(a == b for a, b in zip(outs["torch"], outs["triton"]))
    assert same == len(prompts), f"greedy outputs differ: {same}/{len(prompts)} equal"
    return {"greedy_equal_prompts": same, "greedy_prompts": len(prompts), "greedy_tokens": sh.equal_tokens}


# --- step 3 -------------------------------------------------------------------------------------
def _prompts(n: int, length: int, seed: int, vocab_hi: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(300, vocab_hi) for _ in range(length)] for _ in range(n)]


def _timed_generate(eng, prompts, params) -> tuple[float, int]:
    t0 = time.perf_counter()
    outs = eng.generate(prompts, params)
    return time.perf_counter() - t0, sum(len(o.outputs[0].token_ids) for o in outs)


def decode_rate(eng, batch: int, sh: Shapes, seed: int, constrained: bool = False) -> float:
    """Differential decode tok/s at `batch` requests of sh.ctx-token prompts (prefix cache off):
    a run to sh.long new tokens minus a run to sh.short, same prompt lengths, so prefill cancels.
    Jump-forward is off in the constrained run: forced tokens would count as free throughput."""
    extra = {"json_schema": SCHEMA, "jump_forward": False} if constrained else {"ignore_eos": True}
    vocab_hi = min(eng.config.vocab_size - 1, 40000)
    runs = []
    for i, n in enumerate((sh.short, sh.long)):
        runs.append(_timed_generate(eng, _prompts(batch, sh.ctx, seed + i, vocab_hi),
                                    SamplingParams(max_new_tokens=n, temperature=0.0, **extra)))
    (t_short, n_short), (t_long, n_long) = runs
    if t_long <= t_short:
        return float("nan")   # noise larger than the signal (only ever seen in --smoke on a busy CPU)
    return (n_long - n_short) / (t_long - t_short)


def copy_bandwidth(device: str, nbytes: int) -> float:
    """Bytes/s of a device-to-device copy (read + write counted)."""
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    _sync(device)
    reps = 10
    t0 = time.perf_counter()
    for _ in range(reps):
        dst.copy_(src)
    _sync(device)
    return 2 * nbytes * reps / (time.perf_counter() - t0)


def decode_attention_bandwidth(sh: Shapes, device: str) -> dict:
    from sgrun.kernels.triton import decode_num_splits, paged_decode_attention
    kv, heads, d, ps = (8, 32, 128, 16) if not sh.big.endswith("tiny") else (2, 4, 16, 16)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    B, ctx = sh.attn_batch, sh.attn_ctx
    pages = B * ctx // ps
    k = torch.randn(kv, pages, ps, d, device=device, dtype=dtype)
    v = torch.randn_like(k)
    table = torch.randperm(pages, device=device).int().view(B, ctx // ps)
    lens = torch.full((B,), ctx, dtype=torch.int32, device=device)
    q = torch.randn(B, heads, d, device=device, dtype=dtype)
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.startswith("cuda") else 8
    splits = decode_num_splits(B, kv, ctx, sms)
    out = paged_decode_attention(q, k, v, table, lens, num_splits=splits)
    _sync(device)
    reps = 20 if device.startswith("cuda") else 1
    t0 = time.perf_counter()
    for _ in range(reps):
        paged_decode_attention(q, k, v, table, lens, num_splits=splits, out=out)
    _sync(device)
    sec = (time.perf_counter() - t0) / reps
    kv_bytes = 2 * k.numel() * k.element_size()
    copy = copy_bandwidth(device, min(kv_bytes, 4 << 30))
    del k, v
    _free()
    return {"attn_batch": B, "attn_ctx": ctx, "attn_splits": splits, "attn_ms": sec * 1e3,
            "attn_bandwidth_GBps": kv_bytes / sec / 1e9, "copy_bandwidth_GBps": copy / 1e9,
            "attn_fraction_of_copy": kv_bytes / sec / copy}


def throughput(sh: Shapes, device: str) -> dict:
    res: dict = {}
    common = dict(dtype=sh.big_dtype, device=device, attention_backend="triton", enable_prefix_cache=False,
                  max_running=max(sh.batches), max_batch_tokens=8192 if not sh.big.endswith("tiny") else 512,
                  mem_fraction=0.6 if device.startswith("cuda") else None,
                  memory_gb=None if device.startswith("cuda") else 0.5)
    eng = sgrun.Engine(sh.big, **common)
    res["startup"] = eng.startup_report()
    vocab_hi = min(eng.config.vocab_size - 1, 40000)
    for b in sh.batches:
        res[f"decode_tok_s_b{b}"] = decode_rate(eng, b, sh, seed=b)
    t, _ = _timed_generate(eng, _prompts(1, sh.prefill, 7, vocab_hi), SamplingParams(max_new_tokens=1, temperature=0.0))
    res["prefill_tok_s_4k"] = sh.prefill / t
    t, _ = _timed_generate(eng, _prompts(1, sh.ctx, 8, vocab_hi), SamplingParams(max_new_tokens=1, temperature=0.0))
    res["ttft_ms_1k"] = t * 1e3
    cb = sh.constrained_batch
    res[f"constrained_tok_s_b{cb}"] = decode_rate(eng, cb, sh, seed=100, constrained=True)
    res[f"free_tok_s_b{cb}"] = res.get(f"decode_tok_s_b{cb}") or decode_rate(eng, cb, sh, seed=101)
    res["constrained_vs_free"] = res[f"constrained_tok_s_b{cb}"] / res[f"free_tok_s_b{cb}"]
    cfg = eng.config
    eng.close()
    del eng
    _free()
    for name, kwargs in (("no_cuda_graph", {"cuda_graph": False}), ("no_overlap", {"overlap": False})):
        if name == "no_cuda_graph" and not device.startswith("cuda"):
            kwargs = {}   # --smoke on a CPU: graphs are off anyway; the pass still exercises the path
        eng = sgrun.Engine(sh.big, **{**common, "max_running": cb}, **kwargs)
        for b in (1, cb):
            res[f"decode_tok_s_b{b}_{name}"] = decode_rate(eng, b, sh, seed=200 + b)
        eng.close()
        del eng
        _free()
    _forget(sh.big, torch.bfloat16 if sh.big_dtype == "bfloat16" else torch.float32, device)
    res["cuda_graph_speedup_b1"] = res["decode_tok_s_b1"] / res["decode_tok_s_b1_no_cuda_graph"]
    res[f"overlap_speedup_b{cb}"] = res[f"decode_tok_s_b{cb}"] / res[f"decode_tok_s_b{cb}_no_overlap"]
    # Roofline at batch 64: every weight and every context's K/V read once per step.
    itemsize = 2 if sh.big_dtype == "bfloat16" else 4
    params = cfg.vocab_size * cfg.hidden_size * (1 if cfg.tie_embeddings else 2) + cfg.num_layers * (
        cfg.hidden_size * (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
        + cfg.num_heads * cfg.head_dim * cfg.hidden_size + 3 * cfg.hidden_size * cfg.intermediate_size)
    kv_per_token = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * itemsize
    res.update(decode_attention_bandwidth(sh, device))
    step_bytes = params * itemsize + cb * (sh.ctx + (sh.short + sh.long) // 2) * kv_per_token
    roof = cb * res["copy_bandwidth_GBps"] * 1e9 / step_bytes
    res[f"roofline_tok_s_b{cb}"] = roof
    res[f"decode_b{cb}_vs_roofline"] = res.get(f"decode_tok_s_b{cb}", 0.0) / roof
    return res


# --- tensor parallelism (only with 2+ GPUs) ------------------------------------------------------
def tensor_parallel(sh: Shapes, device: str) -> dict:
    """TP=2 on the 8B shape: decode rate and rank 0's communication per step (metadata broadcast
    + all-reduces, timed with CUDA syncs), beside TP=1's step time. Needs two CUDA devices."""
    gpus = torch.cuda.device_count() if device.startswith("cuda") else 0
    if gpus < 2:
        return {"ran": False, "why": f"{gpus} CUDA device(s); TP=2 needs 2"}
    eng = sgrun.Engine(sh.big, dtype=sh.big_dtype, device="cuda:0", tp=2, enable_prefix_cache=False,
                       max_running=16, mem_fraction=0.5)
    eng.model.shard.all_reduce.sync = True
    before = eng.stats()
    rate = decode_rate(eng, 16, sh, seed=300)
    after = eng.stats()
    eng.close()
    del eng
    _free()
    steps = after["tp_steps"] - before["tp_steps"]
    comm = (after["tp_broadcast_seconds"] - before["tp_broadcast_seconds"]
            + after["tp_all_reduce_seconds"] - before["tp_all_reduce_seconds"])
    return {"ran": True, "decode_tok_s_b16_tp2": rate, "comm_ms_per_step": 1e3 * comm / max(1, steps)}


# --- step 4 -------------------------------------------------------------------------------------
@torch.inference_mode()
def transformers_peer(sh: Shapes, device: str) -> dict:
    import transformers
    from sgrun.models.random_model import preset_config
    c = preset_config(sh.big)
    hf_cfg = transformers.LlamaConfig(vocab_size=c.vocab_size, hidden_size=c.hidden_size,
                                      intermediate_size=c.intermediate_size, num_hidden_layers=c.num_layers,
                                      num_attention_heads=c.num_heads, num_key_value_heads=c.num_kv_heads,
                                      head_dim=c.head_dim, max_position_embeddings=c.max_position,
                                      rope_theta=c.rope_theta, tie_word_embeddings=c.tie_embeddings)
    dtype = torch.bfloat16 if sh.big_dtype == "bfloat16" else torch.float32
    with torch.device(device):
        model = transformers.LlamaForCausalLM(hf_cfg).to(dtype).eval()
    res = {}
    for b in [x for x in sh.batches if x <= 64]:
        times = []
        for n in (sh.short, sh.long):   # differential, as decode_rate
            ids = torch.tensor(_prompts(b, sh.ctx, 300 + n, min(c.vocab_size - 1, 40000)), device=device)
            _sync(device)
            t0 = time.perf_counter()
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                           do_sample=False, pad_token_id=0)
            _sync(device)
            times.append(time.perf_counter() - t0)
        res[f"hf_decode_tok_s_b{b}"] = (b * (sh.long - sh.short) / (times[1] - times[0])
                                        if times[1] > times[0] else float("nan"))
    del model
    _free()
    return res


def table(res: dict) -> str:
    lines = [f"{'metric':<34} {'value':>14}", "-" * 49]
    for k, v in res.items():
        if isinstance(v, dict):
            for k2, v2 in v.items():
                lines.append(f"{k + '.' + k2:<34} {v2:>14.4g}" if isinstance(v2, float) else f"{k + '.' + k2:<34} {v2!s:>14}")
        else:
            lines.append(f"{k:<34} {v:>14.4g}" if isinstance(v, float) else f"{k:<34} {v!s:>14}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny shapes (runs on a CPU under TRITON_INTERPRET=1)")
    ap.add_argument("--only", choices=["kernels", "equality", "throughput", "tp", "peer"], action="append")
    ap.add_argument("--device", default=None, help="default: cuda when present, else cpu")
    args = ap.parse_args()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu" and not args.smoke:
        ap.error("no CUDA device: run the full check on a GPU machine, or --smoke on a CPU")
    sh = Shapes(args.smoke)
    steps = args.only or ["kernels", "equality", "throughput", "tp", "peer"]
    res: dict = {"device": torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu",
                 "torch": torch.__version__, "smoke": args.smoke, "load": " ".join(f"{x:.2f}" for x in os.getloadavg())}
    t_all = time.perf_counter()
    for step, fn in (("kernels", lambda: check_kernels(device)), ("equality", lambda: check_greedy_equality(sh, device)),
                     ("throughput", lambda: throughput(sh, device)), ("tp", lambda: tensor_parallel(sh, device)),
                     ("peer", lambda: transformers_peer(sh, device))):
        if step not in steps:
            continue
        t0 = time.perf_counter()
        res[step] = fn()
        res[step]["seconds"] = time.perf_counter() - t0
        print(f"[gpu_check] {step} done in {res[step]['seconds']:.1f} s", flush=True)
    res["total_seconds"] = time.perf_counter() - t_all
    print(table(res))
    if os.environ.get("OUT"):
        out = Path(os.environ["OUT"]) / "gpu_check.json"
        out.write_text(json.dumps(res, indent=2))
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
