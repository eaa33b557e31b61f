"""Scale-out through SGLang's gateway: `sgrun serve --dp 2` starts two real sgrun workers
(SmolLM2, the default weights) and smg with its cache-aware policy, all on loopback; the
official openai client streams through smg, and a shared prompt prefix sticks to one worker,
whose radix cache serves it (cached tokens there, none on the other worker). smg also reads
each worker's load report (/v1/loads), which its load-aware policies act on."""

import subprocess
import sys
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sgrun.child_process import free_port
from sgrun.server import gateway
from sgrun.server.loads import GenerationRate, load_snapshot

SYSTEM = "You are a terse assistant for a shipping company. Answer in one short sentence. " * 10
QUESTIONS = ("Name a colour.", "Name a port city.", "Name a ship.", "Name a cargo.")


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory):
    port = free_port()
    log = open(tmp_path_factory.mktemp("smg") / "serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "sgrun.cli", "serve", "--dp", "2", "--host", "127.0.0.1",
                             "--port", str(port), "--max-running", "8", "--log-level", "warning"],
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


def _cached_tokens(worker_url: str) -> float:
    text = httpx.get(f"{worker_url}/metrics", timeout=10).text
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "sgrun_cached_prompt_tokens_total":
                return s.value
    raise AssertionError("sgrun_cached_prompt_tokens_total missing from the worker's /metrics")


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


def test_load_snapshot_reports_queue_and_kv_pressure():
    stats = {"running": 3, "waiting": 2, "waiting_tokens": 900, "pages_total": 100, "pages_in_use": 25,
             "page_size": 16, "cache_hit_rate": 0.5}
    load = load_snapshot(stats, max_running=8, gen_throughput=12.5)
    assert load["num_total_reqs"] == 5 and load["num_waiting_uncached_tokens"] == 900
    assert load["max_total_num_tokens"] == 1600 and load["num_used_tokens"] == 400
    assert load["token_usage"] == 0.25 and load["gen_throughput"] == 12.5 and load["max_running_requests"] == 8


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
    assert cmd[-2:] == ["--worker-overload-token-usage", "0.95"]     # --gateway-arg, last
