"""Issue 9's reproductions against a real uvicorn server on loopback, each answered with its
4xx naming the field the client sent (or its correct output), and the edge: nesting, body
size limits (declared and chunked), no paths or tracebacks in any response, served model
names, request ids on 5xx, and the metrics that count refusals and aborts."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import httpx
import pytest

from server_fixtures import model_fixture, server_fixture

from sgrun.server.app import build_app
from server_thread import ServerThread
from sgrun.server.errors import internal_error, scrub

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
HUGE = 18446744073709551615


server = server_fixture(max_body_bytes=256 * 1024)
model = model_fixture()


def error_of(resp: httpx.Response, status: int, param: str | None = None) -> dict:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"], err
    if param is not None:
        assert err["param"] == param, err
    assert "Traceback" not in err["message"] and "/sgrun/" not in err["message"], err
    return err


def post(server, path: str, body) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=60)


def test_overflowing_top_k_is_a_400_and_innocent_requests_finish(server, model, engine):
    innocent = {"model": model, "prompt": "The capital of France is", "max_tokens": 6, "temperature": 0}

    async def run():
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as c:
            good = [asyncio.create_task(c.post("/v1/completions", json=innocent)) for _ in range(4)]
            await asyncio.sleep(0.05)
            bad = await asyncio.gather(
                c.post("/v1/completions", json={**innocent, "temperature": 1, "top_k": HUGE}),
                c.post("/v1/chat/completions", json={"model": model, "messages": QUESTION, "max_tokens": 4,
                                                     "temperature": 1, "top_k": HUGE}),
                c.post("/generate", json={"text": "Hello", "sampling_params": {"max_new_tokens": 4,
                                                                               "temperature": 1, "top_k": HUGE}}))
            return bad, await asyncio.gather(*good)

    bad, good = asyncio.run(run())
    for r, param in zip(bad, ["top_k", "top_k", "sampling_params.top_k"]):
        error_of(r, 400, param)
    texts = {r.json()["choices"][0]["text"] for r in good}
    assert all(r.status_code == 200 for r in good) and len(texts) == 1


def test_seed_overflow_and_native_type_confusion(server, model):
    error_of(post(server, "/v1/chat/completions", {"model": model, "messages": QUESTION, "max_tokens": 2,
                                                   "temperature": 1, "seed": HUGE, "n": 2}), 400, "seed")
    ok = post(server, "/v1/chat/completions", {"model": model, "messages": QUESTION, "max_tokens": 2,
                                               "temperature": 1, "seed": (1 << 63) - 1, "n": 2})
    assert ok.status_code == 200 and len(ok.json()["choices"]) == 2
    for field, value in [("stop_token_ids", 5), ("logit_bias", [1, 2]), ("skip_special_tokens", "no"),
                         ("top_k", 1.5), ("n", True), ("temperature", "hot"), ("seed", -1), ("stop", [""]),
                         ("stop", ["x"] * 17), ("stop", ["y" * 600]), ("logit_bias", {"5": "x"}),
                         ("logit_bias", {"99999999": 1}), ("choices", [""]), ("choices", []),
                         ("ignore_eos", 1), ("max_new_tokens", -1), ("regex", 5), ("json_schema", 7),
                         ("min_p", 2), ("frequency_penalty", 2.5), ("no_such_field", 1)]:
        body = {"text": "Hi", "sampling_params": {"max_new_tokens": 2, field: value}}
        error_of(post(server, "/generate", body), 400, f"sampling_params.{field}")
    # A number JSON cannot hold in a double: msgspec refuses it, naming the object it is in.
    resp = httpx.post(server.url + "/generate", headers={"content-type": "application/json"},
                      content=b'{"text": "Hi", "sampling_params": {"frequency_penalty": 1e999}}')
    error_of(resp, 400, "sampling_params")


def test_deep_nesting_is_a_400_on_every_endpoint(server, model):
    deep = "[" * 5000 + "]" * 5000
    bodies = {"/v1/chat/completions": '{"model": "%s", "messages": %s}' % (model, deep),
              "/v1/completions": '{"model": "%s", "prompt": "a", "json_schema": {"x": %s}}' % (model, deep),
              "/generate": '{"text": "a", "sampling_params": {"json_schema": %s}}' % deep}
    for path, body in bodies.items():
        r = httpx.post(server.url + path, content=body, headers={"content-type": "application/json"})
        assert error_of(r, 400)["code"] in ("nesting_too_deep", "invalid_type"), r.text
    schema: dict = {"type": "string"}
    for _ in range(200):
        schema = {"type": "object", "properties": {"a": schema}}
    r = post(server, "/v1/chat/completions", {"model": model, "messages": QUESTION, "max_tokens": 2,
                                              "response_format": {"type": "json_schema",
                                                                  "json_schema": {"name": "x", "schema": schema}}})
    assert error_of(r, 400)["code"] == "nesting_too_deep"


def test_broken_tool_schema_and_bad_constraints_are_400s(server, model):
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "required": 7}}}
    error_of(post(server, "/v1/chat/completions", {"model": model, "messages": QUESTION, "max_tokens": 4,
                                                   "tools": [tool], "tool_choice": "required"}),
             400, "tools[0].function.parameters")
    error_of(post(server, "/generate", {"text": "a", "sampling_params": {"ebnf": "start: ("}}), 400,
             "sampling_params.ebnf")
    error_of(post(server, "/generate", {"text": "a", "sampling_params": {"grammar": "start: ("}}), 400,
             "sampling_params.grammar")
    error_of(post(server, "/v1/completions", {"model": model, "prompt": "a", "ebnf": "start: ("}), 400, "ebnf")
    # Accepted on main before, though their language is empty or the schema is invalid.
    for body, param in [({"ebnf": "start: start"}, "ebnf"), ({"ebnf": "start: "}, "ebnf"),
                        ({"json_schema": {"type": "string", "minLength": -1}}, "json_schema"),
                        ({"json_schema": {"type": "string", "maxLength": "5"}}, "json_schema")]:
        error_of(post(server, "/v1/completions", {"model": model, "prompt": "a", "max_tokens": 2, **body}), 400, param)
    error_of(post(server, "/generate", {"text": "a", "sampling_params": {"ebnf": "start: start"}}), 400,
             "sampling_params.ebnf")
    started = time.perf_counter()
    r = post(server, "/v1/chat/completions", {"model": model, "messages": QUESTION, "max_tokens": 4,
                                              "response_format": {"type": "json_schema", "json_schema": {
                                                  "name": "n", "schema": {"type": "integer", "minimum": 0,
                                                                          "maximum": 1e18, "multipleOf": 7}}}})
    assert r.status_code in (200, 400) and time.perf_counter() - started < 20, r.text


def test_error_fields_are_the_clients_names(server, model):
    error_of(post(server, "/v1/chat/completions", {"messages": QUESTION}), 400, "model")
    error_of(post(server, "/v1/chat/completions", {"model": model}), 400, "messages")
    error_of(post(server, "/v1/chat/completions", {"model": model, "messages": [{"content": "x"}]}), 400,
             "messages[0].role")
    long = "word " * 9000
    error_of(post(server, "/generate", {"text": long, "sampling_params": {"max_new_tokens": 2}}), 400, "text")
    error_of(post(server, "/generate", {"input_ids": [1, -5], "sampling_params": {}}), 400, "input_ids")
    error_of(post(server, "/generate", {"input_ids": [[1, 2], [10 ** 9]]}), 400, "input_ids")
    error_of(post(server, "/generate", {"text": "a", "return_logprob": True, "top_logprobs_num": 99}), 400,
             "top_logprobs_num")
    error_of(post(server, "/v1/chat/completions", {"model": model, "messages": QUESTION, "logprobs": True,
                                                   "top_logprobs": 21}), 400, "top_logprobs")
    error_of(post(server, "/v1/completions", {"model": model, "prompt": "a", "logprobs": 21}), 400, "logprobs")
    error_of(post(server, "/v1/completions", {"model": model, "prompt": [1, 99999999]}), 400, "prompt")
    error_of(post(server, "/v1/completions", {"model": model, "prompt": "a", "n": 65}), 400, "n")
    error_of(post(server, "/v1/completions", {"model": model, "prompt": "a", "max_tokens": 10 ** 9}), 400,
             "max_tokens")
    error_of(post(server, "/score", {"text": "a", "continuations": [[99999999]]}), 400, "continuations[0]")
    error_of(post(server, "/score", {"input_ids": [-1], "continuations": ["x"]}), 400, "input_ids")
    error_of(post(server, "/score", {"text": "", "continuations": ["x"]}), 400, "text")
    error_of(post(server, "/score", {"text": "a", "continuations": ["b"] * 300}), 400, "continuations")


def test_body_limits_declared_and_chunked(server, model):
    big = b'{"model": "m", "prompt": "' + b"x" * (600 * 1024) + b'"}'
    r = httpx.post(server.url + "/v1/completions", content=big, headers={"content-type": "application/json"})
    assert error_of(r, 413)["code"] == "request_too_large"

    def chunks():
        for i in range(0, len(big), 16 * 1024):
            yield big[i:i + 16 * 1024]
    r = httpx.post(server.url + "/v1/completions", content=chunks(), headers={"content-type": "application/json"})
    assert r.request.headers.get("transfer-encoding") == "chunked"
    assert error_of(r, 413)["code"] == "request_too_large"
    # A raw client that sends its whole oversized body before reading still reads the 413.
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                  b"content-length: %d\r\n\r\n" % len(big))
        s.sendall(big)
        reply = b""
        while b"\r\n\r\n" not in reply:
            data = s.recv(65536)
            assert data, "connection closed before the response"
            reply += data
    assert reply.startswith(b"HTTP/1.1 413")
    assert httpx.get(server.url + "/health").status_code == 200


def _raw_head(server, headers: bytes, timeout: float) -> tuple[bytes, float]:
    """Send a request's head only, on a raw socket, and read the reply's head without sending any
    body: (the bytes read, seconds until they came)."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        start = time.perf_counter()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n" + headers
                  + b"\r\n")
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            data = s.recv(65536)
            assert data, f"connection closed before the response: {reply!r}"
            reply += data
        return reply, time.perf_counter() - start


