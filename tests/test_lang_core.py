"""The DSL's own logic on a scripted backend (no model): role rendering, variables, forks,
streaming, errors, run_batch isolation, prefix tracing, tool schemas. Fast."""

from __future__ import annotations

import threading
import time
from enum import Enum
from typing import Literal, Optional

import pytest

import sgrun
from sgrun.engine.state.sampling_params import SamplingParams
from sgrun.engine.state.outputs import TokenLogprob
from sgrun.lang.backend import Backend, GenerationResult, ScoreResult
from sgrun.lang.chat_roles import ChatRoles
from sgrun.lang.prefix_tracer import constant_prefix
from sgrun.lang.tool_schema import function_to_tool, parse_docstring


class ScriptedBackend(Backend):
    """Answers gen with "out<N>" (or a fixed reply per regex/json_schema) and scores choices by
    a table; records every prompt."""

    def __init__(self, tokenizer, scores: dict[str, list[float]] | None = None, delay: float = 0.0):
        self.tokenizer = tokenizer
        self.scores = scores or {}
        self.delay = delay
        self.prompts: list[str] = []
        self.params: list[SamplingParams] = []
        self.cached: list[str] = []
        self.lock = threading.Lock()

    @property
    def chat_template(self):
        return self.tokenizer.chat_template

    def generate(self, prompt, params, return_logprob=False, on_text=None):
        with self.lock:
            self.prompts.append(prompt)
            self.params.append(params)
            text = f"out{len(self.prompts)}"
        if params.json_schema is not None:
            text = '{"name": "add", "arguments": {"a": 2, "b": 3}}'
        if params.tool_calls is not None and params.tool_calls["mode"] == "required":
            text = '<tool_call>{"name":"add","arguments":{"a":2,"b":3}}</tool_call>'
        time.sleep(self.delay)
        if on_text is not None:
            for ch in text:
                on_text(ch)
        return GenerationResult(text, "stop", len(prompt), 0, len(text),
                                logprobs=[TokenLogprob(ord(c), c, -0.5) for c in text] if return_logprob else None)

    def score(self, prompt, continuations):
        return ScoreResult([self.scores.get(c.strip(), [-1.0, -1.0]) for c in continuations], len(prompt))

    def cache_prefix(self, prompt):
        self.cached.append(prompt)


@pytest.fixture
def backend(tokenizer):
    return ScriptedBackend(tokenizer)


def test_import_sgrun_stays_light():
    import subprocess
    import sys
    code = "import sys, sgrun; print(any(m.startswith(('sgrun.lang', 'torch', 'httpx')) for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_roles_render_like_the_chat_template(backend, tokenizer):
    @sgrun.function
    def chat(s, question):
        s += sgrun.system("Be brief.")
        s += sgrun.user(question)
        s += sgrun.assistant(sgrun.gen("a", max_tokens=4))
        s += sgrun.user_begin() + "and " + "more" + sgrun.user_end()
        s += sgrun.assistant("I pick " + sgrun.select("c", choices=["x", "y"]) + ".")

    state = chat.run(question="hi", backend=backend)
    assert state.messages() == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "out1"}, {"role": "user", "content": "and more"},
        {"role": "assistant", "content": "I pick x."}]
    assert state.text() == tokenizer.apply_chat_template(state.messages(), add_generation_prompt=False)
    # The gen's prompt ends with exactly the template's generation prompt.
    assert backend.prompts[0] == tokenizer.apply_chat_template(state.messages()[:2], add_generation_prompt=True)
    # Generation inside a role stops at the role's end marker.
    assert "<|im_end|>" in backend.params[0].stop


def test_first_role_gets_the_templates_default_system_prompt(backend, tokenizer):
    @sgrun.function
    def ask(s):
        s += sgrun.user("hi")
        s += sgrun.assistant(sgrun.gen("a", max_tokens=2))

    state = ask.run(backend=backend)
    assert state.text() == tokenizer.apply_chat_template(state.messages(), add_generation_prompt=False)
    assert "You are a helpful AI assistant named SmolLM" in state.text()


def test_chat_roles_without_template_fall_back_to_plain_lines():
    roles = ChatRoles(None)
    assert roles.prefix("user", first=True) == "user: " and roles.suffix("user") == "\n"


def test_select_takes_the_best_normalised_choice_and_moves_trailing_spaces(tokenizer):
    backend = ScriptedBackend(tokenizer, scores={"short": [-2.0], "long one": [-0.5, -0.5, -3.5]})

    @sgrun.function
    def pick(s):
        s += "I choose the " + sgrun.select("c", choices=["short", "long one"])

    state = pick.run(backend=backend)
    # long one: mean -1.5 vs short: -2.0
    assert state["c"] == "long one"
    assert state.get_meta_info("c")["normalized_logprobs"] == [-2.0, -1.5]
    assert state.text() == "I choose the long one"


def test_gen_with_choices_is_a_select(backend):
    node = sgrun.gen("x", choices=["a", "b"])
    assert type(node).__name__ == "Select"


