"""JSON that fits its budget (constrain/budget.py, shortest_completion.py): with max_new_tokens and
a schema, the output closes validly within the budget whenever an instance that short exists.
A budget below the shortest instance runs and is cut there (finish "length", as OpenAI's API);
under strict_budget it is refused, naming the tokens it needs.

Schemas whose shortest instance is about 5, 20 and 60 tokens, at budgets just above and just
below: model-free (random tokens from the budget mask: the steering alone must close the
output), through the engine on the real default model, and through the server (200 with
finish "length" and usage by default; 400 naming max_tokens under the request field or the
server flag)."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import openai
import pytest

from constrain_fixtures import load_default_tokenizer
from server_fixtures import client_fixture, engine_fixture, model_fixture, server_fixture

from sgrun.constrain import compile_constraint
from sgrun.constrain.bitmask import unpack_bitmask
from sgrun.constrain.budget import BudgetMatcher, OutputBudgetError, budgeted_matcher
from sgrun.constrain.shortest_completion import shortest_completion

SHORT = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
MEDIUM = {"type": "object", "properties": {
    "name": {"type": "string", "minLength": 3}, "age": {"type": "integer", "minimum": 18},
    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2}, "active": {"type": "boolean"}},
    "required": ["name", "age", "tags", "active"]}
LONG = {"type": "object", "properties": {
    "user": {"type": "object", "properties": {
        "first_name": {"type": "string"}, "last_name": {"type": "string"},
        "address": {"type": "object", "properties": {
            "street": {"type": "string"}, "city": {"type": "string"},
            "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["street", "city", "zip"]}},
        "required": ["first_name", "last_name", "address"]},
    "items": {"type": "array", "minItems": 3, "items": {"type": "object", "properties": {
        "sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}}, "required": ["sku", "qty"]}}},
    "required": ["user", "items"]}
# (schema, the range its shortest instance's token count must fall in)
CASES = {"5": (SHORT, (4, 7)), "20": (MEDIUM, (17, 24)), "60": (LONG, (55, 75))}
PROMPT = "Describe a customer order for Alice Smith, 12 Long Street, Springfield, with three items, as JSON."

engine = engine_fixture(num_threads=2, memory_gb=0.3)   # the default configuration (int4, auto dtype)
server = server_fixture("engine")
client = client_fixture(timeout=300)
model = model_fixture()
strict_server = server_fixture("engine", strict_budget=True)   # `sgrun serve --strict-budget`
strict_client = client_fixture("strict_server", timeout=300)


def _needed(schema) -> int:
    c = compile_constraint(load_default_tokenizer(), json_schema=schema)
    return int(shortest_completion(c).tokens_needed(c.initial_state))


@pytest.mark.parametrize("size", CASES)
def test_shortest_instance_sizes_and_the_count_is_a_real_path(size):
    """The count is at most what the tokenizer needs for the shortest instance, and following next_token
    from the start spells a valid instance in exactly that many tokens."""
    schema, (lo, hi) = CASES[size]
    tok = load_default_tokenizer()
    c = compile_constraint(tok, json_schema=schema)
    sc = shortest_completion(c)
    need = sc.tokens_needed(c.initial_state)
    assert lo <= need <= hi, need
    witness, _ = sc.witness(c.initial_state)
    jsonschema.validate(json.loads(witness), schema)
    # At most what the tokenizer spends on that instance (the fewest-token spelling may beat BPE).
    assert need <= len(tok.encode(witness.decode(), add_bos=False))
    state, path = c.initial_state, []
    while (t := sc.next_token(state)) is not None:
        path.append(t)
        state = c.advance(state, t)
        assert sc.tokens_needed(state) <= need - len(path)   # (the end itself needs 0, not its EOS)
    jsonschema.validate(json.loads(tok.decode(path)), schema)


@pytest.mark.parametrize("size", CASES)
def test_random_tokens_under_the_budget_mask_always_close_validly(size):
    """Uniformly random tokens from the mask, budgets from the shortest to a little above: the
    output is a valid instance, ends by itself (EOS or a closed value) within the budget."""
    schema, _ = CASES[size]
    tok = load_default_tokenizer()
    c = compile_constraint(tok, json_schema=schema)
    need = _needed(schema)
    eos = set(c.table.eos_ids.tolist())
    rng = np.random.default_rng(0)
    row = np.zeros(c.table.words, dtype=np.int32)
    import torch
    row_t = torch.from_numpy(row)
    for budget in (need, need + 1, need + 3, need + 12, need + 40):
        for _ in range(3):
            m = budgeted_matcher(c, budget)()
            out: list[int] = []
            while not m.is_terminated():
                m.fill_bitmask(row_t)
                allowed = np.flatnonzero(unpack_bitmask(row_t, c.table.vocab_size))
                assert len(allowed), f"empty mask after {out}"
                t = int(rng.choice(allowed))
                assert m.advance(t)
                if t in eos:
                    break
                out.append(t)
            assert len(out) + (1 if m.num_advanced > len(out) else 0) <= budget
            jsonschema.validate(json.loads(tok.decode(out)), schema)


RECURSIVE = {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {
    "type": "array", "items": {"$ref": "#/$defs/node"}, "minItems": 1, "maxItems": 40}}, "required": ["v"]}},
    "$ref": "#/$defs/node"}


@pytest.mark.parametrize("spec", [
    {"json_schema": LONG}, {"json_schema": RECURSIVE},
    {"json_schema": {"type": "object", "properties": {"tags": {"type": "array", "items": {
        "type": "string", "minLength": 7, "maxLength": 300}, "minItems": 6, "maxItems": 900}}, "required": ["tags"]}},
    {"json_schema": {"type": "array", "items": {"anyOf": [{"type": "number"}, {"$ref": "#"}]}, "maxItems": 3}},
    {"regex": r"(ab|c{3,9}){2,50}d?"},
    {"choices": ["alpha", "beta", "gamma"]},
    {"triggers": [{"trigger": "<call>", "json_schema": SHORT}]},
    {"json_schema": SHORT, "reasoning": ("<think>", "</think>")},
], ids=["long", "recursive", "counted", "self-ref", "regex", "choices", "triggers", "reasoning"])
def test_the_cpp_distances_are_the_python_ones(spec):
    """The budget's NFA distances from the C++ automaton (NativeLazyDFA.nfa_distances) equal the
    Python passes they replace (NfaDistances' reference), state by state and fragment by fragment:
    recursion, counted repeats (lo > 1, lo = 0), plain calls, triggers and a reasoning prefix."""
    from sgrun.constrain.native_dfa import NativeLazyDFA
    from sgrun.constrain.shortest_completion import NfaDistances
    c = compile_constraint(load_default_tokenizer(), use_cache=False, **spec)
    assert isinstance(c.dfa, NativeLazyDFA)
    want = NfaDistances(c.dfa.nfa)
    dist, shortest = c.dfa.nfa_distances()
    assert dist == want.dist and shortest == want.shortest
    assert any(d != float("inf") for d in dist) and shortest[c.dfa.root] == want.shortest[c.dfa.root] < float("inf")


@pytest.mark.parametrize("size", CASES)
def test_budget_below_the_shortest_is_refused_naming_the_count(size):
    schema, _ = CASES[size]
    c = compile_constraint(load_default_tokenizer(), json_schema=schema)
    need = _needed(schema)
    with pytest.raises(OutputBudgetError, match=rf"needs {need} tokens") as err:
        budgeted_matcher(c, need - 1, refuse=True)
    assert err.value.field == "max_new_tokens" and err.value.needed == need
    assert type(budgeted_matcher(c, need, refuse=True)()) is BudgetMatcher   # exactly enough is steered
    # Without refuse the request runs on the constraint's own matcher (no steering: it is cut).
    assert type(budgeted_matcher(c, need - 1)()) is type(c.matcher())


@pytest.mark.parametrize("size", CASES)
def test_engine_closes_within_the_budget_on_the_real_model(engine, size):
    import sgrun
    schema, _ = CASES[size]
    need = _needed(schema)
    prompt = engine.tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True)
    for budget, temperature in ((need, 0.0), (need + 1, 0.8), (need + 2, 0.0)):
        out = engine.generate(prompt, sgrun.SamplingParams(max_new_tokens=budget, temperature=temperature, seed=3,
                                                           json_schema=schema))[0]
        assert out.finish_reason == "stop", (budget, out.text)
        assert len(out.token_ids) <= budget
        jsonschema.validate(json.loads(out.text), schema)
    with pytest.raises(OutputBudgetError, match=rf"max_new_tokens is {need - 1}, .* needs {need} tokens"):
        engine.submit(prompt, sgrun.SamplingParams(max_new_tokens=need - 1, json_schema=schema, strict_budget=True))
    # The default is OpenAI's: it runs to max_new_tokens and reports "length".
    cut = engine.generate(prompt, sgrun.SamplingParams(max_new_tokens=need - 1, temperature=0.0,
                                                       json_schema=schema))[0]
    assert cut.finish_reason == "length" and len(cut.token_ids) == need - 1, cut
    assert engine.stats()["running"] == 0


def test_regex_and_tool_arguments_fit_too(engine):
    import sgrun
    pattern = r"[a-z]{12,20}@example\.(com|org)"
    tok = engine.tokenizer
    c = compile_constraint(tok, regex=pattern)
    need = int(shortest_completion(c).tokens_needed(c.initial_state))
    prompt = tok.apply_chat_template([{"role": "user", "content": "Give an email address."}], add_generation_prompt=True)
    out = engine.generate(prompt, sgrun.SamplingParams(max_new_tokens=need, temperature=0.0, regex=pattern))[0]
    assert out.finish_reason == "stop" and c.matches_bytes(out.text.encode()), out.text
    with pytest.raises(OutputBudgetError):
        engine.submit(prompt, sgrun.SamplingParams(max_new_tokens=need - 1, regex=pattern, strict_budget=True))


@pytest.mark.parametrize("size", ["20", "60"])
def test_server_budget_just_above_succeeds_and_below_is_cut_or_a_400_on_request(client, model, size):
    """Below the shortest the default is OpenAI's (200, finish "length", usage, logprobs); the
    request field strict_budget turns it into a 400 naming max_tokens and the count."""
    schema, _ = CASES[size]
    need = _needed(schema)
    rf = {"type": "json_schema", "json_schema": {"name": "order", "schema": schema}}
    messages = [{"role": "user", "content": PROMPT}]
    r = client.chat.completions.create(model=model, messages=messages, max_tokens=need + 1, temperature=0,
                                       response_format=rf)
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens <= need + 1
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)
    cut = client.chat.completions.create(model=model, messages=messages, max_tokens=need - 1, temperature=0,
                                         response_format=rf, logprobs=True, top_logprobs=2)
    assert cut.choices[0].finish_reason == "length"
    assert cut.usage.completion_tokens == need - 1 == len(cut.choices[0].logprobs.content)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=model, messages=messages, max_tokens=need - 1, temperature=0,
                                       response_format=rf, extra_body={"strict_budget": True})
    body = err.value.body
    assert body["param"] == "max_tokens"
    assert f"max_tokens is {need - 1}" in body["message"] and f"needs {need} tokens" in body["message"]


def test_the_server_flag_refuses_by_default_and_a_request_may_still_run(strict_client, strict_server, server,
                                                                         model):
    """Under --strict-budget (build_app(strict_budget=True)) a budget below the shortest is a 400 on
    chat, completions and /generate unless the request says strict_budget false; without the flag
    /generate runs it to max_new_tokens (finish "length") unless sampling_params say true."""
    import httpx
    schema, _ = CASES["20"]
    need = _needed(schema)
    rf = {"type": "json_schema", "json_schema": {"name": "order", "schema": schema}}
    messages = [{"role": "user", "content": PROMPT}]
    with pytest.raises(openai.BadRequestError, match=f"needs {need} tokens"):
        strict_client.chat.completions.create(model=model, messages=messages, max_tokens=need - 1, response_format=rf)
    with pytest.raises(openai.BadRequestError, match=r"max_tokens is 3, .* needs \d+ tokens") as err:
        strict_client.completions.create(model=model, prompt=PROMPT, max_tokens=3,
                                         extra_body={"regex": r"[a-z]{40,50}"})
    assert err.value.body["param"] == "max_tokens"
    ran = strict_client.chat.completions.create(model=model, messages=messages, max_tokens=need - 1, temperature=0,
                                                response_format=rf, extra_body={"strict_budget": False})
    assert ran.choices[0].finish_reason == "length" and ran.usage.completion_tokens == need - 1
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": need - 1, "temperature": 0, "json_schema": schema}}
    refused = httpx.post(strict_server.url + "/generate", json=body, timeout=300)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "sampling_params.max_new_tokens"
    out = httpx.post(server.url + "/generate", json=body, timeout=300)
    assert out.status_code == 200 and out.json()["meta_info"]["finish_reason"]["type"] == "length"
    body["sampling_params"]["strict_budget"] = True
    assert httpx.post(server.url + "/generate", json=body, timeout=300).status_code == 400


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}


def test_server_tool_call_fits_the_count_the_400_names(client, model):
    """A required call below its shortest is refused with the count under strict_budget; at that
    count it completes."""
    import re
    messages = [{"role": "user", "content": "What is the weather in Oslo?"}]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=model, messages=messages, tools=[WEATHER_TOOL], tool_choice="required",
                                       max_tokens=5, temperature=0, extra_body={"strict_budget": True})
    assert err.value.body["param"] == "max_tokens"
    need = int(re.search(r"needs (\d+) tokens", err.value.body["message"]).group(1))
    r = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER_TOOL], tool_choice="required",
                                       max_tokens=need, temperature=0)
    assert r.choices[0].finish_reason == "tool_calls" and r.usage.completion_tokens <= need
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER_TOOL["function"]["parameters"])


def test_the_dsl_takes_the_same_decision(engine):
    """gen() under a schema whose shortest instance does not fit max_tokens: cut there with finish
    "length" by default, refused (the program's error names max_new_tokens) with strict_budget."""
    import sgrun
    schema, _ = CASES["20"]
    need = _needed(schema)

    @sgrun.function
    def order(s, strict):
        s += sgrun.user(PROMPT)
        s += sgrun.assistant(sgrun.gen("order", max_tokens=need - 1, temperature=0, json_schema=schema,
                                       strict_budget=strict))

    runtime = sgrun.Runtime(engine=engine)
    cut = order.run(strict=None, backend=runtime)
    assert cut.get_meta_info("order")["finish_reason"] == "length" and cut["order"].startswith("{")
    with pytest.raises(Exception, match=rf"OutputBudgetError: max_new_tokens is {need - 1}, .* needs {need} tokens"):
        order.run(strict=True, backend=runtime)
