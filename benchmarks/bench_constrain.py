"""Constraint compiler benchmark, sgrun beside llguidance and xgrammar in the same run.

1. MaskBench-style sample (benchmarks/schema_corpus.py: generated SchemaStore-style schemas with
   jsonschema-labelled valid and invalid instances): compile p50/p99 and pass rate per engine;
   a schema passes when it compiles and every valid instance's tokens are accepted and no
   invalid one is (an accepted invalid instance is an invalidation error).
2. Per-token mask cost on the schemas of docs/benchmarks-constrain.md: cold (a fresh request
   on a freshly compiled constraint) and warm (states seen before), p99 after the first call.

3. --first-masks: every mask of each schema's first request over the real-world-like sample,
   p50/p99 beside llguidance on the same schemas and texts, and a 128-tool schema's cold compile.

Run: python benchmarks/bench_constrain.py [--corpus N] [--realworld] [--first-masks] [--skip-masks]
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time

os.environ.setdefault("SGRUN_CACHE", os.path.join(tempfile.gettempdir(), "sgcache"))

import torch  # noqa: E402

SIMPLE = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}
SIMPLE_OK = {"name": "Ada Lovelace", "age": 36}

TOOL = {"type": "object", "properties": {
    "tool": {"enum": ["get_weather", "search", "calculator"]},
    "city": {"type": "string", "maxLength": 60},
    "days": {"type": "integer", "minimum": 1, "maximum": 14},
    "units": {"enum": ["metric", "imperial"]},
    "verbose": {"type": "boolean"}},
    "required": ["tool", "city"], "additionalProperties": False}
TOOL_OK = {"tool": "get_weather", "city": "San Francisco", "days": 5, "units": "metric"}

ORDER = {"type": "object", "properties": {
    "order_id": {"type": "string", "pattern": "^ORD-[0-9]{6}$"},
    "customer": {"type": "object", "properties": {"name": {"type": "string"},
                                                  "email": {"type": "string", "format": "email"},
                                                  "phone": {"type": ["string", "null"]}},
                 "required": ["name", "email"]},
    "items": {"type": "array", "items": {"type": "object", "properties": {
        "sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}, "price": {"type": "number"}},
        "required": ["sku", "qty", "price"]}, "minItems": 1},
    "note": {"type": ["string", "null"]}},
    "required": ["order_id", "customer", "items"]}
ORDER_OK = {"order_id": "ORD-123456", "customer": {"name": "Grace Hopper", "email": "grace@navy.mil", "phone": None},
            "items": [{"sku": "A-1", "qty": 2, "price": 9.99}, {"sku": "B-7", "qty": 1, "price": 120.5}],
            "note": None}


def _big() -> tuple[dict, dict]:
    props: dict = {}
    value: dict = {}
    kinds = ["string", "integer", "number", "boolean", "enum", "addr", "date", "list"]
    for i in range(20):
        k = kinds[i % len(kinds)]
        name = f"field_{i:02d}"
        if k == "string":
            props[name] = {"type": "string", "maxLength": 80}
            value[name] = f"value number {i}"
        elif k == "integer":
            props[name] = {"type": "integer", "minimum": 0, "maximum": 100000}
            value[name] = i * 1234
        elif k == "number":
            props[name] = {"type": "number"}
            value[name] = i / 7
        elif k == "boolean":
            props[name] = {"type": "boolean"}
            value[name] = i % 2 == 0
        elif k == "enum":
            props[name] = {"enum": ["low", "medium", "high"]}
            value[name] = "medium"
        elif k == "addr":
            props[name] = {"anyOf": [{"$ref": "#/$defs/address"}, {"type": "null"}]}
            value[name] = {"street": "1 Main St", "city": "Springfield", "zip": "12345"}
        elif k == "date":
            props[name] = {"type": "string", "format": "date"}
            value[name] = "2024-02-29"
        else:
            props[name] = {"type": "array", "items": {"$ref": "#/$defs/tag"}, "maxItems": 5}
            value[name] = [{"key": "a", "value": "b"}]
    schema = {"type": "object", "properties": props, "required": list(props)[:12],
              "$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"},
                                                                     "city": {"type": "string"},
                                                                     "zip": {"type": "string",
                                                                             "pattern": "^[0-9]{5}$"}},
                                    "required": ["street", "city", "zip"], "additionalProperties": False},
                        "tag": {"type": "object", "properties": {"key": {"type": "string"},
                                                                 "value": {"type": "string"}},
                                "required": ["key", "value"], "additionalProperties": False}}}
    return schema, value


BIG, BIG_OK = _big()
JSON_DOC = '{"users": [{"id": 1, "name": "Ada", "tags": ["math", "engines"], "meta": {"active": true, ' \
           '"score": 9.5}}, {"id": 2, "name": "Alan", "tags": [], "meta": {"active": false, "score": null}}]}'

CASES = [("simple object", {"json_schema": SIMPLE}, SIMPLE_OK),
         ("tool call", {"json_schema": TOOL}, TOOL_OK),
         ("nested order", {"json_schema": ORDER}, ORDER_OK),
         ("20-property $defs/anyOf", {"json_schema": BIG}, BIG_OK),
         ("JSON grammar", {"grammar": "json"}, JSON_DOC)]


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


COLD_RUNS = 5  # fresh compiles per case; the median of their statistics is reported


def _walk(c, ids: list[int]) -> list[float]:
    m = c.matcher()
    row = torch.zeros(c.table.words, dtype=torch.int32)
    times = []
    for t_id in ids:
        t0 = time.perf_counter()
        m.fill_bitmask(row)
        times.append(time.perf_counter() - t0)
        assert m.advance(t_id), f"benchmark text rejected at token {t_id}"
    assert m.is_accepting()
    return times


def bench_sgrun(tok, spec: dict, text: str) -> dict:
    """Cold: a fresh request on a freshly compiled constraint (cache cleared, compiled, walked
    once), repeated COLD_RUNS times; the median of the per-run mean / p50 / p99 is reported, so
    one scheduler hiccup on the shared CPU does not become the p99. Warm: the last constraint
    walked again (every state's mask cached)."""
    from sgrun.constrain import GLOBAL_CACHE, compile_constraint
    ids = tok.encode(text)
    firsts, means, p50s, p99s = [], [], [], []
    c = None
    for _ in range(COLD_RUNS):
        GLOBAL_CACHE.clear()
        t = time.perf_counter()
        c = compile_constraint(tok, **spec)
        firsts.append(time.perf_counter() - t)
        times = _after_first(_walk(c, ids))
        means.append(statistics.mean(times))
        p50s.append(pct(times, 50))
        p99s.append(pct(times, 99))
    out = {"first_compile_ms": statistics.median(firsts) * 1e3, "tokens": len(ids),
           "cold_mean_us": statistics.median(means) * 1e6, "cold_p50_us": statistics.median(p50s) * 1e6,
           "cold_p99_us": statistics.median(p99s) * 1e6}
    if getattr(c, "builder", None) is not None:
        out["strategies"] = c.builder.stats_line()
    t = time.perf_counter()
    for _ in range(100):
        compile_constraint(tok, **spec)
    out["cached_compile_us"] = (time.perf_counter() - t) / 100 * 1e6
    times = _after_first(_walk(c, ids))
    out["warm_mean_us"] = statistics.mean(times) * 1e6
    out["warm_p50_us"] = pct(times, 50) * 1e6
    out["warm_p99_us"] = pct(times, 99) * 1e6
    return out


def _after_first(times: list[float]) -> list[float]:
    return times[1:] if len(times) > 1 else times


def llg_tokenizer(tok):
    import llguidance
    return llguidance.LLTokenizer(tok.hf.to_str(), n_vocab=tok.vocab_size, eos_token=sorted(tok.eos_token_ids)[0])


def llg_matcher(lt, spec: dict):
    import llguidance
    if "json_schema" in spec:
        g = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(spec["json_schema"]),
                                                          defaults={"whitespace_flexible": False})
    else:
        g = llguidance.grammar_from("lark", _JSON_LARK)
    m = llguidance.LLMatcher(lt, g, log_level=0)
    if m.is_error():
        raise ValueError(m.get_error())
    return m


