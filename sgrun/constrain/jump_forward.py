"""Jump-forward: when the constraint forces the next text, append it without sampling.

The forced text is appended as the tokens the tokenizer itself would produce for it: the last
few generated tokens are decoded together with the forced text and retokenised, so a token that
straddles the boundary (`"na` + `me"` -> `"name"`) comes out as the model would have seen it in
training. The matcher is rolled back over the replaced tokens and advanced over the new ones.

Works on anything with the tokenizer's `encode`/`decode` and the matcher's `forced_text`,
`advance`, `rollback`, so it is testable without a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

# At most this many already generated tokens are retokenised together with the forced text.
JUMP_FORWARD_TAIL = 4


class TextCodec(Protocol):
    def encode(self, text: str, add_bos: bool | None = None) -> list[int]: ...
    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str: ...


class ForcingMatcher(Protocol):
    def forced_text(self) -> str: ...
    def advance(self, token_id: int) -> bool: ...
    def rollback(self, num_tokens: int) -> None: ...


@dataclass(frozen=True)
class Jump:
    """Drop the last `rollback` output tokens and append `tokens` (the matcher already has)."""
    rollback: int
    tokens: list[int]


def jump_forward(matcher: ForcingMatcher, tokenizer: TextCodec, output_ids: list[int], budget: int,
                 max_rollback: int = JUMP_FORWARD_TAIL) -> Jump | None:
    """The jump the matcher's forced text allows after `output_ids`, at most `budget` tokens
    longer than now; None (matcher unchanged) if nothing is forced or the retokenised text does
    not fit the automaton token by token. At most `max_rollback` tokens are retokenised (the
    engine passes the tokens it has not reported yet, so a reported token is never replaced)."""
    forced = matcher.forced_text()
    if not forced or budget <= 0:
        return None
    tail = output_ids[-min(len(output_ids), max_rollback, JUMP_FORWARD_TAIL):] if max_rollback > 0 else []
    tail_text = tokenizer.decode(tail)
    if "\ufffd" in tail_text:   # the tail ends inside a character: do not retokenise it
        tail, tail_text = [], ""
    new_ids = tokenizer.encode(tail_text + forced, add_bos=False)
    keep = 0
    while keep < min(len(tail), len(new_ids)) and tail[keep] == new_ids[keep]:
        keep += 1
    additions = new_ids[keep:][:budget + len(tail) - keep]
    roll = len(tail) - keep
    if not additions or len(additions) <= roll:
        return None
    removed = tail[keep:]
    matcher.rollback(roll)
    advanced = 0
    for t in additions:
        if not matcher.advance(t):
            break
        advanced += 1
    if advanced < len(additions):
        # The retokenised text does not fit the automaton token by token: undo, no jump.
        matcher.rollback(advanced)
        for t in removed:
            matcher.advance(t)
        return None
    return Jump(roll, additions)
