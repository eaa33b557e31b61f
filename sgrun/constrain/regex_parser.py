"""Parse a regular expression (the Python `re` / ECMAScript common subset) into a regex_ast node.

Supported: literals, escapes (\\d \\w \\s \\D \\W \\S \\n \\t \\xHH \\uHHHH \\u{H..} \\UHHHHHHHH),
classes [...] with ranges and negation, `.`, groups (capturing, (?:), named), alternation,
quantifiers * + ? {n} {n,} {n,m} (lazy/possessive suffixes accepted: they do not change the
language), and ^ / $ at the ends of top-level alternatives. \\d, \\w, \\s are ASCII (ECMAScript).
Refused with RegexError: backreferences, lookaround, word boundaries, inline flags, anchors in
the middle of a pattern.
"""

from __future__ import annotations

from dataclasses import dataclass

from sgrun.constrain.compile_budget import tick
from sgrun.constrain.errors import RegexError
from sgrun.constrain.regex_ast import (EMPTY, MAX_CODEPOINT, Node, alt, lit, negate_ranges, normalize_ranges,
                                       rep, seq)

DIGIT = ((0x30, 0x39),)
WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
SPACE = ((0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A), (0x2028, 0x2029),
         (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF))
ANY = ((0, MAX_CODEPOINT),)
_SIMPLE_ESCAPES = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B, "0": 0x00, "a": 0x07, "e": 0x1B}
_ANCHOR_START = ("anchor", "^")
_ANCHOR_END = ("anchor", "$")
_MAX_REPEAT = 100_000


@dataclass
class ParsedRegex:
    alternatives: list[tuple[bool, Node, bool]]  # (anchored at start, body, anchored at end)

    def fullmatch_node(self) -> Node:
        """Language of strings the regex fully matches (anchors at the ends are no-ops)."""
        return alt(*(body for _, body, _ in self.alternatives))

    def search_node(self, any_char: Node) -> Node:
        """Language of strings in which the regex matches somewhere (JSON Schema `pattern`)."""
        anything = rep(any_char, 0, None)
        return alt(*(seq(EMPTY if a else anything, body, EMPTY if b else anything)
                     for a, body, b in self.alternatives))


def parse_regex(pattern: str, dot_excludes: tuple[int, ...] = (0x0A,)) -> ParsedRegex:
    p = _Parser(pattern, dot_excludes)
    node = p.parse_alt()
    if p.i != len(pattern):
        raise RegexError(f"regex {pattern!r}: unbalanced ')' at position {p.i}")
    branches = node[1] if node[0] == "alt" else (node,)
    out = []
    for b in branches:
        items = list(b[1]) if b[0] == "seq" else [b]
        start = end = False
        while items and items[0] == _ANCHOR_START:
            items.pop(0)
            start = True
        while items and items[-1] == _ANCHOR_END:
            items.pop()
            end = True
        body = seq(*items)
        if _has_anchor(body):
            raise RegexError(f"regex {pattern!r}: ^ and $ are only supported at the start/end of the pattern")
        out.append((start, body, end))
    return ParsedRegex(out)


def _has_anchor(node: Node) -> bool:
    if node[0] == "anchor":
        return True
    if node[0] in ("seq", "alt"):
        return any(_has_anchor(c) for c in node[1])
    if node[0] == "rep":
        return _has_anchor(node[1])
    return False


