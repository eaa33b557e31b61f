"""Scale-out through SGLang's gateway: `sgrun serve --dp 2` starts two real sgrun workers
(SmolLM2, the default weights) and smg with its cache-aware policy, all on loopback; the
official openai client streams through smg, and a shared prompt prefix sticks to one worker,
whose radix cache serves it (cached tokens there, none on the other worker). smg also reads
each worker's load report (/v1/loads), which its load-aware policies act on; with the settings
`--dp` passes it (gateway.DEFAULT_SMG_ARGS), a conversation's next turn goes to the worker that
holds its prefix although that worker's KV is over smg's default overload mark of 0.8."""

import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sgrun.child_process import free_port
from sgrun.server import gateway
from sgrun.server.loads import GenerationRate, load_snapshot

# Each worker's KV pool: about 1,200 tokens, so that one long conversation holds over 80% of it.
POOL_GB = "0.026"
SYSTEM = "You are a terse assistant for a shipping company. Answer in one short sentence. " * 10
QUESTIONS = ("Name a colour.", "Name a port city.", "Name a ship.", "Name a cargo.")


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory):
    port = free_port()
    log = open(tmp_path_factory.mktemp("smg") / "serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "sgrun.cli", "serve", "--dp", "2", "--host", "127.0.0.1",
                             "--port", str(port), "--max-running", "8", "--memory-gb", POOL_GB,
                             "--log-level", "warning",
                             # smg polls the loads every second instead of every 10 (the test waits on it)
                             "--gateway-arg=--load-monitor-interval", "--gateway-arg=1"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        assert proc.poll() is None, open(log.name).read()[-3000:]
        try:
            ready = httpx.get(f"{url}/readiness", timeout=1).json()
            if ready.get("healthy_workers") == 2:
                break
        except (httpx.HTTPError, ValueError):
            pass
        assert time.monotonic() < deadline, "smg and its two workers did not start"
        time.sleep(0.5)
    yield url
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _metric(worker_url: str, name: str) -> float:
    text = httpx.get(f"{worker_url}/metrics", timeout=10).text
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                return s.value
    raise AssertionError(f"{name} missing from the worker's /metrics")


def _cached_tokens(worker_url: str) -> float:
    return _metric(worker_url, "sgrun_cached_prompt_tokens_total")


def _agent_prompt(agent: int) -> str:
    words = "cargo manifest vessel harbour customs invoice pallet freight route tariff".split()
    return f"You are agent {agent}. " + " ".join(words[(i * agent) % len(words)] + str(i % 7) for i in range(120))


def test_a_shared_prefix_streams_through_smg_and_sticks_to_one_worker(gateway_url):
    workers = [w["url"] for w in httpx.get(f"{gateway_url}/workers", timeout=10).json()["workers"]]
    assert len(workers) == 2 and all(w.startswith("http://127.0.0.1:") for w in workers)
    client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key="none", max_retries=0, timeout=120)
    listed = [m.id for m in client.models.list().data]
    assert listed == ["SmolLM2-135M-Instruct.Q4_1"]
    cached = []
    for question in QUESTIONS:
        # The name a single `sgrun serve` accepts too: --dp registers it with smg as an alias.
        stream = client.chat.completions.create(
            model="SmolLM2-135M-Instruct", messages=[{"role": "system", "content": SYSTEM},
                                                     {"role": "user", "content": question}],
            max_tokens=6, temperature=0, stream=True, stream_options={"include_usage": True})
        text, usage = "", None
        for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
            usage = chunk.usage or usage
        assert text and usage is not None and usage.prompt_tokens > 150
        cached.append(usage.prompt_tokens_details.cached_tokens)
    # The first request fills one worker's cache; the next three find the system prompt there.
    assert cached[0] < 100 and all(c >= 150 for c in cached[1:]), cached
    per_worker = sorted(_cached_tokens(w) for w in workers)
    assert per_worker[0] == 0 and per_worker[1] >= sum(cached[1:]), per_worker


