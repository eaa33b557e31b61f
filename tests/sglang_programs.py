"""SGLang-style programs written against a module `sgl` (sgrun, or the real sglang frontend).

Each `check_*` takes the DSL module and a backend, runs one program shape SGLang users write
(multi-turn chat, role methods, select, forks, regex, dtype gen, batch, streaming, ...) and
asserts structure, not facts: SmolLM2-135M's answers are not reliable, its output's shape is.
The same functions run on sgrun's Runtime, sgrun's RuntimeEndpoint, and SGLang's own
RuntimeEndpoint against `sgrun serve` (tests/test_sglang_compat*.py).
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, Callable

IP_REGEX = r"((25[0-5]|2[0-4]\d|[01]?\d\d?)\.){3}(25[0-5]|2[0-4]\d|[01]?\d\d?)"


def check_multi_turn(sgl: Any, backend: Any) -> None:
    @sgl.function
    def two_questions(s, first, second):
        s += sgl.system("You are a helpful assistant.")
        s += sgl.user(first)
        s += sgl.assistant(sgl.gen("answer_1", max_tokens=12))
        s += sgl.user(second)
        s += sgl.assistant(sgl.gen("answer_2", max_tokens=12))

    state = two_questions.run(first="Name a colour.", second="Name another one.", temperature=0, backend=backend)
    assert isinstance(state["answer_1"], str) and isinstance(state["answer_2"], str)
    messages = state.messages()
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert messages[3]["content"] == "Name another one."
    assert state["answer_2"].strip() in state.text()


def check_role_methods(sgl: Any, backend: Any) -> None:
    @sgl.function
    def roles(s, question):
        s.system("You answer in one word.")
        with s.user():
            s += question
        with s.assistant():
            s += sgl.gen("answer", max_tokens=6)
        s.user("Thanks.")

    state = roles.run(question="What is the opposite of hot?", temperature=0, backend=backend)
    assert [m["role"] for m in state.messages()] == ["system", "user", "assistant", "user"]
    assert state.messages()[1]["content"].strip() == "What is the opposite of hot?"
    assert isinstance(state["answer"], str)


def check_select(sgl: Any, backend: Any) -> None:
    @sgl.function
    def true_or_false(s, statement):
        s += "Determine whether the statement below is True, False, or Unknown.\n"
        s += "Statement: " + statement + "\nAnswer:"
        s += sgl.select("answer", choices=["True", "False", "Unknown"])

    state = true_or_false.run(statement="The sun rises in the east.", backend=backend)
    assert state["answer"] in ("True", "False", "Unknown")
    meta = state.get_meta_info("answer")
    assert len(meta["normalized_prompt_logprobs"]) == 3
    best = max(range(3), key=meta["normalized_prompt_logprobs"].__getitem__)
    assert ["True", "False", "Unknown"][best] == state["answer"]
    assert state.text().endswith("Answer:" + state["answer"])


def check_select_methods(sgl: Any, backend: Any) -> None:
    @sgl.function
    def pick(s, method):
        s += "Q: Which animal barks?\nA: The"
        s += sgl.gen("animal", choices=[" dog", " cat", " dog or a wolf"], choices_method=method)

    for method in (sgl.token_length_normalized, sgl.greedy_token_selection,
                   sgl.unconditional_likelihood_normalized):
        state = pick.run(method=method, backend=backend)
        assert state["animal"] in (" dog", " cat", " dog or a wolf")
        meta = state.get_meta_info("animal")
        assert len(meta["input_token_logprobs"]) == 3 and all(meta["input_token_logprobs"])
        if method is sgl.unconditional_likelihood_normalized:
            assert len(meta["normalized_unconditional_prompt_logprobs"]) == 3


def check_regex_and_dtypes(sgl: Any, backend: Any) -> None:
    @sgl.function
    def typed(s):
        s += "Q: What is the IP address of a public DNS server?\nA: " + sgl.gen("ip", temperature=0, regex=IP_REGEX) + "\n"
        s += "Q: How many hours are in a day?\nA: " + sgl.gen("hours", dtype=int) + "\n"
        s += "Q: What is pi to two decimals?\nA: " + sgl.gen("pi", dtype=float) + "\n"
        s += "Q: Is water wet?\nA: " + sgl.gen("wet", dtype=bool) + "\n"
        s += "Q: Name a city.\nA: " + sgl.gen_string("city", max_tokens=12) + "\n"
        s += "Q: How many legs does a spider have?\nA: " + sgl.gen_int("legs") + "\n"

    state = typed.run(temperature=0, max_new_tokens=16, backend=backend)
    assert re.fullmatch(IP_REGEX, state["ip"])
    int(state["hours"]), float(state["pi"]), int(state["legs"])
    assert state["wet"] in ("True", "False")
    # A quoted string, or its prefix when the token budget ran out.
    assert re.fullmatch(r"\"[\w\d\s]*\"?", state["city"])


def check_json_regex(sgl: Any, backend: Any) -> None:
    regex = (r"""\{\n  "name": "[\w ]{1,16}",\n  "population": [0-9]{1,9}\n\}""")

    @sgl.function
    def city(s):
        s += "Give the name and population of a big city in JSON.\n"
        s += sgl.gen("json_output", max_tokens=64, regex=regex)

    state = city.run(temperature=0, backend=backend)
    obj = json.loads(state["json_output"])
    assert isinstance(obj["name"], str) and isinstance(obj["population"], int)


def check_fork_gather(sgl: Any, backend: Any) -> None:
    @sgl.function
    def tips(s, topic):
        s += "Here are two tips for " + topic + ".\n"
        forks = s.fork(2)
        forks += lambda i: f"Tip {i + 1}:" + sgl.gen("tip", max_tokens=8, stop="\n") + "\n"
        forks.join()
        s += "Tip 1:" + forks[0]["tip"] + "\nTip 2:" + forks[1]["tip"] + "\n"
        s += "In summary," + sgl.gen("summary", max_tokens=8)

    state = tips.run(topic="staying healthy", temperature=0, backend=backend)
    assert isinstance(state["tip"], list) and len(state["tip"]) == 2
    assert all(isinstance(t, str) for t in state["tip"])
    assert isinstance(state["summary"], str)


def check_fork_concat(sgl: Any, backend: Any) -> None:
    @sgl.function
    def documents(s, question, docs):
        s += "Read the documents.\n"
        forks = s.fork(len(docs))
        forks += [f"Document {i}: {d}\n" for i, d in enumerate(docs)]
        forks.join(mode="concate_and_append")
        s += "Question: " + question + "\nAnswer:" + sgl.gen("answer", max_tokens=8, stop="\n")

    docs = ["Noah built a boat.", "The boat was large.", "Animals came aboard."]
    state = documents.run(question="Who built the boat?", docs=docs, temperature=0, backend=backend)
    text = state.text()
    positions = [text.index(f"Document {i}: {d}") for i, d in enumerate(docs)]
    assert positions == sorted(positions) and isinstance(state["answer"], str)


def check_state_tools(sgl: Any, backend: Any) -> None:
    """var_scope, item assignment, copy, calling another function (a run of its own), bind."""
    @sgl.function
    def title(s, name):
        s += "A title for a story about " + name + ":" + sgl.gen("title", max_tokens=6, stop="\n")

    @sgl.function
    def story(s, name, place):
        heading = title(name=name)          # runs on the default backend, as in SGLang
        s += "Title:" + heading["title"] + "\n"
        s += "This is a story about " + name + ". "
        with s.var_scope("setting"):
            s += "It happened in " + place + "."
        s["mood"] = "calm"
        with s.copy() as branch:
            branch += " Meanwhile," + sgl.gen("aside", max_tokens=6)
        s += " " + sgl.gen("next", max_tokens=8)

    sgl.set_default_backend(backend)
    try:
        state = story.bind(place="Paris").run(name="Alice", temperature=0, backend=backend)
    finally:
        sgl.set_default_backend(None)
    assert "This is a story about Alice. It happened in Paris." in state.text()
    assert state["setting"] == "It happened in Paris."
    assert state["mood"] == "calm" and "mood" in state
    assert isinstance(state["aside"], list) and len(state["aside"]) == 1 and "Meanwhile" not in state.text()
    assert state.error() is None


def check_n_samples(sgl: Any, backend: Any) -> None:
    """gen(n=...) stores every sample. (SGLang's own RuntimeEndpoint cannot read the list
    /generate answers for n > 1, from SGLang's server or sgrun's, so it is not run there.)"""
    @sgl.function
    def sampled(s):
        s += "Q: Name a fruit.\nA:"
        s += sgl.gen("fruits", max_tokens=6, n=3, temperature=1.0, stop="\n")

    state = sampled.run(backend=backend)
    assert isinstance(state["fruits"], list) and len(state["fruits"]) == 3
    assert state.text().endswith(state["fruits"][0])


def check_logprobs(sgl: Any, backend: Any) -> None:
    @sgl.function
    def with_logprobs(s):
        s += "Q: Name a vegetable.\nA:" + sgl.gen("veg", max_tokens=6, return_logprob=True, top_logprobs_num=2,
                                                 return_text_in_logprobs=True, temperature=0, logprob_start_len=0)

    state = with_logprobs.run(backend=backend)
    meta = state.get_meta_info("veg")
    prompt = meta["input_token_logprobs"]
    assert len(prompt) == meta["prompt_tokens"] and prompt[0][0] is None
    assert all(isinstance(e[0], float) for e in prompt[1:])
    entries = meta["output_token_logprobs"]
    assert len(entries) == meta["completion_tokens"] > 0
    assert all(isinstance(e[0], float) and isinstance(e[1], int) and isinstance(e[2], str) for e in entries)
    assert all(len(top) == 2 for top in meta["output_top_logprobs"])
    assert meta["finish_reason"]["type"] in ("stop", "length")


def check_min_tokens_and_stop_regex(sgl: Any, backend: Any) -> None:
    @sgl.function
    def answer(s, min_tokens):
        s += sgl.user("Answer with one word: what colour is the sky?")
        s += sgl.assistant(sgl.gen("a", min_tokens=min_tokens, max_tokens=32))

    @sgl.function
    def count(s):
        s += "Count: 1, 2, 3," + sgl.gen("count", max_tokens=40, stop_regex=r"\b7\b")

    plain = answer.run(min_tokens=0, temperature=0, backend=backend).get_meta_info("a")
    longer = answer.run(min_tokens=16, temperature=0, backend=backend).get_meta_info("a")
    assert plain["completion_tokens"] < 16 <= longer["completion_tokens"]
    state = count.run(temperature=0, backend=backend)
    meta = state.get_meta_info("count")
    assert meta["finish_reason"]["type"] == "stop" and meta["completion_tokens"] < 40
    assert re.search(r"\b7\b", state["count"]) and state["count"].rstrip().endswith("7")   # the match is kept


def check_max_tokens_zero(sgl: Any, backend: Any) -> None:
    @sgl.function
    def prefill_only(s):
        s += "A long shared preamble that later calls reuse from the cache."
        s += sgl.gen("nothing", max_tokens=0)
        s += " Then:" + sgl.gen("something", max_tokens=4)

    state = prefill_only.run(temperature=0, backend=backend)
    assert state["nothing"] == "" and isinstance(state["something"], str)


def check_batch(sgl: Any, backend: Any) -> None:
    @sgl.function
    def capital(s, country):
        s += "Q: What is the capital of " + country + "?\nA:" + sgl.gen("answer", max_tokens=6, stop="\n")

    countries = ["Japan", "France", "Peru"]
    states = capital.run_batch([{"country": c} for c in countries], temperature=0, backend=backend)
    assert len(states) == 3 and all(isinstance(st["answer"], str) for st in states)
    for st, country in zip(states, countries):
        assert country in st.text()
    positional = capital.run_batch([("Chile",), ("Kenya",)], temperature=0, backend=backend)
    assert "Kenya" in positional[1].text()


def check_streaming(sgl: Any, backend: Any) -> None:
    @sgl.function
    def listing(s):
        s += sgl.user("List three colours, one per line.")
        s += sgl.assistant(sgl.gen("answer", max_tokens=24))

    state = listing.run(stream=True, temperature=0, backend=backend)
    whole = "".join(state.text_iter())
    assert whole == state.text()
    state = listing.run(stream=True, temperature=0, backend=backend)
    answer = "".join(state.text_iter(var_name="answer"))
    assert answer == state["answer"]


def check_stream_logprobs(sgl: Any, backend: Any) -> None:
    @sgl.function
    def qa(s):
        s += sgl.user("Describe the sea.")
        s += sgl.assistant(sgl.gen("answer", return_logprob=True))

    async def collect(state: Any) -> list[tuple[str, dict]]:
        return [item async for item in state.text_async_iter("answer", return_meta_data=True)]

    state = qa.run(stream=True, temperature=0, max_new_tokens=16, backend=backend)
    chunks = asyncio.run(collect(state))
    assert chunks
    previous = 0
    for text, meta in chunks:
        assert text
        assert meta["completion_tokens"] == meta["output_token_logprobs_length"]
        assert len(meta["output_token_logprobs"]) == meta["completion_tokens"] - previous
        previous = meta["completion_tokens"]


def check_error_reporting(sgl: Any, backend: Any) -> None:
    @sgl.function
    def bad(s):
        s += "x" + sgl.gen("a", max_tokens=4, temperature=-3)

    state = bad.run_batch([{}], backend=backend)[0]
    assert state.error() is not None


PROGRAMS: dict[str, Callable[[Any, Any], None]] = {
    name[len("check_"):]: fn for name, fn in dict(globals()).items() if name.startswith("check_")
}
