"""Postprocess: what happens to a sampled token after the model runner chose it.

token -> constraint advance -> stop tokens / stop strings / length -> jump-forward over forced
text -> detokenize -> finish -> one StreamEvent to the request's handle. A step may hand a
sequence several tokens (a verified speculative draft); they are accepted one by one and the
rest is dropped once one of them finishes the sequence. Scoring sequences take their own small
path: their log-probabilities are appended, and they finish once every token is computed.
"""

from __future__ import annotations

import time
from typing import Callable

from sgrun.constrain.jump_forward import jump_forward
from sgrun.engine.model_runner import SampledTokens, Scores
from sgrun.engine.outputs import StreamEvent, TokenLogprob
from sgrun.engine.scoring import ScoringSequence
from sgrun.engine.sequence import Sequence
from sgrun.models.tokenizer import Tokenizer


class Postprocessor:
    def __init__(self, tokenizer: Tokenizer, max_context: int, finish: Callable[[Sequence, str], None]):
        self.tokenizer = tokenizer
        self.max_context = max_context
        self._finish = finish      # the engine's: releases the sequence's pages, closes its request
        self._eos = frozenset(tokenizer.eos_token_ids)

    def accept(self, seq: Sequence, out: SampledTokens | Scores) -> None:
        if isinstance(out, Scores):
            self._accept_scores(seq, out)   # type: ignore[arg-type]
        else:
            self._accept_tokens(seq, out)

    # --- scoring ----------------------------------------------------------------------------
    def _accept_scores(self, seq: ScoringSequence, out: Scores) -> None:
        seq.scores.extend(out.logprobs)
        if seq.num_computed == len(seq.tokens):
            self._finish(seq, "stop")
            seq.emit(StreamEvent(0, "", [], [], "stop"))

    # --- generation -------------------------------------------------------------------------
    def _accept_tokens(self, seq: Sequence, out: SampledTokens) -> None:
        if seq.first_token_time is None:
            seq.first_token_time = time.monotonic()
        p = seq.params
        new_tokens: list[int] = []
        new_logprobs: list[TokenLogprob] = []
        finish: str | None = None
        for i, token in enumerate(out.tokens):
            seq.tokens.append(token)
            new_tokens.append(token)
            if out.logprobs is not None:
                new_logprobs.append(self._token_logprob(token, out.logprobs[i], out.top[i] if out.top else []))
            finish = self._stop_token(seq, token)
            rebuilt = False
            if finish is None and i == len(out.tokens) - 1 and seq.matcher is not None and p.jump_forward:
                jumped = self._jump_forward(seq)
                if jumped:
                    rebuilt = True
                    new_tokens += jumped
                    if out.logprobs is not None:
                        new_logprobs += [TokenLogprob(t, self.tokenizer.decode([t]), 0.0) for t in jumped]
                    if seq.matcher.is_terminated():
                        finish = "stop"
            if not rebuilt:
                seq.detok.update(seq.output_ids)
            if finish is None and (stop := seq.detok.find_stop()) is not None:
                finish, seq.matched_stop = "stop", stop
            if finish is None and (seq.num_output >= p.max_new_tokens or len(seq.tokens) >= self.max_context):
                finish = "length"
            if finish is not None:
                break
        seq.logprobs.extend(new_logprobs)
        delta = seq.detok.take_delta(final=finish is not None)
        if finish is not None:
            self._finish(seq, finish)
        seq.emit(StreamEvent(seq.index, delta, new_tokens, new_logprobs, finish, seq.matched_stop))

    def _stop_token(self, seq: Sequence, token: int) -> str | None:
        """Advance the constraint over `token`; "stop" if the token ends the sequence."""
        if seq.matcher is not None and not seq.matcher.advance(token):
            raise RuntimeError(f"constraint rejected sampled token {token}")
        if token in self._eos and not seq.params.ignore_eos:
            seq.matched_stop = token
            return "stop"
        if token in seq.params.stop_token_ids:
            seq.matched_stop = token
            return "stop"
        if seq.matcher is not None and seq.matcher.is_terminated():
            return "stop"
        return None

    def _jump_forward(self, seq: Sequence) -> list[int]:
        """Append the text the constraint forces (retokenised, constrain/jump_forward.py);
        returns the tokens added, after which the detokenizer has been rebuilt."""
        jump = jump_forward(seq.matcher, self.tokenizer, seq.output_ids, seq.params.max_new_tokens - seq.num_output)
        if jump is None:
            return []
        seq.retokenize_tail(jump.rollback, jump.tokens)
        seq.detok.rebuild(seq.output_ids)
        return jump.tokens

    def _token_logprob(self, token: int, lp: float, top: list[tuple[int, float]]) -> TokenLogprob:
        dec = self.tokenizer.decode
        return TokenLogprob(token, dec([token]), lp, [(t, dec([t]), v) for t, v in top])
