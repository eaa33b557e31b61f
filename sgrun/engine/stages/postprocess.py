"""Postprocess: what happens to a sampled token after the model runner chose it.

token -> constraint advance -> stop tokens / stop strings / length -> jump-forward over forced
text -> detokenize -> finish reason -> one StreamEvent for the request's handle. A step may hand
a sequence several tokens (a verified speculative draft); they are accepted one by one and the
rest is dropped once one of them finishes the sequence. Scoring sequences take their own small
path: their log-probabilities are appended, and they finish once every token is computed.

`accept` returns the event and calls nothing back: a sequence it finished has its
`finish_reason` set, and the step (step.py) hands it to the scheduler, which frees its pages,
before the event is emitted.
"""

from __future__ import annotations

import re
import time

import torch

from sgrun.constrain.jump_forward import jump_forward
from sgrun.engine.state.sampled import SampledTokens, Scores
from sgrun.engine.state.outputs import StreamEvent, TokenLogprob
from sgrun.engine.parts.sampler import token_logprobs
from sgrun.engine.state.scoring import ScoringSequence
from sgrun.engine.state.sequence import Sequence
from sgrun.models.tokenizer import Tokenizer


STOP_REGEX_WINDOW = 512   # characters of output text a stop_regex is searched in


class Postprocessor:
    def __init__(self, tokenizer: Tokenizer, max_context: int):
        self.tokenizer = tokenizer
        self.max_context = max_context
        self._eos = frozenset(tokenizer.eos_token_ids)

    def accept(self, seq: Sequence, out: SampledTokens | Scores) -> StreamEvent | None:
        """Take this step's output for `seq`; returns its event (not yet emitted), or None for a
        scoring chunk that does not end its sequence (a scoring request has one event, the last)."""
        if isinstance(out, Scores):
            return self._accept_scores(seq, out)   # type: ignore[arg-type]
        return self._accept_tokens(seq, out)

    # --- scoring ----------------------------------------------------------------------------
    @staticmethod
    def _accept_scores(seq: ScoringSequence, out: Scores) -> StreamEvent | None:
        seq.scores.extend(out.logprobs)
        if not out.done:
            return None
        seq.output.finish_reason = "stop"
        return StreamEvent(0, "", [], [], "stop")

    # --- generation -------------------------------------------------------------------------
    def _accept_tokens(self, seq: Sequence, out: SampledTokens) -> StreamEvent:
        if seq.output.first_token_time is None:
            seq.output.first_token_time = time.monotonic()
        p = seq.params
        new_tokens: list[int] = []
        new_logprobs: list[TokenLogprob] = self._forced_logprobs(seq, out)
        if seq.constraint.finish_after_logprobs is not None:
            # This forward only computed the forced tokens' log-probabilities; its sample is not ours.
            return self._end(seq, seq.constraint.finish_after_logprobs, [], new_logprobs)
        finish: str | None = None
        for i, token in enumerate(out.tokens):
            seq.tokens.append(token)
            new_tokens.append(token)
            if out.logprobs is not None:
                new_logprobs.append(self._token_logprob(token, out.logprobs.chosen[i], out.logprobs.top[i]))
            finish = self._stop_token(seq, token)
            rebuilt = False
            if finish is None and seq.constraint.matcher is not None and p.jump_forward:
                # After every accepted token, as a one-token step would: a jump drops the rest of
                # a verified draft (the plain path would have appended the forced text there).
                rebuilt = self._jump_forward(seq, _sampling_row(out, i), new_tokens, new_logprobs,
                                             _sampling_row(out, i + 1) if i + 1 < len(out.tokens) else None)
                if rebuilt and seq.constraint.matcher.is_terminated():
                    finish = "stop"
            if not rebuilt:
                seq.detok.update(seq.output_ids)
            if seq.num_output < p.min_new_tokens:
                seq.detok.pass_stop_search()   # stop strings before min_new_tokens do not count
            elif finish is None and (stop := seq.detok.find_stop()) is not None:
                finish, seq.output.matched_stop = "stop", stop
            elif finish is None and p.stop_regex and (pattern := self._stop_regex(seq)) is not None:
                finish, seq.output.matched_stop = "stop", pattern
            if finish is None and (seq.num_output >= p.max_new_tokens or len(seq.tokens) >= self.max_context):
                finish = "length"
            if finish is not None or rebuilt:
                break
        if finish is not None and seq.constraint.logprobs_pending_from is not None:
            # Forced tokens still lack their log-probabilities: one more forward computes them.
            seq.constraint.finish_after_logprobs, finish = finish, None
        return self._end(seq, finish, new_tokens, new_logprobs)

    @staticmethod
    def _end(seq: Sequence, finish: str | None, new_tokens: list[int], new_logprobs: list[TokenLogprob]) -> StreamEvent:
        seq.output.logprobs.extend(new_logprobs)
        delta = seq.detok.take_delta(final=finish is not None)
        seq.output.finish_reason = finish
        return StreamEvent(seq.index, delta, new_tokens, new_logprobs, finish, seq.output.matched_stop)

    def _forced_logprobs(self, seq: Sequence, out: SampledTokens) -> list[TokenLogprob]:
        """Log-probabilities of the tokens jump-forward appended last step, from this step's forward."""
        start = seq.constraint.logprobs_pending_from
        if start is None:
            return []
        seq.constraint.logprobs_pending_from = None
        got = out.forced or []
        forced = seq.tokens[start:start + len(got)]
        return [self._token_logprob(t, lp, top) for t, (lp, top) in zip(forced, got)]

    def _stop_token(self, seq: Sequence, token: int) -> str | None:
        """Advance the constraint over `token`; "stop" if the token ends the sequence."""
        if seq.constraint.matcher is not None and not seq.constraint.matcher.advance(token):
            raise RuntimeError(f"constraint rejected sampled token {token}")
        # Before min_new_tokens, EOS / stop ids are masked; a verified draft may still hold one.
        early = seq.num_output < seq.params.min_new_tokens
        if token in self._eos and not seq.params.ignore_eos and not early:
            seq.output.matched_stop = token
            return "stop"
        if token in seq.params.stop_token_ids and not early:
            seq.output.matched_stop = token
            return "stop"
        if seq.constraint.matcher is not None and seq.constraint.matcher.is_terminated():
            return "stop"
        return None

    def _stop_regex(self, seq: Sequence) -> str | None:
        """The first stop_regex found in the output's tail (SGLang keeps the matched text in the
        output and reports the pattern as what matched). The window bounds the work per token;
        a match found here ends within it, since every earlier step searched already."""
        tail = seq.detok.text[-STOP_REGEX_WINDOW:]
        for pattern in seq.params.stop_regex:
            if re.search(pattern, tail):
                return pattern
        return None

    def _jump_forward(self, seq: Sequence, row_logprobs: torch.Tensor | None, new_tokens: list[int],
                      new_logprobs: list[TokenLogprob], next_row_logprobs: torch.Tensor | None = None) -> bool:
        """Append the text the constraint forces (retokenised, constrain/jump_forward.py) to this
        step's `new_tokens` / `new_logprobs`. Only the token sampled this step may be retokenised
        (tokens already reported never change, so usage and logprobs match the final sequence).
        A replacement of the sampled token is predicted by the same row, so its log-probability
        is known now; the other forced tokens get theirs from the next forward. Returns whether
        anything was appended (the detokenizer is then rebuilt).
        `next_row_logprobs`: in a verify step, the row after the accepted token's, where that token
        was a draft token and so already computed: the next forward starts after it and would not
        predict the first forced token again, so its log-probability comes from this row."""
        want = seq.params.logprobs
        jump = jump_forward(seq.constraint.matcher, self.tokenizer, seq.output_ids, seq.params.max_new_tokens - seq.num_output,
                            max_rollback=1)
        if jump is None:
            return False
        first_new = len(seq.tokens) - jump.rollback
        seq.retokenize_tail(jump.rollback, jump.tokens)
        if jump.rollback:
            del new_tokens[-jump.rollback:]
            if want is not None:
                del new_logprobs[-jump.rollback:]
        new_tokens += jump.tokens
        pending = first_new
        if want is not None:
            row = row_logprobs if jump.rollback else next_row_logprobs
            if row is not None:
                t = jump.tokens[0]
                (lp, top), = token_logprobs(row[None], [t], want, normalised=True)
                new_logprobs.append(self._token_logprob(t, lp, top))
                pending += 1
            if pending < len(seq.tokens):
                seq.constraint.logprobs_pending_from = pending
        seq.detok.rebuild(seq.output_ids)
        return True

    def _token_logprob(self, token: int, lp: float, top: list[tuple[int, float]]) -> TokenLogprob:
        dec = self.tokenizer.decode
        return TokenLogprob(token, dec([token]), lp, [(t, dec([t]), v) for t, v in top])


def _sampling_row(out: SampledTokens, i: int) -> torch.Tensor | None:
    """The log-softmax row that predicted token i (one row per token), where kept."""
    return out.logprobs.row(i) if out.logprobs is not None else None