def test_smg_reads_each_workers_load_report(gateway_url):
    workers = [w["url"] for w in httpx.get(f"{gateway_url}/workers", timeout=10).json()["workers"]]
    for url in workers:
        report = httpx.get(f"{url}/v1/loads", params={"include": "core,disagg,queues,memory"}, timeout=10).json()
        (load,) = report["loads"]
        assert report["dp_rank_count"] == 1 and load["max_total_num_tokens"] > 0
        assert 0.0 <= load["token_usage"] < 1.0 and load["max_running_requests"] == 8
    # smg's own aggregate is built from those reports (it polls /v1/loads; 404 there leaves it blank).
    deadline = time.monotonic() + 30
    while True:
        seen = httpx.get(f"{gateway_url}/get_loads", timeout=10).json().get("loads", [])
        if {entry["worker"] for entry in seen if entry.get("max_total_num_tokens", 0) > 0} == set(workers):
            break
        assert time.monotonic() < deadline, seen
        time.sleep(1)


def test_new_conversations_go_to_the_replica_with_cache_room(gateway_url):
    """--dp replicas report KV usage counting their cached prefixes (loads.py, "cache") and smg
    polls it every second: a prompt no replica holds goes where the cache has room. After the
    first test one worker holds the shared system prompt; two new conversations then land one on
    each worker (reporting usage held by requests only, both read 0 when idle and smg picks at
    random)."""
    workers = [w["url"] for w in httpx.get(f"{gateway_url}/workers", timeout=10).json()["workers"]]
    client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key="none", max_retries=0, timeout=120)
    landed = []
    for agent in (3, 4):
        time.sleep(1.5)      # smg has polled since the last request finished: no since-poll work either side
        before = [_metric(w, "sgrun_engine_prompt_tokens_total") for w in workers]
        client.chat.completions.create(model="SmolLM2-135M-Instruct", max_tokens=2, temperature=0,
                                       messages=[{"role": "user", "content": _agent_prompt(agent)}])
        grew = [i for i, w in enumerate(workers) if _metric(w, "sgrun_engine_prompt_tokens_total") > before[i]]
        assert len(grew) == 1, grew
        landed.append(grew[0])
    assert landed[0] != landed[1], landed


def _smg_held_share(gateway_url: str) -> dict[str, float]:
    """The share of each worker's KV its requests hold, as smg last polled it (/get_loads)."""
    loads = httpx.get(f"{gateway_url}/get_loads", timeout=10).json().get("loads", [])
    return {e["worker"]: e.get("num_used_tokens", 0) / max(1, e.get("max_total_num_tokens", 0)) for e in loads}


def test_a_worker_over_smgs_default_kv_mark_still_gets_the_next_turn_of_its_conversation(gateway_url):
    """smg's overload protection leaves out a worker whose KV usage is >= 0.8 by default; `--dp`
    raises that mark to 1.0, so a second turn sharing the first's long prefix lands on the worker
    that holds it (and reuses it) while the first turn still holds over 80% of that worker's KV."""
    workers = [w["url"] for w in httpx.get(f"{gateway_url}/workers", timeout=10).json()["workers"]]
    pool = httpx.get(f"{workers[0]}/server_info", timeout=10).json()["max_total_num_tokens"]
    assert 1000 <= pool <= 1400, pool
    words = "cargo manifest vessel harbour customs invoice pallet freight route tariff".split()
    long_system = "You are agent 7. " + " ".join(words[i % len(words)] + str(i % 7) for i in range(460))
    client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key="none", max_retries=0, timeout=120)

    def turn(question: str, max_tokens: int):
        return client.chat.completions.create(
            model="SmolLM2-135M-Instruct", max_tokens=max_tokens, temperature=0, extra_body={"ignore_eos": True},
            messages=[{"role": "system", "content": long_system}, {"role": "user", "content": question}])

    first: dict = {}
    runner = threading.Thread(target=lambda: first.update(r=turn("Which berth is free?", 60)))
    runner.start()
    try:
        deadline = time.monotonic() + 60
        while max(_smg_held_share(gateway_url).values(), default=0.0) < 0.8:     # smg has seen it over 0.8
            assert runner.is_alive() and time.monotonic() < deadline, _smg_held_share(gateway_url)
            time.sleep(0.2)
        second = turn("Which crane is free?", 4)
    finally:
        runner.join(120)
    prompt = first["r"].usage.prompt_tokens
    assert 0.75 * pool <= prompt < pool, (prompt, pool)
    # The second turn reused the first's prefix: it went to the same worker.
    assert second.usage.prompt_tokens_details.cached_tokens >= prompt - 32, second.usage


