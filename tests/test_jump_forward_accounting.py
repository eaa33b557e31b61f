"""Accounting under jump-forward, at the engine: reported tokens are exactly the final
sequence's tokens (never one that jump-forward replaced), counts stay within max_new_tokens (the
output still closing validly there), and forced tokens carry the model's own log-probabilities
(and top alternatives), equal to a teacher-forced score of the same sequence."""

from __future__ import annotations

import json

import pytest
from engine_numerics import logprob_tolerance

from sgrun.constrain import compile_constraint
from sgrun.constrain.shortest_completion import shortest_completion
from sgrun.engine.state.sampling_params import SamplingParams

SCHEMA = {"type": "object", "properties": {"a_rather_long_property_name": {"type": "integer"},
                                           "another_quite_long_property_name": {"enum": ["yes", "no"]}},
          "required": ["a_rather_long_property_name", "another_quite_long_property_name"]}


@pytest.mark.parametrize("slack", [0, 3, None])
def test_forced_tokens_are_reported_exactly(engine, chat_prompt, slack):
    """Budgets of exactly the shortest instance, a little more (the budget steering and jump-
    forward both at work near the end), and plenty (a budget below the shortest is cut, or refused
    under strict_budget: tests/test_constrain_budget.py)."""
    prompt = chat_prompt("Give me a JSON object.")
    constraint = compile_constraint(engine.tokenizer, json_schema=SCHEMA)
    shortest = int(shortest_completion(constraint).tokens_needed(constraint.initial_state))
    max_new_tokens = 64 if slack is None else shortest + slack
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0, json_schema=SCHEMA, logprobs=3)
    events = []
    handle = engine.submit(prompt, params)
    for ev in handle:
        events.append(ev)
    out = handle.result().outputs[0]
    streamed_ids = [t for ev in events for t in ev.token_ids]
    streamed_lps = [lp for ev in events for lp in ev.logprobs]
    assert streamed_ids == out.token_ids and len(out.token_ids) <= max_new_tokens
    assert [lp.token_id for lp in streamed_lps] == out.token_ids == [lp.token_id for lp in out.logprobs]
    assert "".join(ev.text for ev in events) == out.text == engine.tokenizer.decode(out.token_ids)
    assert out.finish_reason == "stop"
    json.loads(out.text)
    # Every token's logprob is the model's: a teacher-forced pass over the same tokens agrees.
    scored = engine.score(prompt, [out.token_ids])[0]
    assert len(scored) == len(out.token_ids)
    tolerance = logprob_tolerance(engine)   # the decode and the teacher-forced prefill round differently
    for lp, ref in zip(out.logprobs, scored):
        assert lp.logprob == pytest.approx(ref, **tolerance), (lp.token, lp.logprob, ref)
        assert len(lp.top) == 3 and lp.top[0][2] >= lp.logprob - 1e-4
    forced = sum(1 for ev in events for _ in ev.token_ids) - sum(1 for ev in events if ev.token_ids)
    assert forced > 0, "the schema's long keys should have been jumped over"
