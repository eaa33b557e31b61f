"""SGLang compatibility (docs/sglang-compat.md): SGLang-shaped programs (tests/sglang_programs.py)
on sgrun's Runtime and RuntimeEndpoint, and SGLang's own frontend client (`pip install --no-deps
sglang`, run in a subprocess: tests/sglang_client_run.py) against a real sgrun server on loopback.

The default run holds a few short programs per backend; `-m slow` runs the whole set on all three.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest
import sglang_programs
from server_fixtures import server_fixture

import sgrun

QUICK = ["multi_turn", "role_methods", "select", "fork_gather", "state_tools", "stream_logprobs"]
# Against SGLang's client, n > 1 is left out: its RuntimeEndpoint reads obj["text"] from the list
# that /generate answers for n > 1 (from SGLang's server as from sgrun's).
REAL_CLIENT_PROGRAMS = [name for name in sglang_programs.PROGRAMS if name != "n_samples"]


server = server_fixture()


@pytest.fixture(scope="module")
def runtime(shared_engine):
    return sgrun.Runtime(engine=shared_engine)


@pytest.fixture(scope="module")
def endpoint(server):
    backend = sgrun.RuntimeEndpoint(server.url)
    yield backend
    backend.close()


CLIENT_RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sglang_client_run.py")


def run_sglang_client(url: str, programs: list[str], timeout: float = 900) -> dict[str, str]:
    """SGLang's RuntimeEndpoint running `programs` against `url`; program -> "ok" or the failure."""
    proc = subprocess.run([sys.executable, CLIENT_RUNNER, url, *programs], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULTS ")]
    assert lines, f"the SGLang client run failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULTS "):])


def assert_all_ok(results: dict[str, str], programs: list[str]) -> None:
    failed = {name: results.get(name, "not run") for name in programs if results.get(name) != "ok"}
    assert not failed, "\n\n".join(f"{name}:\n{why}" for name, why in failed.items())


@pytest.mark.parametrize("program", QUICK)
@pytest.mark.parametrize("backend_name", ["runtime", "endpoint"])
def test_quick_programs_on_sgrun_backends(request, backend_name, program):
    sglang_programs.PROGRAMS[program](sgrun, request.getfixturevalue(backend_name))


def test_quick_programs_on_sglangs_own_client(server):
    programs = ["role_methods", "error_reporting", "select"]   # select runs after the failed program
    results = run_sglang_client(server.url, programs)
    # SmolLM2's template is ChatML; SGLang's client chooses its template from model_path alone.
    assert results["_chat_template"] == "chatml"
    assert_all_ok(results, programs)


@pytest.mark.slow
@pytest.mark.parametrize("program", sorted(set(sglang_programs.PROGRAMS) - set(QUICK)))
@pytest.mark.parametrize("backend_name", ["runtime", "endpoint"])
def test_all_programs_on_sgrun_backends(request, backend_name, program):
    sglang_programs.PROGRAMS[program](sgrun, request.getfixturevalue(backend_name))


@pytest.mark.slow
def test_all_programs_on_sglangs_own_client(server):
    assert_all_ok(run_sglang_client(server.url, REAL_CLIENT_PROGRAMS, timeout=3000), REAL_CLIENT_PROGRAMS)


def test_model_path_names_the_model_and_its_chat_layout(server):
    info = httpx.get(server.url + "/get_model_info").json()
    assert "/" not in info["model_path"] and not info["model_path"].endswith(".gguf")
    assert info["model_path"].endswith("(chatml-tinyllama)")
    server_info = httpx.get(server.url + "/server_info").json()
    assert server_info["chat_template"] == "chatml" and server_info["context_length"] > 0


def test_sglang_wire_fields(server):
    """What SGLang's client sends and reads, field by field, on the real server."""
    url = server.url + "/generate"
    prompt = "The capital of France is"
    # Prefill only (cache_prefix, select, fork): max_new_tokens 0 generates nothing.
    cached = httpx.post(url, json={"text": prompt, "sampling_params": {"max_new_tokens": 0}}).json()
    assert cached["text"] == "" and cached["meta_info"]["completion_tokens"] == 0
    n_prompt = cached["meta_info"]["prompt_tokens"]
    # select: prompt logprobs from logprob_start_len, [logprob, id, text] with text on request.
    scored = httpx.post(url, json={
        "text": [prompt + " Paris", prompt + " Rome"], "return_logprob": True, "return_text_in_logprobs": True,
        "logprob_start_len": n_prompt - 2, "sampling_params": {"max_new_tokens": 0, "temperature": 0}}).json()
    assert isinstance(scored, list) and len(scored) == 2
    for result in scored:
        entries = result["meta_info"]["input_token_logprobs"]
        assert len(entries) == result["meta_info"]["prompt_tokens"] - (n_prompt - 2)
        assert all(isinstance(e[0], float) and isinstance(e[1], int) and isinstance(e[2], str) for e in entries)
        assert result["meta_info"]["output_token_logprobs"] == []
    paris, rome = (sum(e[0] for e in r["meta_info"]["input_token_logprobs"]) for r in scored)
    assert paris > rome
    # The fields SGLang's client always sends are accepted; finish_reason is SGLang's dict.
    out = httpx.post(url, json={"text": prompt, "sampling_params": {
        "max_new_tokens": 4, "min_new_tokens": 2, "stop_regex": [], "spaces_between_special_tokens": True,
        "skip_special_tokens": True, "temperature": 0, "top_k": -1, "stop": [], "stop_token_ids": [],
        "n": 1, "regex": None, "json_schema": None}}).json()
    assert out["meta_info"]["finish_reason"] in ({"type": "length", "length": 4},
                                                 {"type": "stop", "matched": out["meta_info"].get("matched_stop")})
    # Streaming: cumulative text (SGLang's client slices data["text"][pos:]) and logprob counts.
    events = []
    with httpx.stream("POST", url, json={"text": prompt, "stream": True, "return_logprob": True,
                                         "sampling_params": {"max_new_tokens": 6, "temperature": 0}}) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    pos, sliced = 0, ""
    for ev in events:
        sliced += ev["text"][pos:]
        pos = len(ev["text"])
        assert ev["meta_info"]["output_token_logprobs_length"] == ev["meta_info"]["completion_tokens"]
    assert sliced == events[-1]["text"] == "".join(ev["delta"] for ev in events)
    # The endpoints SGLang's client and sglang.Runtime call.
    assert httpx.get(server.url + "/health_generate").status_code == 200
    joined = httpx.post(server.url + "/concate_and_append_request", json={"src_rids": ["a", "b"], "dst_rid": "c"})
    assert joined.status_code == 200 and joined.json()["success"] is True
    bad = httpx.post(server.url + "/concate_and_append_request", json={"src_rids": "a", "dst_rid": "c"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "src_rids"
    past = httpx.post(url, json={"text": prompt, "return_logprob": True, "logprob_start_len": 999,
                                 "sampling_params": {"max_new_tokens": 0}})
    assert past.status_code == 400 and past.json()["error"]["param"] == "logprob_start_len"
