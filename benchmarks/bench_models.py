"""The model family against llama.cpp on the same GGUF files, per CPU level.

    python benchmarks/bench_models.py --llama-quantize PATH --llama-bench native=PATH [--llama-bench avx2=PATH]
        [--models qwen3-1.7b,gemma3-1b,qwen3moe-16x2,phi4-mini] [--quants Q4_K_M,Q4_0] [--levels native,avx2]
        [--threads 2] [--rounds 3] [--work DIR] [--convert PATH] [--smoke] [--json FILE]

For each model shape: transformers builds the model from a config alone with random weights (nothing
is downloaded), saves it as a safetensors folder with the default model's tokenizer grown to the config's
vocabulary (save_full_vocab_tokenizer), llama.cpp's own `convert_hf_to_gguf.py`
writes it as an F16 GGUF, and llama.cpp's `llama-quantize` makes the Q4_K_M and Q4_0 files. Then,
for every level (each in its own process, forced as bench_targets.py forces it: sgrun's kernels,
ATen and oneDNN held to it) and every file, in interleaved rounds:

- decode tg128: sgrun's single-stream greedy decode of 128 tokens against `llama-bench -n 128`;
- decode after 3,000 tokens: the same after a 3,000-token context against `llama-bench -d 3000 -n 128`;
- TTFT of a 2,048-token prompt against `llama-bench -p 2048` (its time: 2,048 / its tok/s).

The level's llama-bench is the one `--llama-bench LEVEL=PATH` names (an AVX2-only build for avx2:
GGML_NATIVE=OFF, GGML_AVX2=ON). Targets (issue 52): decode >= 1.0x llama.cpp and TTFT <= 1.0x,
on every architecture and both levels. The CPU model and flags, the level and the load average are
printed with the table; the machine may be shared, so compare the ratios of one run.

`--smoke`: tiny shapes of the same architectures, short tests (tg16, a 64-token depth, a 128-token
prompt) and one round: the whole pipeline end to end in a few minutes, for checking the script,
not for numbers.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from bench_options import add_json_output, add_rounds, add_threads, load_avg, machine_line, report_result, \
    run_level_child, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# Realistic shapes (the models' config.json files; the MoE is Qwen3-30B-A3B's layer with 16 experts, top-2).
SHAPES: dict[str, dict] = {
    "qwen3-1.7b": dict(arch="qwen3", vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128, rope_theta=1000000.0,
                       tie_word_embeddings=True, max_position_embeddings=40960),
    "gemma3-1b": dict(arch="gemma3", vocab_size=262144, hidden_size=1152, intermediate_size=6912, num_hidden_layers=26,
                      num_attention_heads=4, num_key_value_heads=1, head_dim=256, sliding_window=512,
                      query_pre_attn_scalar=256, tie_word_embeddings=True, max_position_embeddings=32768),
    "qwen3moe-16x2": dict(arch="qwen3moe", vocab_size=151936, hidden_size=2048, intermediate_size=6144,
                          moe_intermediate_size=768, num_experts=16, num_experts_per_tok=2, norm_topk_prob=True,
                          num_hidden_layers=24, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                          rope_theta=1000000.0, tie_word_embeddings=False, max_position_embeddings=40960),
    "phi4-mini": dict(arch="phi3", vocab_size=200064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                      num_attention_heads=24, num_key_value_heads=8, partial_rotary_factor=0.75,
                      tie_word_embeddings=True, max_position_embeddings=131072, original_max_position_embeddings=4096),
}
# --smoke: the same architectures at toy size (one int4 group per row at least, multiples of 32).
SMOKE = dict(vocab_size=49152, hidden_size=128, intermediate_size=256, moe_intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=32, sliding_window=32, query_pre_attn_scalar=32,
             max_position_embeddings=4096, original_max_position_embeddings=1024)
SMOKE_LAYERS = {"gemma3": 6}   # one global layer after five sliding ones, as the real pattern


def hf_config(name: str, smoke: bool):
    """The transformers config of shape `name` (`smoke`: at toy size)."""
    import transformers
    shape = dict(SHAPES[name])
    arch = shape.pop("arch")
    if smoke:
        shape.update({k: v for k, v in SMOKE.items() if k in shape})
        shape["num_hidden_layers"] = SMOKE_LAYERS.get(arch, SMOKE["num_hidden_layers"])
        if arch == "phi3":
            shape["hidden_size"], shape["num_attention_heads"] = 128, 4
    common = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if arch == "qwen3":
        return transformers.Qwen3Config(**shape, **common)
    if arch == "qwen3moe":
        return transformers.Qwen3MoeConfig(**shape, **common)
    if arch == "gemma3":
        local, glob = 10000.0, 1000000.0
        return transformers.Gemma3TextConfig(**shape, **common, rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": local},
            "full_attention": {"rope_type": "default", "rope_theta": glob}})
    if arch == "phi3":
        head_dim = shape["hidden_size"] // shape["num_attention_heads"]
        rot = int(head_dim * shape.pop("partial_rotary_factor")) // 2
        orig = shape["original_max_position_embeddings"]
        rope = {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 2 * rot / head_dim,
                "short_factor": [1.0 + 0.05 * i for i in range(rot)], "long_factor": [1.5 + 0.5 * i for i in range(rot)],
                "original_max_position_embeddings": orig}
        return transformers.Phi3Config(**shape, **common, rope_parameters=rope)
    raise KeyError(arch)


def run(cmd: list[str], what: str) -> None:
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{what} failed ({' '.join(cmd[:3])} ...):\n{out.stderr[-3000:]}")


def save_full_vocab_tokenizer(path: Path, vocab_size: int) -> None:
    """The default model's tokenizer grown to the config's whole vocabulary: its pre-tokenizer is
    one llama.cpp's converter knows (the converter names pre-tokenizers by a hash of how they
    encode a test text, so a tokenizer of another vocabulary is refused), and the extra entries,
    reachable by no merge, leave that encoding as it was. The converter sizes Gemma 3's embedding
    by the tokenizer (vocabulary plus added tokens), not the config: with SmolLM2's 49,152 tokens
    it cut the 262,144-row table to 49,169 rows, and llama.cpp then refused the file."""
    from sgrun.models.fetch import default_model_path
    from sgrun.models.loader import load_tokenizer
    data = json.loads(load_tokenizer(default_model_path()).hf.to_str())
    vocab, added = data["model"]["vocab"], data.get("added_tokens", [])
    # The converter counts added tokens beside the vocabulary (they are in it too): stop short by them.
    for i in range(len(vocab), vocab_size - len(added)):
        vocab[f"<|unused_{i}|>"] = i
    path.write_text(json.dumps(data, ensure_ascii=False))


def build_files(name: str, args) -> dict[str, Path]:
    """{quant: GGUF path} for shape `name`: built, converted and quantized once (kept under --work)."""
    import torch
    import transformers

    work = Path(args.work) / (name + ("-smoke" if args.smoke else ""))
    files = {q: work / f"{name}-{q}.gguf" for q in args.quants.split(",")}
    if all(p.exists() for p in files.values()):
        return files
    work.mkdir(parents=True, exist_ok=True)
    f16 = work / f"{name}-F16.gguf"
    if not f16.exists():
        folder = work / "hf"
        cfg = hf_config(name, args.smoke)
        print(f"  building {name} with transformers (random weights) ...  (load {load_avg()})", flush=True)
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        model.save_pretrained(folder)
        del model
        save_full_vocab_tokenizer(folder / "tokenizer.json", cfg.vocab_size)
        (folder / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "GPT2Tokenizer" if cfg.model_type == "phi3" else "PreTrainedTokenizerFast",
            "bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}))
        print(f"  converting with {args.convert} ...  (load {load_avg()})", flush=True)
        run([sys.executable, args.convert, str(folder), "--outtype", "f16", "--outfile", str(f16)], "convert_hf_to_gguf.py")
    for q, path in files.items():
        if not path.exists():
            print(f"  llama-quantize {q} ...  (load {load_avg()})", flush=True)
            run([args.llama_quantize, str(f16), str(path), q, str(args.threads)], "llama-quantize")
    return files


def tests(args) -> dict[str, int]:
    if args.smoke:
        return {"gen": 16, "depth": 64, "prompt": 128}
    return {"gen": 128, "depth": 3000, "prompt": 2048}


def measure_file(gguf: Path, args) -> dict:
    """sgrun and llama-bench on one file at this process's level, in interleaved rounds."""
    import sgrun
    from bench_engine import sg_decode
    from peer_llama_cpp import bench as llama_bench, best_setting
    t = tests(args)
    rng = random.Random(0)

    def ids(n):
        return [rng.randrange(300, 40000) for _ in range(n)]

    engine = sgrun.Engine(str(gguf), num_threads=args.threads, memory_gb=args.memory_gb)
    fused = engine.parts.fused is not None
    r: dict = {"sgrun_fused_decode": fused}
    prompt, context = ids(32), ids(t["depth"])
    sg_decode(engine, prompt, 8)   # warm

    def sg_ttft(p):
        engine.flush_cache()
        return engine.generate([p], sgrun.SamplingParams(max_new_tokens=1, temperature=0))[0].ttft

    rounds: dict[str, list[float]] = {k: [] for k in ("sg_tg", "ll_tg", "sg_depth", "ll_depth", "sg_ttft", "ll_pp")}
    settings: dict[str, dict] = {}

    def llama(key, **kw):
        try:
            got = llama_bench(gguf, args.threads, reps=1, **kw, **settings.get(key, {}))
        except RuntimeError as exc:   # every build crashed on this test (peer_llama_cpp.py: AMX builds and -d)
            print(f"  llama-bench {key} on {gguf.name}: {exc}", flush=True)
            r.setdefault("llama_failed", []).append(key)
            return None
        if got is not None and key not in settings:
            settings[key] = best_setting()   # the fastest wait policy and build, pinned for the later rounds
        return got

    for _ in range(args.rounds):
        rounds["sg_tg"].append(sg_decode(engine, prompt, t["gen"]))
        rounds["ll_tg"].append(llama("tg", gen=t["gen"]))
        engine.flush_cache()
        rounds["sg_depth"].append(sg_decode(engine, context, t["gen"]))
        rounds["ll_depth"].append(llama("depth", gen=t["gen"], depth=t["depth"]))
        rounds["sg_ttft"].append(sg_ttft(ids(t["prompt"])))
        pp = llama("pp", prompt=t["prompt"])
        rounds["ll_pp"].append(t["prompt"] / pp if pp else None)
    engine.close()
    for k, v in rounds.items():
        v = [x for x in v if x is not None]
        r[k] = statistics.median(v) if v else None
    r["rounds"] = rounds
    return r


