"""Bit-for-bit A/B of two builds: greedy tokens and top-5 logprobs of a few prompts, saved, then compared.

    python benchmarks/bits_ab.py save FILE [--dtypes float32,bfloat16]   # run once per build
    python benchmarks/bits_ab.py compare OLD NEW

The prompts: 2,048, 300 and 37 random tokens (a long prefill, a short one, one under a key block)
and a chat prompt, 8 greedy tokens each with their top-5 logprobs, through `sgrun.Engine()` in
each dtype (the level is SGRUN_CPU_ISA's, as everywhere). A change meant to keep every bit (a
loop vectorized, a kernel restructured) must compare "same" on every line; any difference is
printed with its largest logprob gap.
"""

from __future__ import annotations

import argparse
import random

import torch

import sgrun


def save(path: str, dtypes: list[str]) -> None:
    out = {}
    for dtype in dtypes:
        with sgrun.Engine(num_threads=2, memory_gb=1.0, dtype=dtype) as engine:
            rng = random.Random(1)
            prompts = [[rng.randrange(100, 40000) for _ in range(n)] for n in (2048, 300, 37)]
            tok = engine.tokenizer
            prompts.append(tok.encode(tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}])))
            params = sgrun.SamplingParams(max_new_tokens=8, temperature=0, logprobs=5)
            out[dtype] = [(o.token_ids, [(lp.logprob, [t[2] for t in lp.top]) for lp in o.outputs[0].logprobs])
                          for o in engine.generate(prompts, params)]
    torch.save(out, path)
    print("saved", path)


def compare(old_path: str, new_path: str) -> bool:
    old, new = torch.load(old_path), torch.load(new_path)
    same = True
    for dtype in old:
        for i, (a, b) in enumerate(zip(old[dtype], new[dtype])):
            gap = max(abs(p - q) for (p, _), (q, _) in zip(a[1], b[1]))
            ok = a == b
            same &= ok
            print(f"{dtype} prompt {i}: " + ("same" if ok else f"DIFFERENT (tokens {'same' if a[0] == b[0] else 'differ'}, "
                                                               f"largest logprob gap {gap:.3g})"))
    return same


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save")
    s.add_argument("file")
    s.add_argument("--dtypes", default="float32,bfloat16")
    c = sub.add_parser("compare")
    c.add_argument("old")
    c.add_argument("new")
    args = ap.parse_args()
    if args.cmd == "save":
        save(args.file, args.dtypes.split(","))
    else:
        raise SystemExit(0 if compare(args.old, args.new) else 1)


if __name__ == "__main__":
    main()
