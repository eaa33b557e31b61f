"""--reasoning-parser: `<think>…</think>` leaves as reasoning_content (whole and as streamed
reasoning deltas), the answer as content, and a constraint holds after the reasoning ends."""

from __future__ import annotations

import json

import openai
import pytest

from sgrun.errors import SgrunError
from sgrun.server.app import build_app
from server_thread import ServerThread
from sgrun.server.reasoning import ReasoningSplitter, reasoning_tags

OUTPUT = "<think>\nThe user wants yes or no.\n</think>\n\nyes"


def test_splitter_whole_and_streamed():
    tags = reasoning_tags("qwen3")
    assert ReasoningSplitter(*tags).split(OUTPUT, final=True) == ("The user wants yes or no.", "yes")
    assert ReasoningSplitter(*tags).split("no reasoning here", final=True) == ("", "no reasoning here")
    assert ReasoningSplitter(*tags, in_prompt=True).split("hmm</think>ok", final=True) == ("hmm", "ok")
    assert ReasoningSplitter(*tags).split("<think>cut off", final=True) == ("cut off", "")
    for step in (1, 2, 5):
        splitter = ReasoningSplitter(*tags)
        pieces = [splitter.feed(OUTPUT[i:i + step]) for i in range(0, len(OUTPUT), step)] + [splitter.feed("", True)]
        assert "".join(r for r, _ in pieces) == "The user wants yes or no."
        assert "".join(a for _, a in pieces) == "yes"
        assert all("<" not in r + a for r, a in pieces)
    with pytest.raises(SgrunError, match="unknown reasoning parser"):
        reasoning_tags("nope")


def test_server_and_dsl_read_one_table_of_tags():
    # --reasoning-parser and separate_reasoning take the same names, in either spelling.
    from sgrun.lang.reasoning_split import REASONING_TAGS, split_reasoning
    for name, (start, end) in REASONING_TAGS.items():
        for spelling in (name, name.replace("-", "_"), name.upper()):
            assert reasoning_tags(spelling) == (start, end)
            assert split_reasoning(f"{start}why{end} answer", spelling) == ("why", "answer")
    assert reasoning_tags("deepseek_r1") == reasoning_tags("deepseek-r1") == ("<think>", "</think>")


@pytest.fixture(scope="module")
def client(shared_engine):
    with ServerThread(build_app(shared_engine, reasoning_parser="qwen3")) as srv:
        yield openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_server_splits_reasoning_and_constrains_the_answer(client):
    model = client.models.list().data[0].id
    # sgrun's regex holds the whole output (reasoning included), so even a 135M model writes a
    # reasoning section here; response_format and tools would start after it.
    kw = dict(model=model, messages=[{"role": "user", "content": "Is water wet? Think first."}], temperature=0,
              max_tokens=40, extra_body={"regex": "<think>[a-z ]{4,30}</think>\n(yes|no)"})
    r = client.chat.completions.create(**kw)
    msg = r.choices[0].message
    reasoning = msg.model_extra["reasoning_content"]
    assert reasoning and "<think>" not in reasoning and msg.content in ("yes", "no")
    chunks = list(client.chat.completions.create(stream=True, **kw))
    streamed_reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks
                                 if c.choices)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed_reasoning == reasoning and streamed == msg.content


def test_response_format_starts_after_the_reasoning(client, shared_engine):
    model = client.models.list().data[0].id
    lt = shared_engine.tokenizer.encode("<", add_bos=False)[0]
    schema = {"type": "object", "properties": {"wet": {"type": "boolean"}}, "required": ["wet"]}
    # Pushed to open with "<", the model can only start a reasoning section (a JSON answer cannot
    # begin with "<"); whatever it reasons, what follows the section is the schema's JSON.
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Is water wet?"}],
                                       temperature=0, max_tokens=60, logit_bias={str(lt): 30},
                                       response_format={"type": "json_schema",
                                                        "json_schema": {"name": "a", "schema": schema}})
    msg = r.choices[0].message
    assert msg.model_extra["reasoning_content"] is not None or r.choices[0].finish_reason == "length"
    if r.choices[0].finish_reason == "stop":
        assert json.loads(msg.content)["wet"] in (True, False)
