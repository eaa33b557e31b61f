"""Radix prefix cache: shared prefixes are prefilled once and outputs never change. In the
default configuration (int4, dtype auto), except the eviction stress test: its 50 prompts reuse
cached prefixes at every split point, and bf16 rounding of a prefill in pieces flips a near-tie
there (one of 50 under the default configuration), so it checks exactness in dense float32."""

from __future__ import annotations

import random

import pytest

import sgrun

GREEDY = sgrun.SamplingParams(max_new_tokens=12, temperature=0)


@pytest.fixture(scope="module")
def no_cache(model_path):
    with sgrun.Engine(str(model_path), memory_gb=0.5, enable_prefix_cache=False) as eng:
        yield eng


@pytest.fixture(scope="module")
def long_system(tokenizer):
    rng = random.Random(0)
    words = ["tool", "search", "weather", "calendar", "query", "result", "schema", "string", "number", "agent"]
    text = "You are an agent with these tools. " + " ".join(rng.choice(words) for _ in range(1600))
    ids = tokenizer.encode(text)
    return tokenizer.decode(ids[:1500])


def chat(tokenizer, system, question):
    return tokenizer.apply_chat_template([{"role": "system", "content": system}, {"role": "user", "content": question}])


def test_second_request_prefills_only_its_suffix(engine, no_cache, long_system):
    tok = engine.tokenizer
    engine.flush_cache()
    first = engine.generate([chat(tok, long_system, "Which tool finds the weather?")], GREEDY)[0]
    before = engine.stats()["tokens_computed"]
    second = engine.generate([chat(tok, long_system, "What does the calendar tool do?")], GREEDY)[0]
    computed = engine.stats()["tokens_computed"] - before
    shared = 0
    while first.prompt_token_ids[shared] == second.prompt_token_ids[shared]:
        shared += 1
    page = engine.pool.page_size
    assert shared > 1500
    assert second.cached_tokens == (shared // page) * page
    # Only the uncached suffix of the prompt plus one token per decode step went through the model.
    assert computed == second.prompt_tokens - second.cached_tokens + second.completion_tokens - 1
    assert second.token_ids == no_cache.generate([chat(tok, long_system, "What does the calendar tool do?")], GREEDY)[0].token_ids
    assert first.cached_tokens == 0 and engine.stats()["cache_hit_rate"] > 0


def test_branching_mid_page_and_multi_turn(engine, no_cache, tokenizer):
    engine.flush_cache()
    base = "A shared preamble that several requests repeat word for word before they diverge. " * 6
    ids = tokenizer.encode(base)
    page = engine.pool.page_size
    cut = (len(ids) // page) * page + page // 2          # diverge in the middle of a page
    stem = ids[:cut]
    prompts = [stem + tokenizer.encode(f" Branch {x}: tell me about {x}.") for x in ("apples", "rivers", "stars")]
    outs = [engine.generate([p], GREEDY)[0] for p in prompts]
    ref = no_cache.generate(prompts, GREEDY)
    assert [o.token_ids for o in outs] == [r.token_ids for r in ref]
    assert outs[0].cached_tokens == 0
    assert outs[1].cached_tokens == outs[2].cached_tokens == (cut // page) * page
    # Multi-turn: each turn's prompt extends the previous prompt and answer.
    messages = [{"role": "user", "content": "Give me a word."}]
    prev_total = 0
    for turn in range(3):
        prompt = tokenizer.apply_chat_template(messages)
        out = engine.generate([prompt], GREEDY)[0]
        expect = no_cache.generate([prompt], GREEDY)[0]
        assert out.token_ids == expect.token_ids
        if turn:
            # everything up to the previous answer (page-aligned) came from the cache
            assert out.cached_tokens >= ((prev_total - 1) // page) * page - page
            assert out.cached_tokens > 0
        prev_total = len(out.prompt_token_ids) + len(out.token_ids)
        messages += [{"role": "assistant", "content": out.text}, {"role": "user", "content": "Another one."}]


def test_concurrent_requests_share_a_prefix_being_decoded(engine, tokenizer):
    engine.flush_cache()
    prefix = tokenizer.encode("Shared context for the concurrent test. " * 20)
    first = engine.submit(prefix + tokenizer.encode(" One."), sgrun.SamplingParams(max_new_tokens=30, temperature=0, ignore_eos=True))
    next(iter(first))  # its prefill is done and cached; it is still decoding
    second = engine.submit(prefix + tokenizer.encode(" Two."), GREEDY).result()
    first.result()
    assert second.cached_tokens >= (len(prefix) // engine.pool.page_size) * engine.pool.page_size - engine.pool.page_size


def test_eviction_under_a_small_pool_keeps_everything_consistent(model_path, float32_engine, tokenizer):
    rng = random.Random(1)
    prefixes = [tokenizer.encode(f"Document {i}: " + " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "omega"])
                                                                for _ in range(150))) for i in range(10)]
    prompts = [p + tokenizer.encode(f" Question {j}: summarise.") for j in range(5) for p in prefixes]
    params = sgrun.SamplingParams(max_new_tokens=4, temperature=0)
    expected = []
    for p in prompts:   # each prompt prefilled whole: nothing cached from the one before
        float32_engine.flush_cache()
        expected.append(float32_engine.generate([p], params)[0].token_ids)
    # float32 pages, as float32_engine's (the claim is the cache's consistency, not the pages' rounding)
    with sgrun.Engine(str(model_path), dtype="float32", quantization="none", max_pages=80, page_size=16, max_running=8,
                      debug_checks=True, kv_cache_dtype="float32") as eng:  # the checker runs after every engine step
        outs = eng.generate(prompts, params)
        assert [o.token_ids for o in outs] == expected
        stats = eng.stats()
        assert stats["cached_tokens_total"] > 0 and stats["pages_cached"] > 0
        assert eng.run_on_loop(eng.request_pages) == 0
        eng.flush_cache()
        assert eng.stats()["pages_free"] == eng.pool.num_pages


def test_cache_capacity_fraction_bounds_cached_pages(model_path, tokenizer):
    with sgrun.Engine(str(model_path), max_pages=64, cache_fraction=0.25, debug_checks=True) as eng:
        for i in range(4):
            eng.generate([tokenizer.encode(f"Prompt number {i}. " * 40)], sgrun.SamplingParams(max_new_tokens=2, temperature=0))
        assert eng.stats()["pages_cached"] <= 16


def test_n_samples_prefill_their_prompt_once(engine, tokenizer):
    engine.flush_cache()
    prompt = tokenizer.encode("A prompt long enough to span several pages of the KV pool. " * 8)
    before = engine.stats()["tokens_computed"]
    out = engine.generate([prompt], sgrun.SamplingParams(max_new_tokens=4, temperature=1.0, n=3, seed=1))[0]
    computed = engine.stats()["tokens_computed"] - before
    page = engine.pool.page_size
    shared = ((len(prompt) - 1) // page) * page
    # Sample 0 prefills the prompt; samples 1 and 2 reuse it from the cache.
    assert computed == 3 * len(prompt) - 2 * shared + 3 * (4 - 1)
    assert len(out.outputs) == 3 and out.prompt_tokens == len(prompt)
