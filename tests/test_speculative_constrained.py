"""Constraints inside speculative decoding, on the real SmolLM2 weights: n-gram drafts are cut at
the first token the constraint (or its budget) forbids, verifying a draft advances the matcher
and rolls it back exactly, greedy outputs are token for token those without speculation under
json_schema, regex, grammar, a structural tag and a tight budget, and seeded constrained
sampling keeps its distribution (two-sample chi-square)."""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch

import sgrun
from sgrun.constrain import compile_constraint
from sgrun.constrain.budget import budgeted_matcher
from sgrun.constrain.shortest_completion import shortest_completion
from sgrun.engine.parts.ngram_draft import allowed_prefix
from sgrun.engine.state.sequence import ConstraintState, DraftState
from sgrun.engine.parts.sampling_rows import _fill_masks   # the verify rows' masks (one builder for every step)
from test_speculative import _both, _chi2_critical   # the same request off and on; the chi-square bound

ORDER = {"order_id": "A-1042", "customer": "Alice Smith", "email": "alice.smith@example.com",
         "city": "Paris", "tracking": "JD014600006281234567"}
ORDER_SCHEMA = {"type": "object", "properties": {k: {"type": "string"} for k in ORDER},
                "required": list(ORDER), "additionalProperties": False}
EMAIL_REGEX = r"[a-z]+(\.[a-z]+)?@example\.com"
CSV_GRAMMAR = r"""
start: row ("\n" row)~1..3
row: FIELD ("," FIELD)*
FIELD: /[A-Za-z0-9 .@-]{1,30}/
"""
TAG = {"structures": [{"begin": "<order>", "schema": ORDER_SCHEMA, "end": "</order>"}], "triggers": ["<order>"]}


class _Seq:
    """What allowed_prefix / _fill_masks read of a sequence."""
    def __init__(self, matcher, draft, jump_forward=False):
        self.constraint, self.speculation = ConstraintState(matcher), DraftState(draft)
        self.params = sgrun.SamplingParams(jump_forward=jump_forward)


def test_a_forbidden_draft_token_ends_the_draft_and_rollback_is_exact(tokenizer):
    c = compile_constraint(tokenizer, json_schema=ORDER_SCHEMA)
    enc = lambda s: tokenizer.encode(s, add_bos=False)   # noqa: E731
    good = enc('{"order_id":"A-1042","customer":"Al')
    bad = enc('{"order_id":"A-1042","client')   # a key the schema does not have
    m = c.matcher()
    assert allowed_prefix(_Seq(m, []), good) == good and m.num_advanced == 0
    cut = allowed_prefix(_Seq(m, []), bad)
    assert cut == bad[:len(cut)] and len(cut) < len(bad) and m.num_advanced == 0
    assert c.matches_bytes(b"") is False
    # The verify rows' masks: row j is the mask after the draft's first j tokens, and the matcher
    # is where it was afterwards.
    m.advance(good[0])
    state = m.state
    rows = torch.zeros(len(good), c.table.words, dtype=torch.int32)
    _fill_masks(_Seq(m, good[1:]), rows)
    assert m.state == state and m.num_advanced == 1
    probe = c.matcher()
    probe.advance(good[0])
    for j, token in enumerate(good[1:]):
        expect = torch.zeros(c.table.words, dtype=torch.int32)
        probe.fill_bitmask(expect)
        assert torch.equal(rows[j], expect)
        probe.advance(token)


def test_the_budget_also_ends_a_draft(tokenizer):
    """Inside the steering window, a draft token after which no valid ending fits ends the draft."""
    c = compile_constraint(tokenizer, json_schema=ORDER_SCHEMA)
    need = int(shortest_completion(c).tokens_needed(c.initial_state))
    draft = tokenizer.encode(json.dumps(ORDER, separators=(",", ":")), add_bos=False)
    m = budgeted_matcher(c, need + 2)()
    cut = allowed_prefix(_Seq(m, []), draft)
    assert 0 < len(cut) < len(draft) and m.num_advanced == 0
    for t in cut:
        assert m.advance(t)
    assert shortest_completion(c).tokens_needed(m.state) <= m.tokens_left


@pytest.mark.parametrize("kind", ["json_schema", "json_schema_jump", "regex", "grammar", "structural_tag", "budget"])
def test_greedy_outputs_identical_with_speculation_on_and_off(engine, chat_prompt, kind):
    tool = json.dumps(ORDER)
    ask = {"regex": "Give the customer's email address only.", "grammar": "Write the order as CSV lines: key,value.",
           "structural_tag": "Repeat the order inside <order> and </order> tags."}.get(kind, "Repeat it as JSON.")
    prompt = chat_prompt(f"Tool result of get_order:\n{tool}\n\n{ask}")
    kw: dict = dict(max_new_tokens=48, temperature=0, jump_forward=kind == "json_schema_jump")
    if kind.startswith("json_schema"):
        kw["json_schema"] = ORDER_SCHEMA
    elif kind == "regex":
        kw["regex"] = EMAIL_REGEX
    elif kind == "grammar":
        kw["grammar"] = CSV_GRAMMAR
    elif kind == "structural_tag":
        kw["structural_tag"] = TAG
    else:   # a budget tight enough that the steering masks from the first token
        c = compile_constraint(engine.tokenizer, json_schema=ORDER_SCHEMA)
        kw.update(json_schema=ORDER_SCHEMA, max_new_tokens=int(shortest_completion(c).tokens_needed(c.initial_state)) + 6)
    before = engine.stats()
    off, on = _both(engine, prompt, **kw)
    after = engine.stats()
    assert on.token_ids == off.token_ids and on.text == off.text and on.finish_reason == off.finish_reason
    assert after["spec_draft_tokens"] > before["spec_draft_tokens"], "no draft was verified"
    if kind.startswith("json_schema") or kind == "budget":
        jsonschema.validate(json.loads(on.text), ORDER_SCHEMA)
        assert on.finish_reason == "stop"