_JSON_LARK = r"""
start: value
value: object | array | string | SIGNED_NUMBER | "true" | "false" | "null"
object: "{" [pair ("," pair)*] "}"
pair: string ":" value
array: "[" [value ("," value)*] "]"
string: ESCAPED_STRING
%import common.ESCAPED_STRING
%import common.SIGNED_NUMBER
%import common.WS
%ignore WS
"""


def bench_llguidance(tok, lt, spec: dict, text: str) -> dict:
    t = time.perf_counter()
    m = llg_matcher(lt, spec)
    first = time.perf_counter() - t
    times = []
    for t_id in tok.encode(text):
        t0 = time.perf_counter()
        m.compute_bitmask()
        times.append(time.perf_counter() - t0)
        if not m.consume_token(t_id):
            return {"first_compile_ms": first * 1e3, "rejected_valid_text": True}
    times = _after_first(times)
    return {"first_compile_ms": first * 1e3, "mean_us": statistics.mean(times) * 1e6, "p99_us": pct(times, 99) * 1e6}


def outlines_vocabulary(tok):
    from outlines_core import Vocabulary
    eos = min(tok.eos_token_ids)
    mapping: dict[bytes, list[int]] = {}
    for i, b in enumerate(tok.token_bytes):
        if b and i not in tok.special_token_ids:
            mapping.setdefault(b, []).append(i)
    return Vocabulary(eos, mapping)


