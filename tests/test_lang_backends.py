"""DSL programs on the real SmolLM2 (float32): in process (`sgrun.Runtime`) and against a live
server (`sgrun.RuntimeEndpoint` over /generate, /score) sharing the session's engine."""

from __future__ import annotations

import json

import pytest
import torch
from engine_numerics import logprob_tolerance

import sgrun
from sgrun.server.app import build_app
from server_thread import ServerThread

PAGE = 16
ANSWER_SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer", "minimum": 0, "maximum": 99999}}, "required": ["answer"],
                 "additionalProperties": False}


@pytest.fixture(scope="module")
def runtime(shared_engine):
    return sgrun.Runtime(engine=shared_engine)


@pytest.fixture(scope="module")
def endpoint(shared_engine):
    with ServerThread(build_app(shared_engine)) as server:
        backend = sgrun.RuntimeEndpoint(server.url)
        yield backend
        backend.close()


@pytest.fixture(params=["runtime", "endpoint"])
def backend(request):
    return request.getfixturevalue(request.param)


@sgrun.function
def pick_tool(s, question):
    s += sgrun.system("You are a helpful assistant.")
    s += sgrun.user(question)
    s += sgrun.assistant("To answer this I will use a "
                         + sgrun.select("tool", choices=["calculator", "search engine"]) + ".")
    s += sgrun.user("Now answer in JSON.")
    s += sgrun.assistant(sgrun.gen("answer", max_tokens=16, json_schema=ANSWER_SCHEMA))


@sgrun.function
def five_calls(s, topic):
    s += sgrun.system("You are a concise assistant.")
    s += sgrun.user(f"Name a {topic}.")
    s += sgrun.assistant(sgrun.gen("name", max_tokens=6))
    s += sgrun.user("Is it big? Answer yes or no.")
    s += sgrun.assistant(sgrun.select("big", choices=["yes", "no"]))
    s += sgrun.user("Give its colour in one word.")
    s += sgrun.assistant(sgrun.gen("colour", max_tokens=4, regex=r"[A-Za-z]{1,12}"))
    s += sgrun.user("Rate it from 1 to 9.")
    s += sgrun.assistant(sgrun.gen("rating", max_tokens=2, regex=r"[1-9]"))
    s += sgrun.user("One sentence about it.")
    s += sgrun.assistant(sgrun.gen("sentence", max_tokens=8, stop=".", return_logprob=True))


def test_primitives_render_through_the_chat_template(backend, tokenizer):
    state = pick_tool.run(question="What is 17 * 23?", backend=backend, temperature=0)
    assert state["tool"] in ("calculator", "search engine")
    # "integer" generates integers only (never 17.0: strict consumers such as pydantic's strict mode reject it)
    assert isinstance(json.loads(state["answer"])["answer"], int), state["answer"]
    assert state.text() == tokenizer.apply_chat_template(state.messages(), add_generation_prompt=False)
    meta = state.get_meta_info("tool")
    assert state["tool"] == meta["choices"][max(range(2), key=meta["normalized_logprobs"].__getitem__)]


def test_same_greedy_results_on_both_backends(runtime, endpoint):
    here = five_calls.run(topic="fruit", backend=runtime, temperature=0)
    there = five_calls.run(topic="fruit", backend=endpoint, temperature=0)
    assert here.text() == there.text()
    assert here.variables() == there.variables()
    assert here.get_meta_info("big")["normalized_logprobs"] == pytest.approx(
        there.get_meta_info("big")["normalized_logprobs"], abs=1e-4)
    here_lps, there_lps = here.get_meta_info("sentence")["logprobs"], there.get_meta_info("sentence")["logprobs"]
    assert len(here_lps) == here.get_meta_info("sentence")["completion_tokens"] > 0
    assert [t for t, _ in here_lps] == [t for t, _ in there_lps]
    assert [lp for _, lp in here_lps] == pytest.approx([lp for _, lp in there_lps], abs=1e-4)
    assert all(lp <= 0 for _, lp in here_lps)


def test_later_calls_reuse_the_earlier_text_from_the_cache(backend, shared_engine):
    state = five_calls.run(topic="tree", backend=backend, temperature=0)
    gens = [c for c in state.calls if c["kind"] == "gen"]
    assert len(state.calls) == 5
    for earlier, later in zip(gens, gens[1:]):
        # Everything the earlier call saw is cached, up to the last partial page.
        assert later["cached_tokens"] >= earlier["prompt_tokens"] - PAGE + 1, (earlier, later)
        assert later["prompt_tokens"] > earlier["prompt_tokens"]


def test_fork_shares_the_prefix(backend):
    @sgrun.function
    def ideas(s):
        s += sgrun.system("You are a creative assistant who writes short ideas for weekend trips.")
        s += sgrun.user("Suggest a weekend trip.")
        forks = s.fork(3)
        for i, f in enumerate(forks):
            f += sgrun.assistant(f"Idea {i + 1}: " + sgrun.gen("idea", max_tokens=6, temperature=0))
        s += sgrun.user("Ideas: " + "; ".join(f["idea"] for f in forks) + ". Pick the best number.")
        s += sgrun.assistant(sgrun.select("best", choices=["1", "2", "3"]))
        s.set_var("fork_meta", [f.get_meta_info("idea") for f in forks])

    state = ideas.run(backend=backend)
    metas = state["fork_meta"]
    assert all(m["cached_tokens"] > 0 for m in metas)
    assert all(m["cached_tokens"] >= m["prompt_tokens"] - 2 * PAGE for m in metas)
    assert state["best"] in ("1", "2", "3")


