"""Postprocess (engine/stages/postprocess.py) without a model: a step that hands a sequence several
tokens (as a verified speculative draft will) accepts them one by one and stops at the first
that finishes the sequence; events and finish reasons are as for one token per step. `accept`
returns the event and calls nothing back: the step pipeline emits it and frees what finished."""

from __future__ import annotations

import sgrun
from sgrun.engine.state.detokenizer import IncrementalDetokenizer
from sgrun.engine.state.sampled import SampledTokens
from sgrun.engine.stages.postprocess import Postprocessor
from sgrun.engine.state.sequence import Sequence


class Collecting:
    """A Postprocessor whose returned events are collected, as the step pipeline would emit them."""

    def __init__(self, tokenizer, events, finished):
        self.post, self.events, self.finished = Postprocessor(tokenizer, max_context=1024), events, finished

    def accept(self, seq, out):
        event = self.post.accept(seq, out)
        self.events.append(event)
        if event.finish_reason is not None:
            assert seq.output.finish_reason == event.finish_reason   # what the step hands the scheduler
            self.finished.append(event.finish_reason)


def make(tokenizer, params: sgrun.SamplingParams):
    events, finished = [], []
    prompt = tokenizer.encode("Hello")
    seq = Sequence(seq_id=0, request_id="r", index=0, tokens=list(prompt), prompt_len=len(prompt), params=params,
                   detok=IncrementalDetokenizer(tokenizer, prompt, True, params.stop), emit=events.append)
    return seq, Collecting(tokenizer, events, finished), events, finished


def test_several_tokens_in_one_step_equal_one_per_step(tokenizer):
    ids = tokenizer.encode(" there, how are you", add_bos=False)
    params = sgrun.SamplingParams(max_new_tokens=50)
    one, post1, ev1, _ = make(tokenizer, params)
    for t in ids:
        post1.accept(one, SampledTokens([t]))
    many, post2, ev2, _ = make(tokenizer, params)
    post2.accept(many, SampledTokens(ids))
    assert many.output_ids == one.output_ids == ids
    assert many.detok.text == one.detok.text == " there, how are you"
    assert len(ev2) == 1 and ev2[0].token_ids == ids and ev2[0].text == "".join(e.text for e in ev1)


def test_tokens_after_a_stop_token_or_the_length_limit_are_dropped(tokenizer):
    eos = sorted(tokenizer.eos_token_ids)[0]
    a, b = tokenizer.encode(" yes no", add_bos=False)[:2]
    seq, post, events, finished = make(tokenizer, sgrun.SamplingParams(max_new_tokens=50))
    post.accept(seq, SampledTokens([a, eos, b]))
    assert seq.output_ids == [a, eos] and finished == ["stop"] and events[-1].finish_reason == "stop"
    assert events[-1].matched_stop == eos
    seq, post, events, finished = make(tokenizer, sgrun.SamplingParams(max_new_tokens=2))
    post.accept(seq, SampledTokens([a, b, a]))
    assert seq.output_ids == [a, b] and finished == ["length"]


def test_a_stop_string_inside_the_accepted_tokens_cuts_there(tokenizer):
    ids = tokenizer.encode(" one two three four", add_bos=False)
    seq, post, events, finished = make(tokenizer, sgrun.SamplingParams(max_new_tokens=50, stop=[" two"]))
    post.accept(seq, SampledTokens(ids))
    assert finished == ["stop"] and seq.output.matched_stop == " two"
    assert seq.detok.text == " one" and events[-1].text == " one"
    assert len(seq.output_ids) < len(ids)   # the tokens after the stop string were not accepted