def bench_outlines(tok, vocab, spec: dict, text: str) -> dict:
    from outlines_core import Index
    from outlines_core.json_schema import build_regex_from_schema
    if "json_schema" not in spec:
        return {"note": "no CFG support"}
    t = time.perf_counter()
    regex = build_regex_from_schema(json.dumps(spec["json_schema"]))
    index = Index(regex, vocab)
    first = time.perf_counter() - t
    ids = tok.encode(text)
    state = index.get_initial_state()
    times = []
    rejected = False
    for t_id in ids:
        t0 = time.perf_counter()
        index.get_allowed_tokens(state)
        times.append(time.perf_counter() - t0)
        nxt = index.get_next_state(state, t_id)
        if nxt is None:
            rejected = True
            break
        state = nxt
    return {"first_compile_ms": first * 1e3, "mean_us": statistics.mean(times) * 1e6,
            "p99_us": pct(times, 99) * 1e6, "rejected_valid_text": rejected}


def bench_xgrammar(tok, spec: dict, text: str) -> dict:
    import xgrammar as xgr
    vocab = [tok.hf.id_to_token(i) or "" for i in range(tok.vocab_size)]
    info = xgr.TokenizerInfo(vocab, vocab_type=xgr.VocabType.BYTE_LEVEL, vocab_size=tok.vocab_size,
                             stop_token_ids=sorted(tok.eos_token_ids))
    compiler = xgr.GrammarCompiler(info, cache_enabled=False)
    t = time.perf_counter()
    if "json_schema" in spec:
        cg = compiler.compile_json_schema(json.dumps(spec["json_schema"]), any_whitespace=False,
                                         separators=(",", ":"))
    else:
        cg = compiler.compile_builtin_json_grammar()
    first = time.perf_counter() - t
    matcher = xgr.GrammarMatcher(cg)
    bm = xgr.allocate_token_bitmask(1, tok.vocab_size)
    times = []
    for t_id in tok.encode(text):
        t0 = time.perf_counter()
        matcher.fill_next_token_bitmask(bm)
        times.append(time.perf_counter() - t0)
        if not matcher.accept_token(t_id):
            return {"first_compile_ms": first * 1e3, "rejected_valid_text": True}
    times = _after_first(times)
    return {"first_compile_ms": first * 1e3, "mean_us": statistics.mean(times) * 1e6, "p99_us": pct(times, 99) * 1e6}


def xgr_compiler(tok):
    import xgrammar as xgr
    vocab = [tok.hf.id_to_token(i) or "" for i in range(tok.vocab_size)]
    info = xgr.TokenizerInfo(vocab, vocab_type=xgr.VocabType.BYTE_LEVEL, vocab_size=tok.vocab_size,
                             stop_token_ids=sorted(tok.eos_token_ids))
    return xgr.GrammarCompiler(info, cache_enabled=False)


