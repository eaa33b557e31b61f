"""Overlap scheduling on the CPU (Engine(overlap=True)): the forward of step N+1 runs on the
device worker while the engine thread postprocesses step N, and the outputs must be exactly
the plain loop's — greedy, stop strings and EOS, jump-forward under a JSON schema, seeded
sampling with n > 1, and scoring (which drains the pipeline). Real SmolLM2 weights."""

from __future__ import annotations

import json

import pytest

import sgrun

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                           "population": {"type": "integer"}},
          "required": ["city", "population"], "additionalProperties": False}


@pytest.fixture(scope="module")
def overlapped(model_path):
    # float32 pages, as float32_engine's, which it is compared with (the claim is overlap = plain steps)
    with sgrun.Engine(str(model_path), dtype="float32", memory_gb=0.5, quantization="none", overlap=True,
                      debug_checks=True, kv_cache_dtype="float32") as eng:
        yield eng


@pytest.fixture(scope="module")
def requests(chat_prompt):
    qs = ["Name three colours.", "What is 2 + 2?", "Write a haiku about rain.", "Say hello.",
          "Describe a cat in one sentence."]
    prompts = [chat_prompt(q, system="Be brief. " * (i + 1)) for i, q in enumerate(qs)]
    params = [sgrun.SamplingParams(max_new_tokens=n, temperature=0.0) for n in (12, 5, 20, 3, 9)]
    params[2] = sgrun.SamplingParams(max_new_tokens=20, temperature=0.0, stop=["\n"])
    params.append(sgrun.SamplingParams(max_new_tokens=40, temperature=0.0, json_schema=SCHEMA))
    prompts.append(chat_prompt("Give a city and its population as JSON."))
    params.append(sgrun.SamplingParams(max_new_tokens=10, temperature=0.9, top_p=0.9, seed=7, n=2))
    prompts.append(chat_prompt("Invent a name."))
    return prompts, params


def _view(outs):
    return [[(c.token_ids, c.text, c.finish_reason) for c in o.outputs] for o in outs]


def test_overlap_outputs_equal_the_plain_loop(float32_engine, overlapped, requests):
    engine = float32_engine
    prompts, params = requests
    engine.flush_cache()
    plain = _view(engine.generate(prompts, params))
    over = _view(overlapped.generate(prompts, params))
    assert over == plain
    json.loads(over[5][0][1])                           # the constrained one is valid JSON
    assert {r for o in over for _, _, r in o} >= {"length", "stop"}
    assert overlapped.run_on_loop(overlapped.request_pages) == 0
    assert overlapped.startup_report()["overlap"] is True
    # It really overlapped: decode inputs were read on the device from the step still in flight,
    # and the steps after a finish were dropped.
    assert overlapped.runner.future_tokens > 50 and overlapped.pipeline.dropped > 0


def test_overlap_drains_for_scoring_and_aborts(float32_engine, overlapped, requests):
    engine = float32_engine
    prompts, _ = requests
    handle = overlapped.submit(prompts[0], sgrun.SamplingParams(max_new_tokens=200, temperature=0.0, ignore_eos=True))
    scores = overlapped.score(prompts[1], [" Four", " Five"])
    handle.abort()
    assert handle.result().outputs[0].finish_reason == "abort"
    # The scoring prefill shared batches with a decoding request here and not in `engine`: the
    # same model scores, up to float rounding of a different batch shape.
    expected = engine.score(prompts[1], [" Four", " Five"])
    assert [len(s) for s in scores] == [len(s) for s in expected]
    assert all(a == pytest.approx(b, abs=1e-4) for a, b in zip(scores, expected))
    assert overlapped.run_on_loop(overlapped.request_pages) == 0