def test_streaming_yields_the_non_streamed_text(backend):
    plain = five_calls.run(topic="bird", backend=backend, temperature=0)
    streamed = five_calls.run(topic="bird", backend=backend, temperature=0, stream=True)
    sentence = list(streamed.text_iter("sentence"))
    pieces = list(streamed.text_iter())
    assert "".join(pieces) == plain.text() == streamed.text()
    assert "".join(sentence) == plain["sentence"]
    assert len(pieces) > 10


def test_run_batch_isolates_failures(backend):
    @sgrun.function
    def short(s, i):
        s += sgrun.user(f"Say a word about the number {i}.")
        s += sgrun.assistant(sgrun.gen("word", max_tokens=2, regex=r"[a-z]+" if i != 7 else r"[a-z"))

    count = 50 if isinstance(backend, sgrun.Runtime) else 12   # HTTP: fewer, same code path
    states = short.run_batch([{"i": i} for i in range(count)], backend=backend, temperature=0)
    assert len(states) == count
    for i, state in enumerate(states):
        if i == 7:
            assert isinstance(state.error(), sgrun.ProgramError)
            assert state.error().function == "short" and "regex" in state.error().call
            assert isinstance(state.error().cause, sgrun.ConstraintError)
        else:
            assert state.error() is None and state["word"].isalpha() and state["word"].islower()


def test_agent_calls_a_tool_with_schema_valid_arguments(backend):
    import jsonschema
    calls = []

    def multiply(a: int, b: int) -> int:
        """Multiply two integers.

        Args:
            a: the first factor
            b: the second factor
        """
        calls.append({"a": a, "b": b})
        return a * b

    def search(query: str) -> str:
        """Search the web."""
        return "no results"

    agent = sgrun.Agent(tools=[multiply, search], max_steps=2, max_tokens=8, call_max_tokens=32)
    result = agent.run("What is 17 * 23?", backend=backend, tool_choice="required")
    assert calls and result.tool_calls[0].name == "multiply"
    for call in result.tool_calls:
        if call.name == "multiply":
            jsonschema.validate(call.arguments, agent.tools[0]["function"]["parameters"])
    # The result went back into the conversation before the answer was generated.
    messages = result.state.messages()
    # SmolLM2's template renders no tool turns: the result goes back in the call format's result tags
    assert {"role": "tool", "content": f"<tool_response>\n{calls[0]['a'] * calls[0]['b']}\n</tool_response>"} in messages
    assert messages[-1]["role"] == "assistant" and "<tool_call>" not in messages[-1]["content"]
    assert result.answer is not None and result.finish_reason in ("answer", "max_steps")


def test_backend_errors_surface_as_program_errors(backend):
    @sgrun.function
    def bad_schema(s):
        s += sgrun.user("x")
        s += sgrun.assistant(sgrun.gen("y", max_tokens=2, json_schema={"type": "nonsense"}))

    with pytest.raises(sgrun.ProgramError) as info:
        bad_schema.run(backend=backend)
    assert info.value.function == "bad_schema" and info.value.call.startswith("gen('y'")
    assert isinstance(info.value.cause, sgrun.SgrunError)


# --- select against a plain forward ---------------------------------------------------------

class _CausalAttention:
    """Plain causal attention over the sequence itself: no KV pool, no cache, no paging."""

    def __init__(self, num_heads: int, num_kv_heads: int):
        self.group = num_heads // num_kv_heads

    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        k, v = (x.repeat_interleave(self.group, dim=1).transpose(0, 1) for x in (k, v))
        out = torch.nn.functional.scaled_dot_product_attention(q.transpose(0, 1), k, v, is_causal=True)
        return out.transpose(0, 1)


@torch.inference_mode()
def reference_normalised_logprob(engine, prompt: str, choice: str) -> float:
    """Mean log-probability of the tokens of prompt+choice past the prompt's own tokens, from one
    plain forward of the whole sequence through the model's weights."""
    tokenizer, model = engine.tokenizer, engine.model
    prompt_ids = tokenizer.encode(prompt)
    full = tokenizer.encode(prompt + choice)
    start = 0
    while start < min(len(full), len(prompt_ids)) and full[start] == prompt_ids[start]:
        start += 1
    rows = torch.arange(len(full))
    attention = _CausalAttention(engine.config.num_heads, engine.config.num_kv_heads)
    logits = model.forward(torch.tensor(full), rows, attention, rows)
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    values = [float(logprobs[i - 1, full[i]]) for i in range(start, len(full))]
    return sum(values) / len(values)


def test_select_picks_the_highest_normalised_loglikelihood(runtime, shared_engine):
    choices = ["Paris", "London", "the city of Rome", "Berlin"]

    @sgrun.function
    def capital(s):
        s += sgrun.user("What is the capital of France?")
        s += sgrun.assistant("The capital of France is " + sgrun.select("city", choices=choices))

    state = capital.run(backend=runtime)
    meta = state.get_meta_info("city")
    prompt = state.text()[: state.text().index("The capital of France is ") + len("The capital of France is ")]
    expected = [reference_normalised_logprob(shared_engine, prompt, c) for c in choices]
    assert meta["normalized_logprobs"] == pytest.approx(expected, **logprob_tolerance(shared_engine))
    assert state["city"] == choices[max(range(len(choices)), key=expected.__getitem__)]