def test_a_declared_oversized_body_gets_its_413_when_the_headers_arrive(server):
    """Content-Length over --max-body-bytes: the 413 comes before any body is sent, to a client
    that waits and to one that sends `Expect: 100-continue` (which is never told to continue);
    well before the guard's idle drain ends (guards.DRAIN_IDLE_S)."""
    from sgrun.server.guards import DRAIN_IDLE_S
    limit = 256 * 1024
    for extra in (b"", b"expect: 100-continue\r\n"):
        reply, seconds = _raw_head(server, b"content-length: %d\r\n" % (limit + 10) + extra, timeout=30)
        assert reply.startswith(b"HTTP/1.1 413"), reply
        assert b"100 Continue" not in reply
        head, _, body = reply.partition(b"\r\n\r\n")
        assert b"connection: close" in head.lower() and b"x-request-id" in head.lower()
        err = json.loads(body)["error"]
        assert err["code"] == "request_too_large" and str(limit) in err["message"]
        assert seconds < DRAIN_IDLE_S, seconds
    # At the limit the body is awaited and read as usual.
    ok = httpx.post(server.url + "/v1/completions", content=b"{" + b" " * (limit - 2) + b"}",
                    headers={"content-type": "application/json"})
    assert ok.status_code == 400   # read and parsed (no model field), not refused for its size
    assert httpx.get(server.url + "/health").status_code == 200


