"""Incremental detokenization with stop strings.

Text is emitted only when it is complete UTF-8 (a token may end inside a character) and only
once it can no longer turn out to be the start of a stop string.
"""

from __future__ import annotations

from sgrun.models.tokenizer import Tokenizer

_CONTEXT = 5  # prompt tokens decoded along with the output so leading spaces come out right


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Tokenizer, prompt_ids: list[int], skip_special: bool, stop: list[str]):
        self.tok = tokenizer
        self.skip_special = skip_special
        self.stop = stop
        self.max_stop = max((len(s) for s in stop), default=0)
        self.context = list(prompt_ids[-_CONTEXT:])
        self.text = ""           # decoded output text so far (complete characters only)
        self.emitted = 0         # characters of `text` already handed out
        self.searched = 0        # stop strings were searched for in text[:searched]
        self._reset_offsets(len(self.context))

    def _reset_offsets(self, n: int) -> None:
        self.prefix_offset = max(0, n - _CONTEXT)
        self.read_offset = n

    def _decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=self.skip_special)

    def update(self, output_ids: list[int]) -> None:
        ids = self.context + output_ids
        prefix = self._decode(ids[self.prefix_offset:self.read_offset])
        full = self._decode(ids[self.prefix_offset:])
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            self.text += full[len(prefix):]
            self._reset_offsets(len(ids))

    def rebuild(self, output_ids: list[int]) -> None:
        """Recompute after the tail of the output was retokenised (same text, other ids)."""
        ids = self.context + output_ids
        self.text = self._decode(ids)[len(self._decode(self.context)):]
        self._reset_offsets(len(ids))

    def find_stop(self) -> str | None:
        """If a stop string occurs, cut the text before it and return it."""
        if not self.stop:
            return None
        start = max(0, self.searched - self.max_stop + 1)
        best: tuple[int, str] | None = None
        for s in self.stop:
            i = self.text.find(s, start)
            if i >= 0 and (best is None or i < best[0]):
                best = (i, s)
        self.searched = len(self.text)
        if best is None:
            return None
        self.text = self.text[:best[0]]
        return best[1]

    def pass_stop_search(self) -> None:
        """Treat the text so far as searched (min_new_tokens: stop strings in it do not count)."""
        self.searched = len(self.text)

    def take_delta(self, final: bool) -> str:
        end = len(self.text)
        if not final and self.stop:
            end -= self._held_back()
        end = max(end, self.emitted)
        delta = self.text[self.emitted:end]
        self.emitted = end
        return delta

    def _held_back(self) -> int:
        """Length of the longest suffix of text that is a proper prefix of some stop string."""
        text = self.text
        for k in range(min(self.max_stop - 1, len(text)), 0, -1):
            tail = text[-k:]
            if any(s.startswith(tail) for s in self.stop):
                return k
        return 0