def measure_level(args) -> dict:
    """Every model and quantization at this process's level."""
    import torch
    torch.set_num_threads(args.threads)
    print(machine_line(args.threads), flush=True)
    out = {}
    for name in args.models.split(","):
        for q, path in build_files(name, args).items():
            key = f"{name} {q}"
            try:
                got = measure_file(path, args)
            except Exception as exc:   # one file's failure leaves the others' figures
                print(f"  {key}: FAILED: {type(exc).__name__}: {exc}", flush=True)
                got = {"error": f"{type(exc).__name__}: {exc}"}
            else:
                print(f"  {key}: " + ", ".join(f"{k} {v:.3f}" for k, v in got.items() if isinstance(v, float))
                      + f"; sgrun's C++ decode blocks: {'yes' if got['sgrun_fused_decode'] else 'NO'}"
                      + f"  (load {load_avg()})", flush=True)
            out[key] = got
            report_result({key: got})   # now: the parent keeps it if a later file kills this process
    return out


def ratio(a, b) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def print_table(results: dict[str, dict], args) -> None:
    t = tests(args)
    print(f"\n| model | quant | level | sgrun tg{t['gen']} tok/s | llama.cpp tg{t['gen']} | ratio | sgrun @ d{t['depth']} | "
          f"llama.cpp @ d{t['depth']} | ratio | sgrun TTFT {t['prompt']} s | llama.cpp pp{t['prompt']} s | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for level, per in results.items():
        for key, r in per.items():
            name, q = key.rsplit(" ", 1)
            f = lambda v, d=1: f"{v:.{d}f}" if v else "-"   # noqa: E731
            if "error" in r:
                print(f"| {name} | {q} | {level} | failed: {r['error'][:80]} |" + " |" * 8)
                continue
            print(f"| {name} | {q} | {level} | {f(r.get('sg_tg'))} | {f(r.get('ll_tg'))} | {ratio(r.get('sg_tg'), r.get('ll_tg'))} | "
                  f"{f(r.get('sg_depth'))} | {f(r.get('ll_depth'))} | {ratio(r.get('sg_depth'), r.get('ll_depth'))} | "
                  f"{f(r.get('sg_ttft'), 3)} | {f(r.get('ll_pp'), 3)} | {ratio(r.get('sg_ttft'), r.get('ll_pp'))} |")
    print(f"(decode ratios: sgrun / llama.cpp, target >= 1.0; TTFT: sgrun / llama.cpp, target <= 1.0; load {load_avg()})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_threads(ap)
    add_rounds(ap)
    ap.add_argument("--models", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    ap.add_argument("--quants", default="Q4_K_M,Q4_0", help="llama-quantize types")
    ap.add_argument("--levels", default="native,avx2", help="comma-separated CPU levels, each in its own process")
    ap.add_argument("--llama-bench", action="append", default=[], metavar="LEVEL=PATH",
                    help="the llama-bench to run at LEVEL (repeatable; an AVX2-only build for avx2)")
    ap.add_argument("--llama-quantize", required=True, metavar="PATH", help="llama.cpp's llama-quantize")
    ap.add_argument("--convert", default=None, metavar="PATH",
                    help="llama.cpp's convert_hf_to_gguf.py (default: beside --llama-quantize's source tree)")
    ap.add_argument("--work", default=str(Path.home() / ".cache" / "sgrun" / "bench_models"),
                    help="where the built models and GGUF files are kept (reused when present)")
    ap.add_argument("--memory-gb", type=float, default=4.0, help="sgrun's KV pool")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes and short tests: checks the pipeline")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    add_json_output(ap)
    args = ap.parse_args()
    if args.smoke:
        args.rounds = 1
    if args.convert is None:   # build-*/bin/llama-quantize -> the source tree's converter
        args.convert = str(Path(args.llama_quantize).resolve().parents[2] / "convert_hf_to_gguf.py")
    if args.child is not None:
        measure_level(args)   # reports each file as it finishes
        return
    # Files first, in this process (one build serves every level).
    for name in args.models.split(","):
        build_files(name, args)
    results, failed = {}, []
    expected = [f"{name} {q}" for name in args.models.split(",") for q in args.quants.split(",")]
    for level in args.levels.split(","):
        cmd = [sys.executable, __file__, "--child", level, "--threads", str(args.threads), "--rounds", str(args.rounds),
               "--models", args.models, "--quants", args.quants, "--llama-quantize", args.llama_quantize,
               "--convert", args.convert, "--work", args.work, "--memory-gb", str(args.memory_gb)]
        if args.smoke:
            cmd.append("--smoke")
        got, why = run_level_child(level, cmd, args.llama_bench)
        if why:   # the files it had not finished, by name (the first of them was running when it died)
            missing = [key for key in expected if key not in got]
            for i, key in enumerate(missing):
                got[key] = {"error": f"level process {why} " + ("while measuring it" if i == 0 else "before it")}
            failed += [f"{level} {key}" for key in missing] or [level]
        results[level] = got
    print_table(results, args)
    write_json(args.json_out, results)
    if failed:
        sys.exit(f"not measured: {', '.join(failed)} (the table says why)")


if __name__ == "__main__":
    main()
