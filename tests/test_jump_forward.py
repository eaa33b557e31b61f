"""Jump-forward retokenisation (constrain/jump_forward.py) without a model: a toy greedy
longest-match tokenizer and a matcher whose language is one fixed string (everything forced)."""

from __future__ import annotations

from sgrun.constrain.jump_forward import JUMP_FORWARD_TAIL, jump_forward

VOCAB = ['{', '"', 'n', 'a', 'm', 'e', ':', ' ', 't', 'r', 'u', '}', 'na', '"name', '":', ' true', '\x80']
IDS = {s: i for i, s in enumerate(VOCAB)}
TARGET = '{"name": true}'


class ToyTokenizer:
    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        out, i = [], 0
        while i < len(text):
            piece = max((s for s in VOCAB if text.startswith(s, i)), key=len)
            out.append(IDS[piece])
            i += len(piece)
        return out

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        # '\x80' stands for a byte token that ends inside a UTF-8 character.
        return "".join("\ufffd" if VOCAB[t] == "\x80" else VOCAB[t] for t in ids)


class FixedStringMatcher:
    """Accepts exactly TARGET; every continuation is forced. `banned` tokens are refused."""

    def __init__(self, banned: frozenset[int] = frozenset()):
        self.stack = [""]
        self.banned = banned

    def forced_text(self) -> str:
        return TARGET[len(self.stack[-1]):]

    def advance(self, token_id: int) -> bool:
        nxt = self.stack[-1] + VOCAB[token_id]
        if token_id in self.banned or not TARGET.startswith(nxt):
            return False
        self.stack.append(nxt)
        return True

    def rollback(self, num_tokens: int) -> None:
        del self.stack[len(self.stack) - num_tokens:]


def generated(matcher: FixedStringMatcher, pieces: list[str]) -> list[int]:
    ids = [IDS[p] for p in pieces]
    assert all(matcher.advance(t) for t in ids)
    return ids


def test_boundary_token_is_retokenised_as_the_tokenizer_would():
    tok, m = ToyTokenizer(), FixedStringMatcher()
    out = generated(m, ['{', '"', 'na'])             # the model split '"name' unusually
    jump = jump_forward(m, tok, out, budget=100)
    assert jump is not None and jump.rollback == 2
    assert jump.tokens == tok.encode('"name": true}')
    final = out[:len(out) - jump.rollback] + jump.tokens
    assert final == tok.encode(TARGET) and tok.decode(final) == TARGET
    assert m.stack[-1] == TARGET and len(m.stack) - 1 == len(final)   # matcher follows the new ids


def test_budget_bounds_the_net_growth():
    tok, m = ToyTokenizer(), FixedStringMatcher()
    out = generated(m, ['{', '"', 'na'])
    jump = jump_forward(m, tok, out, budget=1)
    assert jump is not None
    assert len(out) - jump.rollback + len(jump.tokens) == len(out) + 1
    assert m.stack[-1] == tok.decode(out[:len(out) - jump.rollback] + jump.tokens)


def test_nothing_forced_or_no_budget_is_no_jump():
    tok, m = ToyTokenizer(), FixedStringMatcher()
    out = generated(m, ['{', '"name', '":', ' true', '}'])
    assert jump_forward(m, tok, out, budget=10) is None
    m2 = FixedStringMatcher()
    out2 = generated(m2, ['{'])
    assert jump_forward(m2, tok, out2, budget=0) is None and m2.stack[-1] == '{'


def test_text_the_automaton_refuses_token_by_token_leaves_the_matcher_unchanged():
    tok, m = ToyTokenizer(), FixedStringMatcher(banned=frozenset({IDS['":']}))
    out = generated(m, ['{', '"', 'na'])
    before = list(m.stack)
    assert jump_forward(m, tok, out, budget=100) is None
    assert m.stack == before


def test_tail_ending_inside_a_character_is_not_retokenised():
    tok, m = ToyTokenizer(), FixedStringMatcher()
    out = generated(m, ['{', '"'])
    out_with_byte = out + [IDS['\x80']]                # decoding the tail gives U+FFFD
    jump = jump_forward(m, tok, out_with_byte, budget=100)
    assert jump is not None and jump.rollback == 0
    assert jump.tokens == tok.encode('name": true}')


def test_only_the_last_few_tokens_are_retokenised():
    tok, m = ToyTokenizer(), FixedStringMatcher()
    out = generated(m, ['{', '"', 'n', 'a'])
    jump = jump_forward(m, tok, out, budget=100)
    assert jump is not None and jump.rollback <= JUMP_FORWARD_TAIL