# --- the schema sample --------------------------------------------------------------------------
def corpus_run(tok, n: int, realworld: bool = False) -> None:
    """n generated schemas (schema_corpus), or the hand-written real-world-like ones
    (realworld_corpus: instances serialized as MaskBench's reference harness does)."""
    import warnings

    import xgrammar as xgr

    from sgrun.constrain import compile_constraint
    from sgrun.constrain.budget import budgeted_matcher
    from sgrun.errors import ConstraintError
    if realworld:
        from realworld_corpus import cases as realworld_cases
        cases = realworld_cases()
    else:
        from schema_corpus import generate
        cases = generate(n)
    lt = llg_tokenizer(tok)
    xc = xgr_compiler(tok)
    eos = sorted(tok.eos_token_ids)[0]

    budget_ms: list[float] = []  # the output budget's set-up, on a new constraint's first request

    def sgrun_engine(schema):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            c = compile_constraint(tok, json_schema=schema, use_cache=False)
        t = time.perf_counter()
        budgeted_matcher(c, 256)
        budget_ms.append((time.perf_counter() - t) * 1e3)
        return lambda text: c.matches(text)

    def llg_engine(schema):
        m0 = llg_matcher(lt, {"json_schema": schema})

        def accepts(text: str) -> bool:
            m = m0.deep_copy()
            return all(m.consume_token(t) for t in tok.encode(text)) and m.is_accepting()
        return accepts

    def xgr_engine(schema):
        cg = xc.compile_json_schema(json.dumps(schema), any_whitespace=False, separators=(",", ":"))

        def accepts(text: str) -> bool:
            m = xgr.GrammarMatcher(cg)
            return all(m.accept_token(t) for t in tok.encode(text)) and m.accept_token(eos) and m.is_terminated()
        return accepts

    engines = [("sgrun", sgrun_engine), ("llguidance 1.9.1", llg_engine), ("xgrammar 0.2.9", xgr_engine)]
    print(f"\nschema sample: {len(cases)} {'real-world-like' if realworld else 'generated'} schemas, "
          f"{sum(len(c.valid) for c in cases)} valid / {sum(len(c.invalid) for c in cases)} invalid instances")
    print(f"| {'engine':18} | {'pass':>6} | {'compile err':>11} | {'rejected valid':>14} | {'accepted invalid':>16} "
          f"| {'compile p50 ms':>14} | {'p99 ms':>8} | {'max ms':>8} |")
    print("|" + "|".join(["-" * 20, "-" * 8, "-" * 13, "-" * 16, "-" * 18, "-" * 16, "-" * 10, "-" * 10]) + "|")
    for label, make in engines:
        compile_ms, passed, errs, rej, acc = [], 0, 0, 0, 0
        refusals: dict[str, int] = {}
        for case in cases:
            t = time.perf_counter()
            try:
                accepts = make(case.schema)
            except (ConstraintError, ValueError, RuntimeError) as e:
                compile_ms.append((time.perf_counter() - t) * 1e3)
                errs += 1
                key = str(e)[:70]
                refusals[key] = refusals.get(key, 0) + 1
                continue
            compile_ms.append((time.perf_counter() - t) * 1e3)
            r = sum(not accepts(v) for v in case.valid)
            a = sum(accepts(v) for v in case.invalid)
            rej += r > 0
            acc += a > 0
            passed += r == 0 and a == 0
        print(f"| {label:18} | {passed / len(cases):6.1%} | {errs:11} | {rej:14} | {acc:16} | "
              f"{pct(compile_ms, 50):14.2f} | {pct(compile_ms, 99):8.1f} | {max(compile_ms):8.1f} |")
        for k, v in sorted(refusals.items(), key=lambda kv: -kv[1])[:3]:
            print(f"|   {label} refused {v}x: {k}")
        if label == "sgrun" and budget_ms:
            print(f"|   sgrun's output budget set-up on a new constraint's first request (budgeted_matcher, "
                  f"max_tokens 256; not in the compile column): p50 {pct(budget_ms, 50):.2f} / p99 "
                  f"{pct(budget_ms, 99):.1f} / max {max(budget_ms):.1f} ms")