def test_default_sampling_from_run_and_gen_overrides(backend):
    @sgrun.function
    def two(s):
        s += "a" + sgrun.gen("x", max_tokens=3) + sgrun.gen("y", temperature=0.5, stop="\n")

    two.run(backend=backend, temperature=0, max_tokens=7)
    first, second = backend.params
    assert (first.max_new_tokens, first.temperature) == (3, 0)
    assert (second.max_new_tokens, second.temperature, second.stop) == (7, 0.5, ["\n"])


def test_unknown_run_argument_is_rejected(backend):
    @sgrun.function
    def prog(s, q):
        s += q

    with pytest.raises(TypeError, match="bogus"):
        prog.run(q="x", bogus=1, backend=backend)


def test_nested_function_runs_on_the_same_state(backend):
    @sgrun.function
    def greet(s, name):
        s += f"Hello {name}. " + sgrun.gen("g", max_tokens=2)

    @sgrun.function
    def outer(s):
        greet(s, "Ann")
        s += " then " + sgrun.gen("h", max_tokens=2)

    state = outer.run(backend=backend)
    assert state.text() == "Hello Ann. out1 then out2"
    assert state["g"] == "out1" and state["h"] == "out2"


def test_fork_shares_prefix_runs_in_parallel_and_joins(tokenizer):
    backend = ScriptedBackend(tokenizer, delay=0.3)

    @sgrun.function
    def ideas(s):
        s += sgrun.user("Give ideas.")
        forks = s.fork(3)
        for i, f in enumerate(forks):
            f += sgrun.assistant(f"Idea {i}: " + sgrun.gen("idea", max_tokens=4))
        forks.join()
        s += sgrun.assistant(" | ".join(f["idea"] for f in forks))

    start = time.monotonic()
    state = ideas.run(backend=backend)
    elapsed = time.monotonic() - start
    assert elapsed < 0.8, "forks ran one after another"
    assert backend.cached and state.text().startswith(backend.cached[0])
    assert sorted(state.messages()[-1]["content"].split(" | ")) == ["out1", "out2", "out3"]
    fork_prompts = backend.prompts[:3]
    assert all(p.startswith(backend.cached[0]) for p in fork_prompts)


def test_streaming_yields_the_final_text(tokenizer):
    backend = ScriptedBackend(tokenizer, delay=0.05)

    @sgrun.function
    def prog(s):
        s += sgrun.user("q")
        s += sgrun.assistant(sgrun.gen("a", max_tokens=4))
        s += sgrun.assistant(sgrun.gen("b", max_tokens=4))

    state = prog.run(backend=backend, stream=True)
    pieces = list(state.text_iter())
    assert len(pieces) > 5 and "".join(pieces) == state.text()
    assert "".join(state.text_iter("b")) == state["b"] == "out2"


def test_call_error_names_function_and_call(backend):
    @sgrun.function
    def broken(s):
        s += "x" + sgrun.gen("a", max_tokens=-1)
        s += "never"

    with pytest.raises(sgrun.ProgramError) as info:
        broken.run(backend=backend)
    err = info.value
    assert isinstance(err, sgrun.SgrunError)
    assert err.function == "broken" and err.call.startswith("gen('a'") and "test_lang_core.py" in err.call_site
    assert "max_new_tokens" in str(err)


def test_body_error_and_missing_variable(backend):
    @sgrun.function
    def typo(s):
        s += "x" + sgrun.gen("a", max_tokens=2)
        return s["b"]

    with pytest.raises(sgrun.ProgramError, match="no variable 'b'"):
        typo.run(backend=backend)


def test_run_batch_isolates_a_failing_program(backend):
    @sgrun.function
    def prog(s, i):
        if i == 3:
            raise ValueError("bad input 3")
        s += f"{i}:" + sgrun.gen("a", max_tokens=2)

    states = prog.run_batch([{"i": i} for i in range(8)], backend=backend, num_threads=4)
    assert [s.error() is not None for s in states] == [i == 3 for i in range(8)]
    assert "bad input 3" in str(states[3].error()) and states[3].error().function == "prog"
    assert all(states[i]["a"].startswith("out") for i in range(8) if i != 3)
    with pytest.raises(sgrun.ProgramError):  # reading what the failed program never produced
        states[3]["a"]


def test_run_batch_prefills_the_constant_prefix_once(backend):
    @sgrun.function
    def prog(s, question):
        s += sgrun.system("A long shared system prompt.")
        s += sgrun.user(question)
        s += sgrun.assistant(sgrun.gen("a", max_tokens=2))

    prog.run_batch([{"question": f"q{i}"} for i in range(4)], backend=backend)
    assert backend.cached == ["<|im_start|>system\nA long shared system prompt.<|im_end|>\n"]


