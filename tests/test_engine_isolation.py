"""Isolation by construction (engine/state/isolation.py): a stage that fails on one request's input
ends that request alone, with an error event and its pages freed; every other request in the
batch finishes with the output it would have had alone."""

from __future__ import annotations

import pytest
import torch

import sgrun
from sgrun.engine.state.detokenizer import IncrementalDetokenizer

GREEDY = sgrun.SamplingParams(max_new_tokens=10, temperature=0, ignore_eos=True)
SEEDED = sgrun.SamplingParams(max_new_tokens=10, temperature=1.0, seed=11, ignore_eos=True)
# No near ties in the first 10 greedy tokens: alone, a 37-token prompt prefills on the int4 tiles; in
# the batch, on the dense GEMM, so a ~0.05-nat tie could flip ("Say hello." had one at token 2).
QUESTIONS = ["What is the capital of France?", "Name a colour.", "Count to five.", "Name a fruit."]
MARKER = "<stop-marker-for-a-failing-stage>"   # a stop string that marks the victim request


@pytest.fixture(scope="module")
def prompts(chat_prompt):
    return [chat_prompt(q) for q in QUESTIONS]


@pytest.fixture(scope="module")
def solo(shared_engine, prompts):
    """Each request alone: greedy for every prompt, plus one seeded sample of the first."""
    greedy = [shared_engine.generate([p], GREEDY)[0].token_ids for p in prompts]
    return greedy, shared_engine.generate([prompts[0]], SEEDED)[0].token_ids


def run_batch(engine, prompts, victim_prompt, victim_params, victim_constraint=None):
    """Submit the innocents around the victim so they share its batches; return the outputs."""
    before = engine.stats()["aborted_error"]
    handles = [engine.submit(p, GREEDY) for p in prompts[:2]]
    victim = engine.submit(victim_prompt, victim_params, constraint=victim_constraint)
    handles += [engine.submit(p, GREEDY) for p in prompts[2:]]
    seeded = engine.submit(prompts[0], SEEDED)
    outs = [h.result(timeout=300) for h in handles]
    bad = victim.result(timeout=300)
    seeded_out = seeded.result(timeout=300)   # before the pages check: it may finish last
    assert engine.stats()["aborted_error"] == before + 1
    assert engine.run_on_loop(engine.request_pages) == 0, "a request still holds KV pages"
    return outs, seeded_out, bad


def check(outs, seeded, bad, solo, stage):
    greedy, seeded_alone = solo
    for out, alone in zip(outs, greedy):
        assert out.error is None and out.finish_reason == "length"
        assert out.token_ids == alone
    assert seeded.error is None and seeded.token_ids == seeded_alone
    assert bad.finish_reason == "abort" and bad.error is not None and bad.error.startswith(f"{stage} failed")
    assert "Traceback" not in bad.error and "\n" not in bad.error


class RaisingMatcher:
    """A constraint matcher whose mask computation fails (as a hostile automaton might)."""

    def fill_bitmask(self, out_row: torch.Tensor) -> None:
        raise RuntimeError("automaton blew up")

    def advance(self, token_id: int) -> bool:
        return True

    def is_terminated(self) -> bool:
        return False

    def forced_text(self) -> str:
        return ""

    def rollback(self, num_tokens: int) -> None:
        pass


class RaisingConstraint:
    def matcher(self) -> RaisingMatcher:
        return RaisingMatcher()


def test_failing_constraint_mask_fails_only_its_request(engine, prompts, solo):
    outs, seeded, bad = run_batch(engine, prompts, prompts[1], GREEDY, RaisingConstraint())
    check(outs, seeded, bad, solo, "sampling")
    assert "automaton blew up" in bad.error


def test_failing_logit_bias_fails_only_its_request(engine, prompts, solo, monkeypatch):
    import sgrun.engine.stages.model_runner as model_runner
    real = model_runner.apply_logit_bias

    def biased(logits, params):
        if any(MARKER in p.stop for p in params):
            raise OverflowError("bias out of range")
        real(logits, params)

    monkeypatch.setattr(model_runner, "apply_logit_bias", biased)
    # The victim has a logit bias (of 0: no effect of its own), so alone too its rows take the path
    # that applies it; a greedy row with nothing to apply is drawn in place (draw_plain_greedy).
    outs, seeded, bad = run_batch(engine, prompts, prompts[2], GREEDY.replace(stop=[MARKER], logit_bias={0: 0.0}))
    check(outs, seeded, bad, solo, "sampling")


def test_failing_detokenizer_fails_only_its_request(engine, prompts, solo, monkeypatch):
    real = IncrementalDetokenizer.update

    def update(self, output_ids):
        if MARKER in self.stop and len(output_ids) >= 3:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
        real(self, output_ids)

    monkeypatch.setattr(IncrementalDetokenizer, "update", update)
    outs, seeded, bad = run_batch(engine, prompts, prompts[3], GREEDY.replace(stop=[MARKER]))
    check(outs, seeded, bad, solo, "postprocess")
    assert len(bad.token_ids) == 3   # it ran until its own stage failed


class ModelFailingOn:
    """The real model (or its compiled or C++-block twin), except that a forward containing `token` raises
    (a bad input row). Everything else is the wrapped object's."""

    def __init__(self, model, token: int):
        self.model, self.token = model, token

    def __getattr__(self, name):
        return getattr(self.model, name)

    def forward(self, input_ids, positions, attn, logit_rows):
        if (input_ids == self.token).any():
            raise IndexError("index out of range in self")
        return self.model.forward(input_ids, positions, attn, logit_rows)


def test_failing_forward_is_retried_without_the_request_that_caused_it(engine, prompts, solo, monkeypatch):
    poison = engine.tokenizer.encode(" zebra")[0]
    victim_ids = engine.tokenizer.encode(prompts[0]) + [poison]
    assert not any(poison in engine.tokenizer.encode(p) for p in prompts)
    monkeypatch.setattr(engine.runner, "model", ModelFailingOn(engine.runner.model, poison))
    for twin in ("compiled", "fused"):   # small batches run the compiled graphs or the C++ blocks
        if getattr(engine.runner, twin) is not None:
            monkeypatch.setattr(engine.runner, twin, ModelFailingOn(getattr(engine.runner, twin), poison))
    calls = engine.stats()["forward_calls"]
    outs, seeded, bad = run_batch(engine, prompts, victim_ids, GREEDY)
    check(outs, seeded, bad, solo, "forward")
    assert "index out of range" in bad.error
    assert engine.stats()["forward_calls"] > calls


def test_a_failing_sample_of_n_ends_the_whole_request_and_aborts_are_counted(engine, prompts):
    before = engine.stats()
    out = engine.submit(prompts[0], GREEDY.replace(n=2), constraint=RaisingConstraint()).result(timeout=300)
    assert [o.finish_reason for o in out.outputs] == ["abort", "abort"] and out.error.startswith("sampling failed")
    handle = engine.submit(prompts[1], GREEDY.replace(max_new_tokens=200))
    next(iter(handle))
    handle.abort()
    assert handle.result(timeout=300).finish_reason == "abort"
    after = engine.stats()
    assert after["aborted_error"] == before["aborted_error"] + 1
    assert after["aborted_client_disconnect"] == before["aborted_client_disconnect"] + 1
    assert after["aborted_engine"] == before["aborted_engine"]
    assert engine.run_on_loop(engine.request_pages) == 0