UPDATE_TOOL = {"type": "function", "function": {
    "name": "update_order", "description": "Update an order's shipping record",
    "parameters": {"type": "object", "properties": {
        "order_id": {"type": "string"}, "email": {"type": "string"}, "tracking": {"type": "string"},
        "carrier": {"type": "string", "enum": ["DHL", "UPS", "FedEx"]}},
        "required": ["order_id", "email", "tracking", "carrier"], "additionalProperties": False}}}


@pytest.mark.parametrize("kind", ["json_schema", "tool_call"])
def test_logprobs_stay_aligned_when_jump_forward_follows_an_accepted_draft_token(engine, tokenizer, chat_prompt, kind):
    """Jump-forward after a verified draft token (its K/V already computed): the first forced
    token's log-probability comes from the verify step's next row, as no later forward predicts it
    again, and K/V the step computed for draft tokens the jump replaced or dropped is not kept.
    Both went wrong, so later logprob entries described the token before their own
    (bench_speculative.py's tool-call turn, 7 December 2026: 58 entries for 60 tokens). The
    schema case met the second, the tool call the first."""
    kw: dict = dict(max_new_tokens=48, temperature=0, jump_forward=True, logprobs=2)
    if kind == "json_schema":
        prompt = chat_prompt(f"Tool result of get_order:\n{json.dumps(ORDER)}\n\nRepeat it as JSON.")
        kw["json_schema"] = ORDER_SCHEMA
    else:
        prompt = tokenizer.apply_chat_template([
            {"role": "system", "content": "You are an operations agent. Tool results are given verbatim."},
            {"role": "user", "content": f"Tool result of get_order:\n{json.dumps(ORDER)}\n\nNow call update_order "
                                        f"with this order's id, the customer's email, its tracking number and carrier "
                                        f"DHL. Tools: {json.dumps([UPDATE_TOOL])}"}], add_generation_prompt=True)
        kw.update(max_new_tokens=60, tool_calls={"format": "hermes", "tools": [UPDATE_TOOL], "mode": "required",
                                                 "parallel": False})
    before = engine.stats()
    off, on = _both(engine, prompt, **kw)
    assert engine.stats()["spec_draft_tokens"] > before["spec_draft_tokens"], "no draft was verified"
    for out in (off, on):
        assert len(out.logprobs) == len(out.token_ids)
        assert [lp.token_id for lp in out.logprobs] == out.token_ids
        # Each reported log-probability is the model's for that token after exactly the reported
        # tokens: a fresh prefill scores them alike, within what decode, verify and prefill rows'
        # rounding moves them (up to 0.18 nats measured here, off and on alike); an entry that
        # describes another token, or K/V left from a replaced one, is off by nats.
        scored = engine.score(prompt, [out.token_ids])[0]
        assert max(abs(lp.logprob - s) for lp, s in zip(out.logprobs, scored)) < 0.5


@pytest.mark.slow
def test_seeded_constrained_sampling_keeps_its_distribution(engine):
    """400 seeded samples under a regex over three colour words after a repetitive prefix (so
    drafts are proposed and often accepted), with and without speculation: the two empirical
    distributions of the outputs agree (two-sample chi-square, p < 0.001 bound)."""
    prompt = "red blue green red blue green red blue green red blue green"
    pattern = r"( (red|blue|green)){4}"
    counts = []
    for spec in (False, True):
        before = engine.stats()
        c: dict[str, int] = {}
        for batch in range(8):
            params = sgrun.SamplingParams(max_new_tokens=12, temperature=1.0, n=50, regex=pattern, jump_forward=False,
                                          seed=1000 * batch + (500 if spec else 0), speculative_ngram=spec)
            for o in engine.generate(prompt, params)[0].outputs:
                c[o.text] = c.get(o.text, 0) + 1
        counts.append(c)
        after = engine.stats()
    assert after["spec_accepted_tokens"] - before["spec_accepted_tokens"] > 50
    keys = set(counts[0]) | set(counts[1])
    big = [k for k in keys if counts[0].get(k, 0) + counts[1].get(k, 0) >= 10]
    a = [counts[0].get(k, 0) for k in big] + [400 - sum(counts[0].get(k, 0) for k in big)]
    b = [counts[1].get(k, 0) for k in big] + [400 - sum(counts[1].get(k, 0) for k in big)]
    chi2 = sum((x - y) ** 2 / (x + y) for x, y in zip(a, b) if x + y > 0)
    df = len(big)
    assert df >= 2 and chi2 < _chi2_critical(df), (chi2, df, a, b)