# --- first-request masks on the corpus, and the 128-tool schema ------------------------------
def first_request_masks(tok, realworld: bool = True, n: int = 60) -> None:
    """For each schema of the sample (its first valid instance): compile, then time every mask
    of that first request (sgrun: fill_bitmask on a fresh constraint; llguidance:
    compute_bitmask on a fresh matcher), and the same walk again (sgrun warm: masks cached per
    state). p50 / p99 over all masks of all schemas, both engines on the same schemas and texts."""
    import warnings

    from sgrun.constrain import compile_constraint
    from sgrun.errors import ConstraintError
    if realworld:
        from realworld_corpus import cases as realworld_cases
        cases = realworld_cases()
    else:
        from schema_corpus import generate
        cases = generate(n)
    lt = llg_tokenizer(tok)
    cold, warm, llg = [], [], []
    used = 0
    for case in cases:
        if not case.valid:
            continue
        try:
            m0 = llg_matcher(lt, {"json_schema": case.schema})
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                c = compile_constraint(tok, json_schema=case.schema, use_cache=False)
        except (ConstraintError, ValueError, RuntimeError):
            continue  # refused by either: not comparable
        ids = tok.encode(case.valid[0])
        try:
            first = _walk(c, ids)
        except AssertionError:
            continue
        times = []
        for t_id in ids:
            t0 = time.perf_counter()
            m0.compute_bitmask()
            times.append(time.perf_counter() - t0)
            if not m0.consume_token(t_id):
                break
        else:
            used += 1
            cold += first
            warm += _walk(c, ids)
            llg += times
    print(f"\nfirst-request masks, {used} {'real-world-like' if realworld else 'generated'} schemas both engines "
          f"compile and walk, {len(cold)} masks each (every call, the first of each walk included)")
    print("| engine | first request p50 / p99 / max us | warm (state seen) p50 / p99 us |")
    print("|---|---|---|")
    print(f"| sgrun | {pct(cold, 50) * 1e6:.0f} / {pct(cold, 99) * 1e6:.0f} / {max(cold) * 1e6:.0f} | "
          f"{pct(warm, 50) * 1e6:.1f} / {pct(warm, 99) * 1e6:.1f} |")
    print(f"| llguidance | {pct(llg, 50) * 1e6:.0f} / {pct(llg, 99) * 1e6:.0f} / {max(llg) * 1e6:.0f} | "
          f"(no mask cache: every mask is computed) |")


def many_tools_schema(n: int = 128) -> dict:
    """One call of any of n tools: anyOf of {"name": const, "arguments": {...}} objects, each
    with its own typed parameters (strings, enums, integers, nested objects, arrays)."""
    tools = []
    for i in range(n):
        params = {"query": {"type": "string", "maxLength": 200}, "limit": {"type": "integer", "minimum": 1,
                                                                            "maximum": 100 + i},
                  "mode": {"enum": [f"m{i}_a", f"m{i}_b", "auto"]},
                  "filters": {"type": "array", "items": {"type": "object", "properties": {
                      "field": {"type": "string"}, "value": {"type": ["string", "number", "boolean"]}},
                      "required": ["field", "value"]}, "maxItems": 8},
                  f"flag_{i}": {"type": "boolean"}}
        tools.append({"type": "object", "properties": {"name": {"const": f"tool_{i:03d}"}, "arguments": {
            "type": "object", "properties": params, "required": ["query"], "additionalProperties": False}},
            "required": ["name", "arguments"], "additionalProperties": False})
    return {"anyOf": tools}


def many_tools(tok, n: int = 128) -> None:
    from sgrun.constrain import compile_constraint
    schema = many_tools_schema(n)
    t = time.perf_counter()
    c = compile_constraint(tok, json_schema=schema, use_cache=False)
    ours = time.perf_counter() - t
    ok = c.matches(json.dumps({"name": "tool_077", "arguments": {"query": "x", "limit": 3}}, separators=(",", ":")))
    lt = llg_tokenizer(tok)
    t = time.perf_counter()
    llg_matcher(lt, {"json_schema": schema})
    theirs = time.perf_counter() - t
    print(f"\n{n}-tool schema ({len(json.dumps(schema)) // 1024} KiB), cold compile: sgrun {ours * 1e3:.0f} ms "
          f"(accepts a call: {ok}), llguidance {theirs * 1e3:.1f} ms")


