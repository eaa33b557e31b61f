"""`sgrun generate | serve | bench ...`"""

from __future__ import annotations

import argparse
import sys


def add_engine_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="a local .gguf file or model folder (default: SmolLM2-135M-Instruct)")
    p.add_argument("--dtype", default="auto",
                   help="auto (what measured fastest at this CPU's level: sgrun/models/auto_config.py), float32, bfloat16")
    p.add_argument("--num-threads", type=int, default=None, help="torch compute threads (default: all cores)")
    p.add_argument("--tp", type=int, default=1, help="tensor parallelism: shard the model over N processes")
    p.add_argument("--quantization", default="auto", choices=["auto", "none", "int8", "int4"],
                   help="weights in memory: auto follows the file (Q4 GGUF -> int4, Q8 -> int8, f16/f32 -> none); "
                        "int8/int4 also quantize dense models at load")
    from sgrun.cli_flags import add_device_arguments, add_speculative_arguments
    add_device_arguments(p)
    add_speculative_arguments(p)


def cmd_generate(args: argparse.Namespace) -> int:
    import sgrun

    from sgrun.cli_flags import device_kwargs, speculative_kwargs
    from sgrun.engine.startup_report import startup_line
    # Without --compile/--no-compile the forward is compiled only where it pays for max_tokens.
    with sgrun.Engine(args.model, dtype=args.dtype, num_threads=args.num_threads, quantization=args.quantization,
                      tp=args.tp, one_shot_tokens=args.max_tokens, **device_kwargs(args),
                      **speculative_kwargs(args)) as engine:
        print(f"sgrun: {startup_line(engine.startup_report())}", file=sys.stderr, flush=True)
        prompt = args.prompt
        if args.chat:
            messages = ([{"role": "system", "content": args.system}] if args.system else [])
            prompt = engine.tokenizer.apply_chat_template(messages + [{"role": "user", "content": prompt}])
        params = sgrun.SamplingParams(max_new_tokens=args.max_tokens, seed=args.seed, **generate_sampling(args, engine))
        for delta in engine.stream(prompt, params):
            sys.stdout.write(delta)
            sys.stdout.flush()
        sys.stdout.write("\n")
    return 0


def generate_sampling(args: argparse.Namespace, engine) -> dict:
    """The model's recommended sampling (sgrun/models/generation_defaults.py), overridden by any
    flag given; --temperature 0 is greedy whatever the rest says."""
    from sgrun.models.generation_defaults import recommended_sampling
    params = recommended_sampling(engine.model_path).as_params()
    for name in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty"):
        if getattr(args, name) is not None:
            params[name] = getattr(args, name)
    return params


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sgrun", description="structured-generation LLM serving runtime")
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="generate text for one prompt, streaming to stdout")
    g.add_argument("prompt")
    g.add_argument("--chat", action=argparse.BooleanOptionalAction, default=True,
                   help="wrap the prompt in the model's chat template (default: on)")
    g.add_argument("--system", default=None, help="system message (with --chat)")
    g.add_argument("--max-tokens", type=int, default=256)
    g.add_argument("--temperature", type=float, default=None,
                   help="0 = greedy; default: the model's recommended sampling (its generation config, "
                        "its model card, else temperature 0.7, top_p 0.9, repetition penalty 1.05)")
    g.add_argument("--top-p", type=float, default=None)
    g.add_argument("--top-k", type=int, default=None)
    g.add_argument("--min-p", type=float, default=None)
    g.add_argument("--repetition-penalty", type=float, default=None)
    g.add_argument("--seed", type=int, default=None)
    add_engine_options(g)
    g.set_defaults(func=cmd_generate)
    from sgrun.bench import add_bench_parser
    from sgrun.server.cli_commands import add_serve_parser
    add_serve_parser(sub)
    add_bench_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
    except KeyboardInterrupt:
        code = 130
    except Exception as exc:  # noqa: BLE001 - users see a one-line error, not a traceback
        from sgrun.errors import SgrunError
        if not isinstance(exc, SgrunError):
            raise
        print(f"sgrun: error: {exc}", file=sys.stderr)
        code = 2
    sys.exit(code)


if __name__ == "__main__":
    main()