def test_no_paths_and_served_names(server, model, engine):
    assert "/" not in model and model == engine.model_name
    info = httpx.get(server.url + "/model_info").json()
    assert not any(isinstance(v, str) and v.startswith("/") for v in info.values()), info
    err = error_of(post(server, "/v1/chat/completions", {"model": str(engine.model_path), "messages": QUESTION}),
                   404, "model")
    assert str(engine.model_path) not in err["message"] and "/root" not in err["message"]
    assert httpx.get(server.url + "/v1/models/" + str(engine.model_path)).status_code == 404
    named = build_app(engine, served_model_names=["smol"])
    with ServerThread(named) as srv:
        assert httpx.get(srv.url + "/v1/models").json()["data"][0]["id"] == "smol"
        r = httpx.post(srv.url + "/v1/chat/completions", json={"model": "smol", "messages": QUESTION,
                                                                "max_tokens": 2})
        assert r.status_code == 200 and r.json()["model"] == "smol"
        assert httpx.get(srv.url + "/model_info").json()["model_name"] == "smol"
    with pytest.raises(Exception, match="not a file path"):
        build_app(engine, served_model_names=[str(engine.model_path)])


def test_5xx_says_what_failed_with_a_request_id_and_is_logged(server, engine, caplog, monkeypatch):
    err = internal_error("internal error in engine step: Traceback (most recent call last):\n  File "
                         "\"/work/x/sampler.py\", line 3\nValueError: boom", "req-1")
    assert "\n" not in err.message and "/work" not in err.message and "ValueError: boom" in err.message
    assert "req-1" in err.message and scrub("open /etc/passwd") == "open <path>"

    def explode(*args, **kwargs):
        raise RuntimeError("secret at /root/.cache/sgrun/x")
    monkeypatch.setattr(engine.tokenizer, "encode", explode)
    with caplog.at_level("ERROR", logger="sgrun.server"):
        r = post(server, "/tokenize", {"text": "hi"})
    e = error_of(r, 500)
    rid = r.headers["x-request-id"]
    assert rid in e["message"] and "/root" not in e["message"] and "secret" not in e["message"]
    assert any(rid in rec.getMessage() and rec.exc_info for rec in caplog.records)


def test_metrics_count_refusals_aborts_and_errors(server, model, engine):
    post(server, "/v1/chat/completions", {"model": model, "messages": QUESTION, "regex": "(unclosed"})
    with httpx.stream("POST", server.url + "/v1/completions", json={
            "model": model, "prompt": "Count:", "max_tokens": 400, "ignore_eos": True, "stream": True}) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                break
    deadline = time.monotonic() + 20
    while engine.stats()["running"] and time.monotonic() < deadline:
        time.sleep(0.05)
    text = httpx.get(server.url + "/metrics").text
    assert 'sgrun_constraint_refusals_total{kind="regex"}' in text
    assert 'sgrun_aborted_requests_total{cause="client_disconnect"}' in text
    line = next(l for l in text.splitlines() if l.startswith('sgrun_aborted_requests_total{cause="client_disconnect"}'))
    assert float(line.split()[-1]) >= 1
    for name in ("sgrun_preemptions_total", 'sgrun_errors_total{status="400"', "sgrun_constraint_compile_seconds_count",
                 'sgrun_aborted_requests_total{cause="error"}', 'sgrun_aborted_requests_total{cause="engine"}'):
        assert name in text, name