def main() -> None:
    import argparse
    import sys
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=int, default=150, help="schemas in the generated sample (0: skip)")
    ap.add_argument("--skip-masks", action="store_true")
    ap.add_argument("--realworld", action="store_true",
                    help="also run the hand-written real-world-like sample (benchmarks/realworld_corpus.py)")
    ap.add_argument("--first-masks", action="store_true",
                    help="first-request masks on the real-world-like sample beside llguidance, and the 128-tool compile")
    args = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_options import machine_line, require_peers, uptime
    require_peers("llguidance", "xgrammar")
    print(machine_line(None), flush=True)
    from sgrun.constrain.token_spelling import vocab_spelling
    from sgrun.constrain.token_table import token_table
    from sgrun.constrain.vocab_index import vocab_index
    from sgrun.models.loader import load_tokenizer
    tok = load_tokenizer(None)
    print("load before:", uptime())
    t = time.perf_counter()
    vocab_index(token_table(tok))
    vocab_spelling(token_table(tok))  # (the output budget's; an engine builds it at start, as here)
    print(f"vocabulary trie + mask indexes + token spellings build (once per tokenizer): "
          f"{(time.perf_counter() - t) * 1e3:.0f} ms")
    if args.corpus:
        corpus_run(tok, args.corpus)
        print("load after sample:", uptime())
    if args.realworld:
        corpus_run(tok, 0, realworld=True)
        print("load after real-world sample:", uptime())
    if args.first_masks:
        first_request_masks(tok)
        many_tools(tok)
        print("load after first-request masks:", uptime())
    if args.skip_masks:
        return
    lt = llg_tokenizer(tok)
    header = (f"| {'case':26} | {'tok':>4} | {'first compile ms':>16} | {'cached compile us':>17} | "
              f"{'cold mean/p50/p99 us':>24} | {'warm mean/p50/p99 us':>22} | {'llguidance compile ms / mean / p99 us':>40} "
              f"| {'xgrammar compile ms / mean / p99 us':>36} |")
    print(header)
    print("|" + "|".join("-" * (len(c) + 2) for c in header.split("|")[1:-1]) + "|")
    strategies: list[str] = []
    for name, spec, value in CASES:
        text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        s = bench_sgrun(tok, spec, text)
        try:
            o = bench_llguidance(tok, lt, spec, text)
        except Exception as e:
            o = {"note": f"error: {str(e)[:30]}"}
        try:
            x = bench_xgrammar(tok, spec, text)
        except Exception as e:
            x = {"note": f"n/a ({type(e).__name__})"}

        def fmt(r: dict) -> str:
            if "note" in r:
                return r["note"]
            if r.get("rejected_valid_text") and "mean_us" not in r:
                return f"{r['first_compile_ms']:.1f} / rejected valid text"
            extra = " (rejected valid text)" if r.get("rejected_valid_text") else ""
            return f"{r['first_compile_ms']:.1f} / {r['mean_us']:.0f} / {r['p99_us']:.0f}{extra}"

        print(f"| {name:26} | {s['tokens']:4} | {s['first_compile_ms']:16.1f} | {s['cached_compile_us']:17.1f} | "
              f"{s['cold_mean_us']:7.0f} / {s['cold_p50_us']:5.0f} / {s['cold_p99_us']:6.0f} | "
              f"{s['warm_mean_us']:6.1f} / {s['warm_p50_us']:5.1f} / {s['warm_p99_us']:6.1f} | {fmt(o):>40} | "
              f"{fmt(x):>36} |")
        strategies.append(f"{name}: {s.get('strategies', '')}")
    print(f"cold = median over {COLD_RUNS} fresh compiles of each run's statistic; every p99 here is over the "
          f"calls after a walk's first one (that first mask is in 'first compile' for sgrun's warm-up)")
    print("load after:", uptime())
    print("masks computed by strategy in the last cold run (warm-up included):")
    for line in strategies:
        print("  " + line)


if __name__ == "__main__":
    main()
