"""SGLang's frontend names on sgrun's DSL, without a model: what each call submits, stores and
reports (tests/test_sglang_compat.py runs the same API on the real model and SGLang's client)."""

from __future__ import annotations

import asyncio

import pytest
from test_lang_core import ScriptedBackend

import sgrun
from sgrun.lang.call_meta import FinishReason
from sgrun.lang.reasoning_split import split_reasoning


@pytest.fixture
def backend(tokenizer):
    return ScriptedBackend(tokenizer)


class ReplyBackend(ScriptedBackend):
    """ScriptedBackend that answers every gen with a fixed reply."""

    def __init__(self, tokenizer, reply: str):
        super().__init__(tokenizer)
        self.reply = reply

    def generate(self, prompt, params, return_logprob=False, on_text=None):
        result = super().generate(prompt, params, return_logprob, on_text)
        result.text, result.texts = self.reply, [self.reply] * params.n
        return result


def test_gen_arguments_reach_sampling_params(backend):
    @sgrun.function
    def typed(s):
        s += "n=" + sgrun.gen("a", dtype=int) + " f=" + sgrun.gen_int("b", stop="x")
        s += " s=" + sgrun.gen_string("c") + " m=" + sgrun.gen("d", min_tokens=3, stop_regex=r"\d", max_tokens=9)

    state = typed.run(backend=backend, max_new_tokens=7)
    a, b, c, d = backend.params
    assert a.regex == sgrun.REGEX_INT and a.stop == [" ", "\n"] and a.max_new_tokens == 7
    assert b.regex == sgrun.REGEX_INT and b.stop == ["x", " ", "\n"]
    assert c.regex == sgrun.REGEX_STR
    assert d.min_new_tokens == 3 and d.stop_regex == [r"\d"] and d.max_new_tokens == 9 and d.regex is None
    assert state["a"] == "out1"          # the value stays a string, as in SGLang
    with pytest.raises(ValueError, match="dtype"):
        sgrun.gen("x", dtype=list)


def test_max_tokens_zero_prefills_only(backend):
    @sgrun.function
    def warm(s):
        s += "shared text" + sgrun.gen("nothing", max_tokens=0) + " then" + sgrun.gen("x", max_tokens=2)

    state = warm.run(backend=backend)
    assert state["nothing"] == "" and backend.cached == ["shared text"] and len(backend.prompts) == 1
    assert state.get_meta_info("nothing")["completion_tokens"] == 0


def test_finish_reason_is_sglangs_dict_and_sgruns_string(backend):
    @sgrun.function
    def one(s):
        s += "x" + sgrun.gen("a", max_tokens=2, return_logprob=True, return_text_in_logprobs=True)

    meta = one.run(backend=backend).get_meta_info("a")
    assert meta["finish_reason"] == "stop" and meta["finish_reason"]["type"] == "stop"
    assert meta["output_token_logprobs"][0] == [-0.5, ord("o"), "o"] and meta["logprobs"][0] == ("o", -0.5)
    assert FinishReason(type="length", length=4) == {"type": "length", "length": 4} != "stop"


def test_role_methods_var_scope_item_assignment_and_error(backend, tokenizer):
    @sgrun.function
    def chat(s):
        s.system("Be brief.")
        with s.user():
            with s.var_scope("question"):
                s += "Why?"
        s.assistant(sgrun.gen("answer", max_tokens=2))
        s["note"] = 42

    state = chat.run(backend=backend)
    assert [m["role"] for m in state.messages()] == ["system", "user", "assistant"]
    assert state["question"] == "Why?" and state["note"] == 42 and state.error() is None
    assert state.text() == tokenizer.apply_chat_template(state.messages(), add_generation_prompt=False)


