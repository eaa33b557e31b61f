"""N-gram speculative decoding on an agent workload that copies from its context.

    python benchmarks/bench_speculative.py [--threads 2] [--rounds 3] [--max-tokens 160]
                                           [--num-draft 6] [--ngram-max 3] [--ngram-min 2]
                                           [--temperature 0] [--quantization auto]

Single stream (one request at a time), one engine, speculation turned on and off per request
(`SamplingParams.speculative_ngram`), the two alternating prompt by prompt so the machine's
other tenants load both alike. The prompts are what agents send back after a tool call: a tool
result (JSON, a log, code) in the context and an answer that quotes it (repeat it, reformat
it, extract fields under a JSON schema, edit the code). Reported: completion tokens / wall
seconds for each side, the ratio, the acceptance rate of the drafts (accepted / drafted), the
mean tokens per verify step, and the load average before and after. Greedy by default (outputs
must then be identical on both sides, which is checked). Constrained turns (a JSON schema, tool
calls held to their schemas in the model's call format) are also summed on their own line: the
drafts there are cut at the first token the constraint forbids before they are verified.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import sgrun  # noqa: E402
from bench_options import add_dtype, add_quantization, add_rounds, add_threads, load_avg, machine_line  # noqa: E402

ORDER = {"order_id": "A-1042", "customer": {"name": "Alice Smith", "email": "alice.smith@example.com"},
         "status": "shipped", "carrier": "DHL", "tracking": "JD014600006281234567",
         "items": [{"sku": "KB-7", "name": "Mechanical keyboard", "qty": 2, "price": 89.5},
                   {"sku": "MS-3", "name": "Wireless mouse", "qty": 1, "price": 24.99}],
         "shipping_address": {"street": "12 Rue de Rivoli", "city": "Paris", "zip": "75001", "country": "FR"}}
WEATHER = {"city": "Berlin", "forecast": [{"day": "Monday", "high_c": 21, "low_c": 12, "sky": "sunny"},
                                          {"day": "Tuesday", "high_c": 18, "low_c": 11, "sky": "cloudy"},
                                          {"day": "Wednesday", "high_c": 16, "low_c": 9, "sky": "rain"}]}
LOG = ("2026-11-30 10:02:11 ERROR payment-service: timeout calling bank gateway (order A-1042, attempt 3)\n"
       "2026-11-30 10:02:12 WARN  payment-service: retry budget exhausted for order A-1042\n"
       "2026-11-30 10:02:12 INFO  order-service: order A-1042 moved to status payment_failed\n")
CODE = ("def total_price(items):\n    total = 0\n    for item in items:\n"
        "        total += item[\"price\"] * item[\"qty\"]\n    return total\n")
EXTRACT_SCHEMA = {"type": "object", "properties": {
    "order_id": {"type": "string"}, "customer_name": {"type": "string"}, "email": {"type": "string"},
    "tracking": {"type": "string"}, "city": {"type": "string"}}, "required": ["order_id", "customer_name",
                                                                             "email", "tracking", "city"],
    "additionalProperties": False}


TOOLS = [{"type": "function", "function": {
    "name": "update_order", "description": "Update an order's shipping record",
    "parameters": {"type": "object", "properties": {
        "order_id": {"type": "string"}, "email": {"type": "string"}, "tracking": {"type": "string"},
        "carrier": {"type": "string", "enum": ["DHL", "UPS", "FedEx"]}},
        "required": ["order_id", "email", "tracking", "carrier"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "notify_customer", "description": "Email a customer",
        "parameters": {"type": "object", "properties": {"email": {"type": "string"}, "message": {"type": "string"}},
                       "required": ["email", "message"], "additionalProperties": False}}}]
CALLS = {"tool_calls": {"format": "hermes", "tools": TOOLS, "mode": "required", "parallel": False}}


def cpu_line() -> str:
    """The CPU model and the vector ISA flags that pick the kernels (from /proc/cpuinfo)."""
    import platform
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model") and model in ("", platform.machine(), platform.processor()):
                    model = value.strip()
                elif key.strip() in ("flags", "Features"):
                    flags = set(value.split())
    except OSError:
        pass
    isa = [f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "asimd", "asimddp")
           if f in flags]
    return f"cpu {model}  cores {os.cpu_count()}  flags {' '.join(isa) or 'none of the vector ISAs'}"


def agent_turns() -> list[tuple[str, list[dict], dict]]:
    """(name, chat messages, extra SamplingParams) of the workload."""
    def turn(tool: str, result: str, ask: str) -> list[dict]:
        return [{"role": "system", "content": "You are an operations agent. Tool results are given verbatim."},
                {"role": "user", "content": f"Call {tool}."},
                {"role": "assistant", "content": f"Calling {tool}."},
                {"role": "user", "content": f"Tool result of {tool}:\n{result}\n\n{ask}"}]
    order, weather = json.dumps(ORDER), json.dumps(WEATHER)
    return [
        ("repeat-json", turn("get_order", order, "Repeat the tool result exactly, as JSON."), {}),
        ("extract-json", turn("get_order", order, "Give the order id, customer name, email, tracking number "
                                                  "and city as JSON."), {"json_schema": EXTRACT_SCHEMA}),
        ("weather-list", turn("get_forecast", weather, "Repeat the forecast JSON, then list each day."), {}),
        ("quote-log", turn("read_logs", LOG, "Quote the three log lines exactly, then say what failed."), {}),
        ("edit-code", turn("read_file", CODE, "Rewrite this function exactly, adding a docstring."), {}),
        ("call-update", turn("get_order", order, "Now call update_order with this order's id, the customer's "
                                                 "email, its tracking number and carrier. Tools: "
                             + json.dumps(TOOLS[:1])), CALLS),
        ("call-notify", turn("get_order", order, "Now call notify_customer: email the customer that order "
                                                 "A-1042 shipped with DHL, tracking JD014600006281234567. Tools: "
                             + json.dumps(TOOLS[1:])), CALLS),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_threads(ap)
    add_rounds(ap)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--num-draft", type=int, default=6)
    ap.add_argument("--ngram-max", type=int, default=3)
    ap.add_argument("--ngram-min", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=0.0)
    add_quantization(ap, "auto")
    add_dtype(ap, "auto")
    args = ap.parse_args()
    print(machine_line(args.threads), flush=True)
    engine = sgrun.Engine(dtype=args.dtype, num_threads=args.threads, quantization=args.quantization,
                          speculative_num_draft=args.num_draft, speculative_ngram_max=args.ngram_max,
                          speculative_ngram_min=args.ngram_min)
    print(cpu_line())
    print(f"model {engine.model_name}  quantization {engine.quantization}  dtype {engine.dtype}  threads "
          f"{args.threads}  k={args.num_draft} n={args.ngram_min}..{args.ngram_max}  T={args.temperature}")
    turns = [(name, engine.tokenizer.apply_chat_template(msgs, add_generation_prompt=True), extra)
             for name, msgs, extra in agent_turns()]
    # Warm-up: constraint compile, caches, first-call allocations (not measured).
    for _, prompt, extra in turns:
        for spec in (False, True):
            engine.generate(prompt, sgrun.SamplingParams(max_new_tokens=args.max_tokens, temperature=0, speculative_ngram=spec,
                                                         **extra))
    load_before = load_avg()
    totals = {False: [0, 0.0], True: [0, 0.0]}
    per_turn: dict[str, dict[bool, list[float]]] = {}
    spec_drafted = spec_accepted = spec_steps = 0
    mismatches = []
    for rnd in range(args.rounds):
        for name, prompt, extra in turns:
            outs = {}
            order = (False, True) if rnd % 2 == 0 else (True, False)
            for spec in order:
                params = sgrun.SamplingParams(max_new_tokens=args.max_tokens, temperature=args.temperature,
                                              seed=rnd, speculative_ngram=spec, **extra)
                before = engine.stats()
                t0 = time.perf_counter()
                out = engine.generate(prompt, params)[0].outputs[0]
                dt = time.perf_counter() - t0
                after = engine.stats()
                outs[spec] = out.token_ids
                totals[spec][0] += len(out.token_ids)
                totals[spec][1] += dt
                per_turn.setdefault(name, {False: [0, 0.0], True: [0, 0.0]})
                per_turn[name][spec][0] += len(out.token_ids)
                per_turn[name][spec][1] += dt
                if spec:
                    spec_drafted += after["spec_draft_tokens"] - before["spec_draft_tokens"]
                    spec_accepted += after["spec_accepted_tokens"] - before["spec_accepted_tokens"]
                    spec_steps += after["spec_verify_steps"] - before["spec_verify_steps"]
            if args.temperature == 0 and outs[False] != outs[True]:
                mismatches.append(name)
    load_after = load_avg()
    for name, arms in per_turn.items():
        off, on = (arms[s][0] / arms[s][1] for s in (False, True))
        print(f"  {name:13s} off {off:6.1f} tok/s  on {on:6.1f} tok/s  x{on / off:.2f}  "
              f"({arms[True][0] // args.rounds} tokens)")
    constrained = [name for name, _, extra in turns if extra]
    c_off, c_on = (sum(per_turn[n][s][0] for n in constrained) / sum(per_turn[n][s][1] for n in constrained)
                   for s in (False, True))
    print(f"constrained turns ({', '.join(constrained)}): off {c_off:.1f} tok/s, on {c_on:.1f} tok/s, "
          f"speed-up x{c_on / c_off:.2f}")
    off = totals[False][0] / totals[False][1]
    on = totals[True][0] / totals[True][1]
    rate = spec_accepted / spec_drafted if spec_drafted else 0.0
    print(f"single-stream decode: off {off:.1f} tok/s, on {on:.1f} tok/s, speed-up x{on / off:.2f}")
    print(f"acceptance: {spec_accepted}/{spec_drafted} draft tokens = {rate:.1%}; "
          f"{spec_accepted / max(spec_steps, 1):.2f} accepted per verify step ({spec_steps} steps)")
    print(f"load before {load_before}  after {load_after}")
    if args.temperature == 0:
        print("greedy outputs identical on and off" if not mismatches else f"MISMATCH in {mismatches}")
    engine.close()


if __name__ == "__main__":
    main()
