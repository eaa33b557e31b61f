"""Grammar constraints: the LALR fast path vs the Earley path, beside llguidance, in one run.

For each grammar: compile time (a fresh compile, no cache, mask warm-up included; median of
RUNS), and the per-token mask time along a fixed valid text: cold (a freshly compiled
constraint: each state's mask computed for the first time) and warm (the same text again:
masks cached per state). llguidance: LLMatcher construction, then compute_bitmask per token
(its own caches are per matcher, so each run is cold; the second pass reuses the matcher's
slicer caches through a fresh matcher on the same grammar). "json via Earley" runs the very
json.lark the LALR path runs, forced onto the Earley path: the same language, both paths.

Run: python benchmarks/bench_grammar.py   (prints a markdown table; record `uptime` beside it)
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("SGRUN_CACHE", os.path.join(tempfile.gettempdir(), "sgcache"))
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_constrain import llg_tokenizer, pct  # noqa: E402
from bench_options import machine_line  # noqa: E402

RUNS = 3
AMBIGUOUS_EXPR = ('start: expr\nexpr: expr "+" expr | expr "*" expr | "(" expr ")" | NUMBER\n'
                  'NUMBER: /[0-9]+/\n%ignore " "\n')
# json.lark with a reduce/reduce conflict (a string value is a `name` or a `text`): Earley only
JSON_AMBIGUOUS = (ROOT / "sgrun/grammars/json.lark").read_text().replace(
    "      | STRING\n", "      | name\n      | text\n", 1) + "name: STRING\ntext: STRING\n"
DEEP_JSON = '{"a": ' * 20 + "[" * 20 + "1, 2" + "]" * 20 + "}" * 20
JSON_TEXT = '{"name": "Ada Lovelace", "tags": [1, 2.5, {"x": null}], "ok": true, "n": -3e2}'


def cases() -> list[tuple[str, str, str, str]]:
    """(name, kind, grammar text, valid sample text)"""
    gb = ROOT / "tests/data/gbnf"
    out = [
        ("json.lark (LALR)", "lark", (ROOT / "sgrun/grammars/json.lark").read_text(), JSON_TEXT),
        ("json.lark via Earley", "lark-earley", (ROOT / "sgrun/grammars/json.lark").read_text(), JSON_TEXT),
        ("json.lark, 40 deep (LALR)", "lark", (ROOT / "sgrun/grammars/json.lark").read_text(), DEEP_JSON),
        ("json.lark, 40 deep, via Earley", "lark-earley", (ROOT / "sgrun/grammars/json.lark").read_text(), DEEP_JSON),
        ("arithmetic.lark (LALR)", "lark", (ROOT / "sgrun/grammars/arithmetic.lark").read_text(),
         "12 + 3.5*(4 - 5) / 6 - -7"),
        ("ambiguous expr (Earley)", "lark", AMBIGUOUS_EXPR, "12 + 3*(4 + 5) * 6 + 7 * (8 + 9)"),
    ]
    out += [
        ("json, reduce/reduce (Earley)", "lark", JSON_AMBIGUOUS, JSON_TEXT),
        ("json.gbnf (Earley, every split)", "gbnf", (gb / "json.gbnf").read_text(),
         '{"name": "Ada Lovelace", "tags": [1, 2.5, {"x": null}], "ok": true}'),
        ("c.gbnf (Earley, every split)", "gbnf", (gb / "c.gbnf").read_text(),
         "int main(){int x = 1;while(x<10){x = x+1;}return x;}"),
        ("arithmetic.gbnf (Earley, every split)", "gbnf", (gb / "arithmetic.gbnf").read_text(),
         "a1 +2*(b -3) = (b+2)\n"),
    ]
    return out


def sgrun_constraint(tok, kind: str, text: str):
    from sgrun.constrain import compile_constraint
    if kind != "lark-earley":
        return compile_constraint(tok, grammar=text, use_cache=False)
    from sgrun.constrain.compile_budget import compile_budget
    from sgrun.constrain.earley_automaton import EarleyAutomaton, EarleyGrammar
    from sgrun.constrain.grammar import GrammarConstraint
    from sgrun.constrain.token_table import token_table
    table = token_table(tok)
    with compile_budget(5.0, "grammar"):
        c = GrammarConstraint(EarleyAutomaton(EarleyGrammar(text)), text, table)
        c.attach_tokenizer(tok)
        c.warm_up()
    return c


def bench_sgrun(tok, kind: str, text: str, sample: str) -> dict:
    ids = tok.encode(sample)
    compiles, colds, warms = [], [], []
    for _ in range(RUNS):
        t = time.perf_counter()
        c = sgrun_constraint(tok, kind, text)
        compiles.append(time.perf_counter() - t)
        for times in (colds, warms):
            m = c.matcher()
            run = []
            for t_id in ids:
                t0 = time.perf_counter()
                c.allowed_tokens(m.state)
                run.append(time.perf_counter() - t0)
                if not m.advance(t_id):
                    raise SystemExit(f"sgrun rejected the sample text at token {t_id}: {sample!r}")
            times.append(run)
    return {"path": c.path, "compile_ms": statistics.median(compiles) * 1e3,
            "cold_mean_us": statistics.median(statistics.mean(r) for r in colds) * 1e6,
            "cold_p99_us": statistics.median(pct(r, 99) for r in colds) * 1e6,
            "warm_mean_us": statistics.median(statistics.mean(r) for r in warms) * 1e6}


def bench_llguidance(tok, lt, kind: str, text: str, sample: str) -> dict:
    import llguidance
    ids = tok.encode(sample)
    compiles, runs = [], []
    for _ in range(RUNS):
        t = time.perf_counter()
        g = llguidance.grammar_from("gbnf" if kind == "gbnf" else "lark", text)
        m = llguidance.LLMatcher(lt, g, log_level=0)
        compiles.append(time.perf_counter() - t)
        if m.is_error():
            return {"error": m.get_error()[:80]}
        run = []
        for t_id in ids:
            t0 = time.perf_counter()
            m.compute_bitmask()
            run.append(time.perf_counter() - t0)
            if not m.consume_token(t_id):
                return {"error": f"rejected the sample at token {t_id}"}
        runs.append(run)
    return {"compile_ms": statistics.median(compiles) * 1e3,
            "mean_us": statistics.median(statistics.mean(r) for r in runs) * 1e6,
            "p99_us": statistics.median(pct(r, 99) for r in runs) * 1e6}


def main() -> None:
    from bench_options import require_peers
    require_peers("llguidance")
    from sgrun.models.loader import load_tokenizer
    tok = load_tokenizer(None)
    lt = llg_tokenizer(tok)
    print(machine_line(None), flush=True)
    print("| grammar | sgrun path | sgrun compile ms | sgrun mask cold mean / p99 us | sgrun warm mean us "
          "| llguidance compile ms | llguidance mask mean / p99 us |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for name, kind, text, sample in cases():
        s = bench_sgrun(tok, kind, text, sample)
        o = bench_llguidance(tok, lt, kind, text, sample)
        llg = (f"{o['compile_ms']:.2f} | {o['mean_us']:.0f} / {o['p99_us']:.0f}" if "error" not in o
               else f"error: {o['error']} | -")
        print(f"| {name} | {s['path']} | {s['compile_ms']:.1f} | {s['cold_mean_us']:.0f} / {s['cold_p99_us']:.0f} "
              f"| {s['warm_mean_us']:.1f} | {llg} |", flush=True)


if __name__ == "__main__":
    main()