def test_forks_lambda_list_gather_and_concat(backend):
    @sgrun.function
    def tree(s):
        s += "Root."
        forks = s.fork(3)
        forks += lambda i: f" branch{i}" + sgrun.gen("leaf", max_tokens=2)
        forks.join()
        pair = s.fork(2)
        pair += [" left", " right"]
        pair.join(mode="concate_and_append")
        with s.copy() as c:
            c += sgrun.gen("side", max_tokens=2)

    state = tree.run(backend=backend)
    assert len(state["leaf"]) == 3 and all(v.startswith("out") for v in state["leaf"])
    assert state.text() == "Root. left right" and len(state["side"]) == 1
    with pytest.raises(ValueError, match="join mode"):
        state.fork(1).join(mode="zip")


def test_n_samples_are_a_list(tokenizer):
    backend = ReplyBackend(tokenizer, "same")

    @sgrun.function
    def many(s):
        s += "x" + sgrun.gen("a", n=3, max_tokens=2)

    state = many.run(backend=backend)
    assert state["a"] == ["same"] * 3 and state.text() == "xsame" and backend.params[0].n == 3


def test_separate_reasoning(tokenizer):
    backend = ReplyBackend(tokenizer, "<think>Let me think.</think> It is 4.")

    @sgrun.function
    def reason(s):
        s += "Q: 2+2?\nA:" + sgrun.separate_reasoning(sgrun.gen("answer", max_tokens=20))

    state = reason.run(backend=backend)
    assert state["answer"] == "It is 4." and state["answer_reasoning_content"] == "Let me think."
    assert state.text() == "Q: 2+2?\nA:It is 4."
    assert split_reasoning("no markers", None) == ("", "no markers")
    assert split_reasoning("<think>still going", "qwen3") == ("still going", "")
    with pytest.raises(ValueError, match="model_type"):
        split_reasoning("x", "nonsense")


def test_choices_methods(tokenizer):
    scores = {"dog": [-1.0, -5.0], "dog or cat": [-1.0, -0.1, -0.1, -0.1], "cat": [-2.0]}
    backend = ScriptedBackend(tokenizer, scores)

    @sgrun.function
    def pick(s, method):
        s += "Animal:" + sgrun.select("a", choices=["dog", "dog or cat", "cat"], choices_method=method)

    by_mean = pick.run(method=sgrun.token_length_normalized, backend=backend)
    assert by_mean["a"] == "dog or cat"                        # mean -0.325 beats -2.0 and -3.0
    greedy = pick.run(method=sgrun.greedy_token_selection, backend=backend)
    assert greedy["a"] == "dog or cat"                         # ties at -1.0, then -0.1 beats -5.0
    meta = greedy.get_meta_info("a")
    assert meta["greedy_logprob_matrix"][2] == [-2.0] * 4      # padded with its own mean
    assert meta["normalized_prompt_logprobs"] == meta["normalized_logprobs"]


def test_bind_call_and_batch_tuples(backend):
    @sgrun.function
    def greet(s, name, greeting="Hi"):
        s += f"{greeting}, {name}." + sgrun.gen("reply", max_tokens=2)

    sgrun.set_default_backend(backend)
    try:
        assert sgrun.global_config.default_backend is backend
        state = greet.bind(greeting="Hello")(name="Ann")       # f(...) is f.run(...)
        states = greet.run_batch([("Bo",), ("Cy", "Yo")], generator_style=True)
        texts = [st.text() for st in states]
    finally:
        sgrun.set_default_backend(None)
    assert state.text().startswith("Hello, Ann.")
    assert texts[0].startswith("Hi, Bo.") and texts[1].startswith("Yo, Cy.")
    with pytest.raises(TypeError, match="bind"):
        greet.bind(colour="red")
    assert sgrun.flush_cache() is False and sgrun.get_server_info() is None   # no backend


def test_function_decorator_with_arguments_and_async_stream(backend):
    @sgrun.function(num_api_spec_tokens=64)
    def spec(s):
        s += "x" + sgrun.gen("a", max_tokens=2)

    assert spec.num_api_spec_tokens == 64

    async def collect() -> list[str]:
        state = spec.run(backend=backend, stream=True)
        return [piece async for piece in state.text_async_iter(var_name="a")]

    assert "".join(asyncio.run(collect())) == "out1"