class _Parser:
    def __init__(self, pattern: str, dot_excludes: tuple[int, ...]):
        self.s = pattern
        self.i = 0
        self.dot = negate_ranges(tuple((c, c) for c in dot_excludes))

    def error(self, msg: str) -> RegexError:
        return RegexError(f"regex {self.s!r}: {msg} at position {self.i}")

    def peek(self) -> str | None:
        return self.s[self.i] if self.i < len(self.s) else None

    def parse_alt(self) -> Node:
        branches = [self.parse_seq()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.parse_seq())
        if len(branches) == 1:
            return branches[0]
        # Keep anchors visible per branch: build alt without flattening anchor-bearing seqs away.
        return ("alt", tuple(branches)) if len(set(branches)) > 1 else branches[0]

    def parse_seq(self) -> Node:
        items: list[Node] = []
        while True:
            c = self.peek()
            if c is None or c in "|)":
                break
            tick()
            atom = self.parse_atom()
            if atom[0] == "anchor":
                items.append(atom)
                continue
            items.append(self.parse_quantifier(atom))
        if any(x[0] == "anchor" for x in items):
            return ("seq", tuple(items))
        return seq(*items)

    def parse_quantifier(self, atom: Node) -> Node:
        while True:
            c = self.peek()
            if c == "*":
                lo, hi = 0, None
                self.i += 1
            elif c == "+":
                lo, hi = 1, None
                self.i += 1
            elif c == "?":
                lo, hi = 0, 1
                self.i += 1
            elif c == "{" and self._is_counted_repeat():
                lo, hi = self._parse_counts()
            else:
                return atom
            if self.peek() in ("?", "+"):  # lazy / possessive: same language
                self.i += 1
            if hi is not None and hi < lo:
                raise self.error("repeat with max < min")
            if lo > _MAX_REPEAT or (hi or 0) > _MAX_REPEAT:
                raise self.error(f"repeat count above {_MAX_REPEAT}")
            atom = rep(atom, lo, hi)

    def _is_counted_repeat(self) -> bool:
        j = self.s.find("}", self.i)
        if j < 0:
            return False
        body = self.s[self.i + 1:j]
        parts = body.split(",")
        return 1 <= len(parts) <= 2 and parts[0].isdigit() and (len(parts) == 1 or parts[1] == "" or parts[1].isdigit())

    def _parse_counts(self) -> tuple[int, int | None]:
        j = self.s.index("}", self.i)
        parts = self.s[self.i + 1:j].split(",")
        self.i = j + 1
        lo = int(parts[0])
        if len(parts) == 1:
            return lo, lo
        return lo, (int(parts[1]) if parts[1] else None)

    def parse_atom(self) -> Node:
        c = self.s[self.i]
        if c == "(":
            return self.parse_group()
        if c == "[":
            return ("chars", self.parse_class())
        if c == ".":
            self.i += 1
            return ("chars", self.dot)
        if c == "^":
            self.i += 1
            return _ANCHOR_START
        if c == "$":
            self.i += 1
            return _ANCHOR_END
        if c == "\\":
            return self.parse_escape(in_class=False)
        if c in "*+?":
            raise self.error(f"nothing to repeat before {c!r}")
        if c == "{" and self._is_counted_repeat():
            raise self.error("nothing to repeat before '{'")
        self.i += 1
        return lit(c)

    def parse_group(self) -> Node:
        self.i += 1
        if self.s.startswith("?", self.i):
            if self.s.startswith("?:", self.i):
                self.i += 2
            elif self.s.startswith("?P<", self.i) or (self.s.startswith("?<", self.i)
                                                     and not self.s.startswith("?<=", self.i)
                                                     and not self.s.startswith("?<!", self.i)):
                j = self.s.find(">", self.i)
                if j < 0:
                    raise self.error("unterminated group name")
                self.i = j + 1
            elif self.s[self.i:self.i + 2] in ("?=", "?!") or self.s[self.i:self.i + 3] in ("?<=", "?<!"):
                raise self.error("lookaround assertions are not supported")
            elif self.s.startswith("?P=", self.i):
                raise self.error("backreferences are not supported")
            else:
                raise self.error("inline flags / extension groups are not supported")
        node = self.parse_alt()
        if self.peek() != ")":
            raise self.error("missing ')'")
        self.i += 1
        if node[0] == "seq" and any(x[0] == "anchor" for x in node[1]):
            items = node[1]
            # Allow ^(...)$ style only; an anchor inside a group at the pattern edge is kept as is.
            return node if items else EMPTY
        return node

    def parse_class(self) -> tuple[tuple[int, int], ...]:
        self.i += 1
        negate = False
        if self.peek() == "^":
            negate = True
            self.i += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            c = self.peek()
            if c is None:
                raise self.error("unterminated character class")
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            lo_set = self._class_item()
            if (self.peek() == "-" and self.i + 1 < len(self.s) and self.s[self.i + 1] != "]"
                    and len(lo_set) == 1 and lo_set[0][0] == lo_set[0][1]):
                self.i += 1
                hi_set = self._class_item()
                if len(hi_set) != 1 or hi_set[0][0] != hi_set[0][1]:
                    raise self.error("bad character range")
                lo, hi = lo_set[0][0], hi_set[0][0]
                if hi < lo:
                    raise self.error("character range out of order")
                ranges.append((lo, hi))
            else:
                ranges.extend(lo_set)
        out = normalize_ranges(ranges)
        return negate_ranges(out) if negate else out

    def _class_item(self) -> tuple[tuple[int, int], ...]:
        c = self.s[self.i]
        if c == "\\":
            node = self.parse_escape(in_class=True)
            if node[0] == "chars":
                return node[1]
            cp = node[1].decode("utf-8")
            return ((ord(cp), ord(cp)),)
        if c == "[" and self.s.startswith("[:", self.i):
            raise self.error("POSIX classes are not supported")
        self.i += 1
        return ((ord(c), ord(c)),)

    def parse_escape(self, in_class: bool) -> Node:
        self.i += 1
        if self.i >= len(self.s):
            raise self.error("trailing backslash")
        c = self.s[self.i]
        self.i += 1
        classes = {"d": DIGIT, "w": WORD, "s": SPACE}
        if c in classes:
            return ("chars", classes[c])
        if c.lower() in classes and c.isupper():
            return ("chars", negate_ranges(classes[c.lower()]))
        if c in _SIMPLE_ESCAPES and not (c == "0" and self.peek() is not None and self.peek().isdigit()):
            return lit(chr(_SIMPLE_ESCAPES[c]))
        if c == "b" and in_class:
            return lit("\x08")
        if c == "x":
            return lit(chr(self._hex(2)))
        if c == "u":
            if self.peek() == "{":
                j = self.s.find("}", self.i)
                if j < 0:
                    raise self.error("bad \\u{...} escape")
                cp = self._hex_text(self.s[self.i + 1:j])
                self.i = j + 1
                return self._cp(cp)
            return self._cp(self._hex(4))
        if c == "U":
            return self._cp(self._hex(8))
        if c == "c" and self.peek() is not None and self.peek().isalpha():
            ch = self.s[self.i]
            self.i += 1
            return lit(chr(ord(ch.upper()) % 32))
        if c == "A" and not in_class:
            return _ANCHOR_START
        if c in ("Z", "z") and not in_class:
            return _ANCHOR_END
        if c in "bB":
            raise self.error("word boundaries are not supported")
        if c.isdigit() or c == "k":
            raise self.error("backreferences are not supported")
        if c in "pP":
            raise self.error("unicode property classes are not supported")
        if c.isalnum():
            raise self.error(f"unknown escape \\{c}")
        return lit(c)

    def _cp(self, cp: int) -> Node:
        if cp > MAX_CODEPOINT or 0xD800 <= cp <= 0xDFFF:
            raise self.error(f"code point {cp:#x} cannot be encoded in UTF-8")
        return ("chars", ((cp, cp),))

    def _hex(self, n: int) -> int:
        text = self.s[self.i:self.i + n]
        if len(text) != n:
            raise self.error("truncated hex escape")
        self.i += n
        return self._hex_text(text)

    def _hex_text(self, text: str) -> int:
        try:
            return int(text, 16)
        except ValueError:
            raise self.error(f"bad hex escape {text!r}") from None