def test_load_snapshot_reports_queue_and_kv_pressure():
    stats = {"running": 3, "waiting": 2, "waiting_tokens": 900, "pages_total": 100, "pages_in_use": 25,
             "page_size": 16, "cache_hit_rate": 0.5}
    load = load_snapshot(stats, max_running=8, gen_throughput=12.5)
    assert load["num_total_reqs"] == 5 and load["num_waiting_uncached_tokens"] == 900
    assert load["max_total_num_tokens"] == 1600 and load["num_used_tokens"] == 400
    assert load["token_usage"] == 0.25 and load["gen_throughput"] == 12.5 and load["max_running_requests"] == 8


def test_the_cache_reading_counts_cached_prefixes_in_kv_usage_and_queued_work():
    # 25 pages held by requests, 65 kept by the radix cache, 10 free; 300 tokens queued for prefill.
    stats = {"pages_total": 100, "pages_in_use": 25, "pages_free": 10, "page_size": 16, "waiting_tokens": 300}
    load = load_snapshot(stats, max_running=8, gen_throughput=0.0, kv_usage="cache")
    assert load["token_usage"] == pytest.approx(0.9) and load["num_used_tokens"] == 400   # used: still held only
    # smg weighs a new prompt against the queued prefill plus the footprint it would evict into.
    assert load["num_waiting_uncached_tokens"] == 300 + 90 * 16
    full = load_snapshot({**stats, "pages_free": 0}, max_running=8, gen_throughput=0.0, kv_usage="cache")
    assert full["token_usage"] == 0.999      # a pool full of cache is not what smg's overload mark 1.0 means
    held = load_snapshot(stats, max_running=8, gen_throughput=0.0)          # held, the default
    assert held["token_usage"] == 0.25 and held["num_waiting_uncached_tokens"] == 300


def test_generation_rate_is_tokens_per_second_over_its_window():
    rate = GenerationRate(window_s=30.0)
    assert rate.update(0, now=100.0) == 0.0
    assert rate.update(50, now=110.0) == 5.0
    assert rate.update(150, now=120.0) == 7.5
    # Samples older than the window drop out: 10 s to 40 s, 300 - 50 tokens.
    assert rate.update(300, now=140.0) == pytest.approx(250 / 30)


def test_dp_without_smg_names_the_pip_line(monkeypatch):
    monkeypatch.setattr(gateway.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(gateway.GatewayError, match=r'pip install "sgrun\[gateway\]"'):
        gateway.require_smg()


def test_the_smg_command_line_carries_policy_metrics_host_aliases_and_body_limit():
    assert gateway.model_aliases("SmolLM2-135M-Instruct.Q4_1") == ["SmolLM2-135M-Instruct"]
    assert gateway.model_aliases("smollm2") == []
    cmd = gateway.smg_command(["http://127.0.0.1:1", "http://127.0.0.1:2"], host="127.0.0.1", port=3,
                              policy="round_robin", metrics_port=4, log_level="warning",
                              aliases={"short": "short.Q4_1"}, max_payload_bytes=1024,
                              extra=["--worker-overload-token-usage", "0.95"])
    assert cmd[1:4] == ["-m", "smg", "launch"]
    line = " ".join(cmd)
    assert "--worker-urls http://127.0.0.1:1 http://127.0.0.1:2 --policy round_robin" in line
    assert "--prometheus-host 127.0.0.1 --prometheus-port 4" in line and "--log-level warn" in line
    assert "--model-alias short=short.Q4_1" in line and "--max-payload-size 1024" in line
    # sgrun's settings for smg come before --gateway-arg, so a user's value (smg takes the last) wins.
    defaults = cmd.index("--worker-overload-token-usage")
    assert cmd[defaults:defaults + 2] == list(gateway.DEFAULT_SMG_ARGS[:2]) == ["--worker-overload-token-usage", "1.0"]
    assert cmd[-2:] == ["--worker-overload-token-usage", "0.95"]     # --gateway-arg, last
