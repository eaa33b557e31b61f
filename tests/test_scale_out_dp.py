"""`sgrun serve --dp 2`: two real replicas (SmolLM2, the default int4 weights and dtype) behind
the cache-aware router on loopback, driven with the official openai client."""

import subprocess
import sys
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sgrun.server.replicas import free_port

SYSTEM = "You are a terse assistant for a shipping company. " * 12


@pytest.fixture(scope="module")
def dp_server(tmp_path_factory):
    port = free_port()
    log = open(tmp_path_factory.mktemp("dp") / "serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "sgrun.cli", "serve", "--dp", "2", "--port", str(port),
                             "--max-running", "8", "--log-level", "warning"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        assert proc.poll() is None, open(log.name).read()[-3000:]
        try:
            health = httpx.get(f"{url}/health", timeout=1).json()
            if len(health["replicas"]) == 2 and all(r["healthy"] for r in health["replicas"]):
                break
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        assert time.monotonic() < deadline, "the router and its replicas did not start"
        time.sleep(0.5)
    yield url, proc
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=120)


def _replica_metric(url: str, name: str, **labels: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                out[s.labels["replica"]] = s.value
    return out


def test_streaming_and_n_samples_through_the_router(dp_server):
    url, _ = dp_server
    client = _client(url)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Name a colour."}]
    whole = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=messages, max_tokens=12,
                                           temperature=0)
    stream = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=messages, max_tokens=12,
                                            temperature=0, stream=True)
    streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert streamed == whole.choices[0].message.content and streamed
    many = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=messages, max_tokens=6,
                                          temperature=1.0, n=2, seed=3)
    assert [c.index for c in many.choices] == [0, 1]
    # The same system prompt went to the same replica each time, and was served from its cache.
    again = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=messages, max_tokens=2,
                                           temperature=0)
    assert again.usage.prompt_tokens_details.cached_tokens >= 100
    routed = [r["routed"] for r in httpx.get(f"{url}/health").json()["replicas"]]
    assert sorted(routed) == [0, 4]


def test_distinct_prefixes_spread_over_both_replicas(dp_server):
    url, _ = dp_server
    client = _client(url)
    before = [r["routed"] for r in httpx.get(f"{url}/health").json()["replicas"]]
    for topic in ("astronomy", "baking", "chess", "diving"):
        client.completions.create(model="SmolLM2-135M-Instruct", prompt=f"A long note on {topic}: " * 30,
                                  max_tokens=1, temperature=0)
    after = [r["routed"] for r in httpx.get(f"{url}/health").json()["replicas"]]
    assert all(a > b for a, b in zip(after, before)), (before, after)


def test_disconnect_aborts_the_request_on_its_replica(dp_server):
    url, _ = dp_server
    body = {"model": "SmolLM2-135M-Instruct", "prompt": "Count slowly:", "max_tokens": 3000, "ignore_eos": True,
            "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as resp:
        assert resp.status_code == 200
        chunks = 0
        for line in resp.iter_lines():
            chunks += line.startswith("data: ")
            if chunks >= 3:
                break
    # 3,000 tokens would take minutes; an aborted request leaves within seconds, pages freed.
    deadline = time.monotonic() + 20
    while True:
        running = _replica_metric(url, "sgrun_requests_running")
        in_use = _replica_metric(url, "sgrun_kv_pages", state="in_use")
        if sum(running.values()) == 0 and sum(in_use.values()) == 0:
            break
        assert time.monotonic() < deadline, (running, in_use)
        time.sleep(0.25)
    assert set(in_use) == {"0", "1"}


def test_a_dead_replica_leaves_rotation_and_its_request_fails_clearly(dp_server):
    url, proc = dp_server
    children = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                               text=True).stdout.split()]
    assert len(children) == 2
    body = {"model": "SmolLM2-135M-Instruct", "prompt": "Tell a long story:", "max_tokens": 3000,
            "ignore_eos": True, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as resp:
        lines = resp.iter_lines()
        next(line for line in lines if line.startswith("data: "))
        busy = [i for i, r in enumerate(httpx.get(f"{url}/health").json()["replicas"]) if r["in_flight"]]
        assert len(busy) == 1
        port = httpx.get(f"{url}/health").json()["replicas"][busy[0]]["url"].rsplit(":", 1)[1]
        victim = next(pid for pid in children if f"--port {port} " in open(f"/proc/{pid}/cmdline").read()
                      .replace("\0", " "))
        subprocess.run(["kill", "-9", str(victim)], check=True)
        rest = "\n".join(lines)
    assert "replica_failed" in rest and rest.rstrip().endswith("data: [DONE]")
    health = httpx.get(f"{url}/health").json()
    assert [r["healthy"] for r in health["replicas"]].count(True) == 1
    # The survivor takes every new request.
    client = _client(url)
    for i in range(3):
        out = client.completions.create(model="SmolLM2-135M-Instruct", prompt=f"Hello {i}", max_tokens=2)
        assert out.choices[0].text is not None
