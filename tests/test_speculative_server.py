"""N-gram speculation through the server: `sgrun serve --speculative-ngram` (the flags parsed by
the real serve parser) makes it the default, a request turns it on or off with the
`speculative_ngram` extra body field through the official openai client, a bad value is a 400
naming the field, and /metrics reports the drafted / accepted tokens and the acceptance rate."""

from __future__ import annotations

import argparse
import re

import httpx
import openai
import pytest

import sgrun
from sgrun.cli_flags import speculative_kwargs
from sgrun.server.app import build_app
from server_thread import ServerThread
from sgrun.server.cli_commands import add_serve_parser

TOOL_RESULT = '{"order_id": "A-1042", "status": "shipped", "items": [{"sku": "KB-7", "qty": 2}]}'
MESSAGES = [{"role": "user", "content": f"Repeat this tool result exactly: {TOOL_RESULT}"}]


@pytest.fixture(scope="module")
def server():
    parser = argparse.ArgumentParser()
    add_serve_parser(parser.add_subparsers())
    args = parser.parse_args(["serve", "--speculative-ngram", "--speculative-num-draft", "5",
                              "--speculative-ngram-max", "3", "--speculative-ngram-min", "2"])
    kwargs = speculative_kwargs(args)
    assert kwargs == dict(speculative_ngram=True, speculative_num_draft=5, speculative_ngram_max=3,
                          speculative_ngram_min=2)
    engine = sgrun.Engine(dtype="float32", quantization="none", memory_gb=0.5, **kwargs)
    with ServerThread(build_app(engine)) as srv:
        yield srv
    engine.close()


def _metric(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.M)
    assert m, f"{name} missing from /metrics"
    return float(m.group(1))


def test_server_default_and_request_option_through_openai(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    model = client.models.list().data[0].id
    on = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=40, temperature=0)
    metrics = httpx.get(server.url + "/metrics").text
    drafted = _metric(metrics, 'sgrun_spec_tokens_total{kind="drafted"}')
    accepted = _metric(metrics, 'sgrun_spec_tokens_total{kind="accepted"}')
    assert drafted > 0 and 0 < accepted <= drafted                  # the server's default is on
    assert _metric(metrics, "sgrun_spec_acceptance_rate") == pytest.approx(accepted / drafted)
    assert _metric(metrics, "sgrun_spec_verify_steps_total") > 0
    off = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=40, temperature=0,
                                         extra_body={"speculative_ngram": False})
    assert off.choices[0].message.content == on.choices[0].message.content
    assert off.usage.completion_tokens == on.usage.completion_tokens
    after = httpx.get(server.url + "/metrics").text
    assert _metric(after, 'sgrun_spec_tokens_total{kind="drafted"}') == drafted   # off: nothing drafted
    text = client.completions.create(model=model, prompt="a b c d a b c d a b", max_tokens=8, temperature=0,
                                     extra_body={"speculative_ngram": True})
    assert text.choices[0].text
    assert _metric(httpx.get(server.url + "/metrics").text, 'sgrun_spec_tokens_total{kind="drafted"}') > drafted


def test_bad_option_is_a_400_naming_the_field(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    model = client.models.list().data[0].id
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=4,
                                       extra_body={"speculative_ngram": "yes"})
    assert "speculative_ngram" in str(err.value)
    r = httpx.post(server.url + "/generate", json={"text": "Hi", "sampling_params": {"speculative_ngram": 3}})
    assert r.status_code == 400 and "speculative_ngram" in r.text
    r = httpx.post(server.url + "/generate", json={"text": "a b a b a", "sampling_params": {
        "speculative_ngram": True, "max_new_tokens": 6, "temperature": 0}})
    assert r.status_code == 200 and r.json()["text"]
