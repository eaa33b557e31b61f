"""A Sequence's constraint, speculation and output states are objects of their own
(sequence.py): each sample gets fresh ones, and the scheduler's and postprocessor's writes to
one sample never reach another's."""

from __future__ import annotations

import dataclasses

from sgrun.engine.state.sampling_params import SamplingParams
from sgrun.engine.state.scoring import ScoringSequence
from sgrun.engine.state.sequence import ConstraintState, DraftState, OutputState, Sequence


def _seq(i: int) -> Sequence:
    return Sequence(seq_id=i, request_id="r", index=i, tokens=[1, 2, 3], prompt_len=3, params=SamplingParams(),
                    detok=None, emit=lambda ev: None)


def test_each_sample_owns_its_states():
    a, b = _seq(0), _seq(1)
    a.speculation.draft.append(7)
    a.output.logprobs.append(None)   # type: ignore[arg-type]
    a.output.finish_reason = "stop"
    a.constraint.logprobs_pending_from = 3
    assert b.speculation.draft == [] and b.output.logprobs == [] and b.output.finish_reason is None
    assert b.constraint.logprobs_pending_from is None
    assert a.num_tokens == 4 and b.num_tokens == 3          # the draft counts toward what the scheduler plans
    assert a.token_slice(2, 4) == [3, 7]


def test_the_states_are_grouped_not_spread_over_the_sequence():
    own = {f.name for f in dataclasses.fields(Sequence)}
    for state in (ConstraintState, DraftState, OutputState):
        spread = {f.name for f in dataclasses.fields(state)} & own
        assert not spread, f"{state.__name__}'s fields are also Sequence's: {sorted(spread)}"
    assert {"constraint", "speculation", "output"} <= own
    scoring = ScoringSequence(seq_id=2, request_id="s", index=0, tokens=[1, 2], prompt_len=2,
                              params=SamplingParams(max_new_tokens=1), detok=None, emit=lambda ev: None)
    assert scoring.output.finish_reason is None and scoring.constraint.matcher is None
