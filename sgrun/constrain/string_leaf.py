"""JSON string leaves (pattern / format / length / excluded values) as regex nodes, cached
across compiles: the same leaf in another schema (a `format: email`, a common pattern) costs a
dictionary lookup instead of a subset construction and an escape lift.

Two constructions:
- eager: a DFA over the decoded text (intersections of length, patterns, format, exclusions),
  lifted to JSON's escaped form (json_string.escape_lift). Exact and mask-friendly; used when it
  stays small.
- lazy: a single `pattern` whose eager DFA would be big (an unanchored pattern is searched for,
  i.e. `.*pattern.*`, which determinises badly) is lifted to the escaped form as an NFA node
  (escaped_node) and determinised lazily with the rest of the schema, so compile work is
  proportional to the states a request visits. An NFA cannot intersect, so a big pattern with
  length bounds, a format or a second pattern stays eager, within the compile budget.
"""

from __future__ import annotations

from functools import lru_cache

from sgrun.constrain.byte_dfa import ByteDFA, dfa_from_node, minimize, product
from sgrun.constrain.errors import ConstraintTooComplexError, RegexError, UnsupportedSchemaError
from sgrun.constrain.json_string import (QUOTE, any_text_dfa, constrained_string_node, excluded_dfa,
                                         length_product, length_range, string_node)
from sgrun.constrain.regex_ast import MAX_CODEPOINT, NOTHING, Node, alt, chars, lit, normalize_ranges, rep, seq
from sgrun.constrain.regex_parser import parse_regex
from sgrun.constrain.string_formats import format_node

ECMA_DOT_EXCLUDES = (0x0A, 0x0D, 0x2028, 0x2029)
EAGER_PATTERN_STATES = 1500  # above this, a lone pattern goes the lazy way
LENGTH_PRODUCT_STATES = 4000  # length bounds x pattern/format states (each costs escape-lift time)
_SHORT_ESCAPES = {0x22: '"', 0x5C: "\\", 0x2F: "/", 0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r", 0x09: "t"}
_HEX = "0123456789abcdef"


def _parsed(pattern: str):
    try:
        return parse_regex(pattern, dot_excludes=ECMA_DOT_EXCLUDES)
    except RegexError as e:
        raise UnsupportedSchemaError("pattern", "", str(e)) from None


@lru_cache(maxsize=4096)
def pattern_search_dfa(pattern: str, max_states: int = 50_000) -> ByteDFA:
    """Decoded strings in which `pattern` matches somewhere (JSON Schema semantics)."""
    return dfa_from_node(_parsed(pattern).search_node(chars((0, MAX_CODEPOINT))), max_states=max_states)


def pattern_matches(pattern: str, text: str) -> bool:
    return pattern_search_dfa(pattern).fullmatch(text.encode("utf-8"))


@lru_cache(maxsize=None)
def format_dfa(fmt: str) -> ByteDFA:
    """The decoded strings of a format (string_formats.KNOWN_FORMATS), minimal: built once per
    process and shared by every schema that names the format."""
    from sgrun.constrain.format_tables import load
    d = load(fmt)  # the slow-to-build formats ship prebuilt
    if d is not None:
        return d
    node = format_node(fmt)
    return minimize(node[1] if node[0] == "dfa" else dfa_from_node(node))


@lru_cache(maxsize=2048)
def string_leaf(lo: int, hi: int | None, patterns: tuple[str, ...], fmt: str | None,
                exclude: tuple[str, ...]) -> Node:
    """The JSON string (quotes included) of length lo..hi (code points) whose decoded text
    matches every pattern (search), the format (full match) and none of `exclude`."""
    if not patterns and fmt is None and not exclude:
        return string_node(lo, hi)
    if len(patterns) == 1 and fmt is None and not exclude and lo == 0 and hi is None:
        try:
            return constrained_string_node(pattern_search_dfa(patterns[0], EAGER_PATTERN_STATES))
        except ConstraintTooComplexError:
            return seq(QUOTE, escaped_node(_parsed(patterns[0]).search_node(chars((0, MAX_CODEPOINT)))), QUOTE)
    d = any_text_dfa()
    for p in patterns:
        d = product(d, pattern_search_dfa(p))
    if fmt is not None:
        d = product(d, format_dfa(fmt))
    d = excluded_dfa(d, list(exclude))
    if lo or hi is not None:  # the length last, over the pairs the other constraints reach
        shortest, longest = length_range(d)
        if longest is not None and hi is not None and longest <= hi:
            hi = None  # (a format's own length bound, a uuid's 36 characters, already meets it)
        if lo <= shortest:
            lo = 0
        if lo or hi is not None:
            d = length_product(d, lo, hi, LENGTH_PRODUCT_STATES)
    return constrained_string_node(d)


def escaped_node(node: Node) -> Node:
    """A regex node over decoded text -> the node over its JSON-escaped form: raw characters
    where JSON allows them, the short escapes, and \\u00XX for control characters, quote and
    backslash. Every string it accepts decodes to one the input accepts (sound); it accepts the
    escaping json.dumps writes."""
    kind = node[0]
    if kind == "chars":
        return _escaped_chars(node[1])
    if kind == "bytes":
        text = node[1].decode("utf-8", errors="surrogatepass")
        return seq(*(_escaped_chars(((ord(c), ord(c)),)) for c in text)) if text else node
    if kind == "seq":
        return seq(*(escaped_node(c) for c in node[1]))
    if kind == "alt":
        return alt(*(escaped_node(c) for c in node[1]))
    if kind == "rep":
        return rep(escaped_node(node[1]), node[2], node[3])
    raise AssertionError(f"escaped_node: unexpected node {kind!r}")


@lru_cache(maxsize=4096)
def _escaped_chars(ranges: tuple[tuple[int, int], ...]) -> Node:
    raw = []
    for a, b in ranges:
        for x, y in ((a, min(b, 0x21)), (max(a, 0x23), min(b, 0x5B)), (max(a, 0x5D), b)):
            x = max(x, 0x20)
            if x <= y:
                raw.append((x, y))
    parts: list[Node] = []
    if raw:
        raw_t = normalize_ranges(raw)
        parts.append(lit(chr(raw_t[0][0])) if len(raw_t) == 1 and raw_t[0][0] == raw_t[0][1] else ("chars", raw_t))
    escapable = [c for a, b in ranges for c in range(a, min(b, 0x7F) + 1) if c < 0x20 or c in (0x22, 0x5C, 0x2F)]
    for c in escapable:
        if c in _SHORT_ESCAPES:
            parts.append(lit("\\" + _SHORT_ESCAPES[c]))
    controls = [c for c in escapable if c != 0x2F]
    if len(controls) >= 0x20:  # all control characters (and maybe '"', '\\'): grouped \u00XX
        parts.append(seq(lit("\\u00"), chars((0x30, 0x31)), chars((0x30, 0x39), (0x41, 0x46), (0x61, 0x66))))
        controls = [c for c in controls if c >= 0x20]
    for c in controls:
        hi, lo = _HEX[c >> 4], _HEX[c & 15]
        parts.append(seq(lit("\\u00" + hi), chars((ord(lo), ord(lo)), (ord(lo.upper()), ord(lo.upper())))))
    return alt(*parts) if parts else NOTHING