def test_prefix_tracer_stops_at_arguments_and_model_calls(tokenizer):
    roles = ChatRoles(tokenizer.chat_template)

    def uses_arg_in_fstring(s, name):
        s += "Fixed. "
        s += f"Hi {name}"

    def gen_first(s, name):
        s += "A" + sgrun.gen("x")
        s += name

    assert constant_prefix(uses_arg_in_fstring, roles, "p") == "Fixed. "
    assert constant_prefix(gen_first, roles, "p") == "A"


def test_default_backend(backend):
    @sgrun.function
    def prog(s):
        s += "a" + sgrun.gen("x", max_tokens=1)

    sgrun.set_default_backend(None)
    with pytest.raises(sgrun.SgrunError, match="no backend"):
        prog.run()
    sgrun.set_default_backend(backend)
    try:
        assert prog.run()["x"] == "out1"
    finally:
        sgrun.set_default_backend(None)


def test_return_logprob_lands_in_meta_info(backend):
    @sgrun.function
    def prog(s):
        s += "a" + sgrun.gen("x", max_tokens=1, return_logprob=True)

    meta = prog.run(backend=backend).get_meta_info("x")
    assert meta["logprobs"][0] == ("o", -0.5) and meta["finish_reason"] == "stop"


# --- tool schemas ------------------------------------------------------------------------

class Unit(Enum):
    C = "celsius"
    F = "fahrenheit"


def get_weather(city: str, unit: Unit = Unit.C, days: Optional[int] = None,
                tags: list[str] | None = None, mode: Literal["fast", "exact"] = "fast") -> str:
    """Get the weather forecast for a city.

    Longer description that is not part of the summary.

    Args:
        city: The city's name,
            for example Paris.
        unit: Temperature unit.
        days (int): Number of days.
    """
    return city


def test_function_to_tool_builds_a_json_schema():
    import jsonschema
    tool = function_to_tool(get_weather)
    fn = tool["function"]
    assert fn["name"] == "get_weather" and fn["description"] == "Get the weather forecast for a city."
    params = fn["parameters"]
    assert params["required"] == ["city"] and params["additionalProperties"] is False
    assert params["properties"]["city"] == {"type": "string", "description": "The city's name, for example Paris."}
    assert params["properties"]["unit"]["enum"] == ["celsius", "fahrenheit"]
    assert params["properties"]["days"]["anyOf"] == [{"type": "integer"}, {"type": "null"}]
    assert params["properties"]["tags"]["anyOf"][0] == {"type": "array", "items": {"type": "string"}}
    assert params["properties"]["mode"] == {"enum": ["fast", "exact"], "default": "fast"}
    jsonschema.Draft202012Validator.check_schema(params)
    jsonschema.validate({"city": "Oslo", "days": 3}, params)


def test_sphinx_docstrings():
    summary, params = parse_docstring("Add numbers.\n\n:param a: first\n:param int b: second\n    continued")
    assert summary == "Add numbers." and params == {"a": "first", "b": "second continued"}


def test_untyped_or_unsupported_parameters():
    def f(x, y: complex): ...

    with pytest.raises(sgrun.SgrunError, match="complex"):
        function_to_tool(f)


def test_agent_loop_with_scripted_backend(backend):
    seen = []

    def add(a: int, b: int) -> int:
        """Add two integers."""
        seen.append((a, b))
        return a + b

    def fails(x: str) -> str:
        """Always fails."""
        raise RuntimeError("boom")

    agent = sgrun.Agent(tools=[add, fails], max_steps=1)
    result = agent.run("What is 2 + 3?", backend=backend, tool_choice="required")
    assert seen == [(2, 3)]
    assert result.tool_calls[0].result == 5 and result.finish_reason == "max_steps"
    assert result.answer.startswith("out")
    messages = result.state.messages()
    # The scripted template renders no tool turns, so the result goes back in the call format's own
    # result tags (CallFormat.render_result: Hermes wraps it in <tool_response>).
    assert messages[-2] == {"role": "tool", "content": "<tool_response>\n5\n</tool_response>"}
    assert messages[2]["content"] == '<tool_call>{"name":"add","arguments":{"a":2,"b":3}}</tool_call>'
    # The system prompt and the turn's constraint come from the one tool-call package.
    assert "<tools>" in messages[0]["content"] and '"name": "add"' in messages[0]["content"]
    first = next(p for p in backend.params if p.tool_calls is not None)
    assert first.tool_calls["mode"] == "required" and [t["function"]["name"] for t in first.tool_calls["tools"]] \
        == ["add", "fails"]


def test_agent_tool_exception_goes_back_to_the_model(backend):
    agent = sgrun.Agent(max_steps=1)

    @agent.tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        raise ZeroDivisionError("no luck")

    result = agent.run("What is 2 + 3?", backend=backend, tool_choice="required")
    assert result.tool_calls[0].error == "ZeroDivisionError: no luck"
    assert {"role": "tool", "content": '<tool_response>\n{"error": "ZeroDivisionError: no luck"}\n</tool_response>'} \
        in result.state.messages()
