"""JSON numbers as regex nodes, with exact bounds: integer ranges become digit-by-digit
range regexes; decimal bounds compare integer part then fraction digits; multipleOf (integer)
is a remainder-counting DFA intersected with the range.

Bounded numbers are emitted without exponent notation (the bound check needs positional
digits); unbounded numbers accept the full JSON grammar."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from math import ceil, floor

from sgrun.constrain.byte_dfa import ByteDFA, dfa_from_node, product
from sgrun.constrain.regex_ast import EMPTY, NOTHING, Node, alt, chars, lit, opt, rep, seq

DIGIT = chars((0x30, 0x39))
NONZERO = chars((0x31, 0x39))
DIGITS_ANY = rep(DIGIT, 0, None)
FRACTION = seq(lit("."), rep(DIGIT, 1, None))
EXPONENT = seq(chars((0x45, 0x45), (0x65, 0x65)), opt(chars((0x2B, 0x2B), (0x2D, 0x2D))), rep(DIGIT, 1, None))
NATURAL = alt(lit("0"), seq(NONZERO, DIGITS_ANY))  # canonical non-negative integer


def digit_range(lo: int, hi: int) -> Node:
    return lit(str(lo)) if lo == hi else chars((0x30 + lo, 0x30 + hi))


def _digits_ge(a: str) -> Node:
    """Digit strings of len(a) that are >= a: one branch per position, so linear in len(a)."""
    if not a:
        return EMPTY
    if a.strip("0") == "":
        return rep(DIGIT, len(a), len(a))
    d, rest = int(a[0]), a[1:]
    above = seq(digit_range(d + 1, 9), rep(DIGIT, len(rest), len(rest))) if d < 9 else NOTHING
    return alt(seq(lit(a[0]), _digits_ge(rest)), above)


def _digits_le(b: str) -> Node:
    """Digit strings of len(b) that are <= b (linear in len(b))."""
    if not b:
        return EMPTY
    if b.strip("9") == "":
        return rep(DIGIT, len(b), len(b))
    d, rest = int(b[0]), b[1:]
    below = seq(digit_range(0, d - 1), rep(DIGIT, len(rest), len(rest))) if d > 0 else NOTHING
    return alt(below, seq(lit(b[0]), _digits_le(rest)))


def _same_length_range(a: str, b: str) -> Node:
    """Digit strings of equal length n with a <= s <= b (lexicographic = numeric). After the
    common prefix the range splits once into ">= a's tail", a middle digit range and "<= b's
    tail", each linear in the digits left, so the whole node is O(n) branches (was 2^n)."""
    k = 0
    while k < len(a) and a[k] == b[k]:
        k += 1
    if k == len(a):
        return lit(a)
    head, a, b = a[:k], a[k:], b[k:]
    n = len(a)
    parts = [seq(lit(a[0]), _digits_ge(a[1:]))]
    if int(b[0]) - int(a[0]) >= 2:
        parts.append(seq(digit_range(int(a[0]) + 1, int(b[0]) - 1), rep(DIGIT, n - 1, n - 1)))
    parts.append(seq(lit(b[0]), _digits_le(b[1:])))
    return seq(lit(head), alt(*parts)) if head else alt(*parts)


def natural_range(lo: int, hi: int | None) -> Node:
    """Canonical decimal strings of integers n with lo <= n <= hi (hi None: unbounded), lo >= 0.
    Lengths strictly between those of lo and hi are one `[1-9][0-9]{la,lb-2}` repeat."""
    lo = max(lo, 0)
    if hi is not None and hi < lo:
        return NOTHING
    parts = []
    if lo == 0:
        parts.append(lit("0"))
        lo = 1
        if hi is not None and hi < 1:
            return alt(*parts)
    sa = str(lo)
    la = len(sa)
    if hi is not None and len(str(hi)) == la:
        parts.append(_same_length_range(sa, str(hi)))
        return alt(*parts)
    parts.append(_same_length_range(sa, "9" * la))
    if hi is None:
        parts.append(seq(NONZERO, rep(DIGIT, la, None)))  # longer than lo: always bigger
        return alt(*parts)
    sb = str(hi)
    lb = len(sb)
    if lb - la >= 2:
        parts.append(seq(NONZERO, rep(DIGIT, la, lb - 2)))
    parts.append(_same_length_range("1" + "0" * (lb - 1), sb))
    return alt(*parts)


def integer_node(lo: int | None, hi: int | None) -> Node:
    """Canonical JSON integers in [lo, hi] (None: unbounded on that side)."""
    if lo is not None and hi is not None and lo > hi:
        return NOTHING
    parts = []
    # non-negative part
    if hi is None or hi >= 0:
        parts.append(natural_range(max(lo, 0) if lo is not None else 0, hi))
    # negative part: -m with m in [max(1, -hi), -lo]
    if lo is None or lo < 0:
        m_lo = max(1, -hi) if hi is not None else 1
        m_hi = -lo if lo is not None else None
        if m_hi is None or m_lo <= m_hi:
            parts.append(seq(lit("-"), natural_range(m_lo, m_hi)))
    return alt(*parts)


# --- decimals ---------------------------------------------------------------------------
def _split(d: Decimal) -> tuple[int, str]:
    """Non-negative decimal -> (integer part, fraction digits without trailing zeros)."""
    sign, digits, exp = d.normalize().as_tuple()
    text = format(d.normalize(), "f")
    if "." in text:
        ip, fp = text.split(".")
        return int(ip), fp.rstrip("0")
    return int(text), ""


def _frac_ge(f: str, strict: bool) -> Node:
    """Fraction digit strings x (after '.', non-empty) with 0.x >= 0.f (> when strict); f has no
    trailing zeros and is non-empty."""
    parts = []
    for k in range(len(f)):
        d = int(f[k])
        if d < 9:
            parts.append(seq(lit(f[:k]), digit_range(d + 1, 9), DIGITS_ANY))
    if strict:
        parts.append(seq(lit(f), DIGITS_ANY, NONZERO, DIGITS_ANY))
    else:
        parts.append(seq(lit(f), DIGITS_ANY))
    return alt(*parts)


def _frac_le(f: str, strict: bool) -> Node:
    """Fraction digit strings x (non-empty) with 0.x <= 0.f (< when strict)."""
    parts = [rep(lit("0"), 1, None)]
    for k in range(len(f)):
        d = int(f[k])
        if k > 0:
            parts.append(seq(lit(f[:k]), rep(lit("0"), 0, None)))
        if d > 0:
            parts.append(seq(lit(f[:k]), digit_range(0, d - 1), DIGITS_ANY))
    if not strict:
        parts.append(seq(lit(f), rep(lit("0"), 0, None)))
    return alt(*parts)


def _magnitude_ge(a: Decimal, strict: bool) -> Node:
    """Unsigned decimal strings m (int part, optional fraction) with m >= a (> when strict)."""
    ip, fp = _split(a)
    bigger = seq(natural_range(ip + 1, None), opt(FRACTION))
    if fp:
        equal_int = seq(lit(str(ip)), lit("."), _frac_ge(fp, strict))
    elif strict:
        equal_int = seq(lit(str(ip)), lit("."), DIGITS_ANY, NONZERO, DIGITS_ANY)
    else:
        equal_int = seq(lit(str(ip)), opt(FRACTION))
    return alt(bigger, equal_int)


def _magnitude_le(a: Decimal, strict: bool) -> Node:
    ip, fp = _split(a)
    smaller = seq(natural_range(0, ip - 1), opt(FRACTION)) if ip > 0 else NOTHING
    if fp:
        equal_int = seq(lit(str(ip)), opt(seq(lit("."), _frac_le(fp, strict))))
    elif strict:
        equal_int = NOTHING
    else:
        equal_int = seq(lit(str(ip)), opt(seq(lit("."), rep(lit("0"), 1, None))))
    return alt(smaller, equal_int)


UNSIGNED = seq(NATURAL, opt(FRACTION))


NEG_ZERO = seq(lit("-0"), opt(seq(lit("."), rep(lit("0"), 1, None))))


def _lower(lo: Decimal, strict: bool) -> Node:
    if lo >= 0:
        return alt(_magnitude_ge(lo, strict), NEG_ZERO) if (lo == 0 and not strict) else _magnitude_ge(lo, strict)
    # any non-negative, or negative with magnitude <= |lo|
    return alt(UNSIGNED, seq(lit("-"), _magnitude_le(-lo, strict)))


def _upper(hi: Decimal, strict: bool) -> Node:
    if hi >= 0:
        negatives = UNSIGNED if (hi > 0 or not strict) else _magnitude_ge(Decimal(0), True)
        return alt(seq(lit("-"), negatives), _magnitude_le(hi, strict))
    return seq(lit("-"), _magnitude_ge(-hi, strict))


def number_node(lo: Decimal | None, lo_strict: bool, hi: Decimal | None, hi_strict: bool,
                exponent: bool = True) -> Node:
    """JSON numbers in the interval; unbounded -> full JSON number grammar."""
    if lo is None and hi is None and not exponent:
        return seq(opt(lit("-")), NATURAL, opt(FRACTION))
    if lo is None and hi is None:
        return seq(opt(lit("-")), NATURAL, opt(FRACTION), opt(EXPONENT))
    if lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_strict or hi_strict))):
        return NOTHING
    syntax = seq(opt(lit("-")), NATURAL, opt(FRACTION))
    pieces = [dfa_from_node(syntax)]
    if lo is not None:
        pieces.append(dfa_from_node(_lower(lo, lo_strict)))
    if hi is not None:
        pieces.append(dfa_from_node(_upper(hi, hi_strict)))
    d = pieces[0]
    for p in pieces[1:]:
        d = product(d, p)
    return ("dfa", d) if d.accepting else NOTHING


def integer_bounds(lo: Decimal | None, lo_strict: bool, hi: Decimal | None,
                   hi_strict: bool) -> tuple[int | None, int | None]:
    ilo = ihi = None
    if lo is not None:
        f = Fraction(lo)
        ilo = floor(f) + 1 if (lo_strict and f == floor(f)) else ceil(f)
    if hi is not None:
        f = Fraction(hi)
        ihi = ceil(f) - 1 if (hi_strict and f == ceil(f)) else floor(f)
    return ilo, ihi


def multiple_of_dfa(k: int) -> ByteDFA:
    """Optional '-', then canonical decimal digits whose value is divisible by k."""
    # states: 0 start, 1 after '-', 2 '0' (terminal), 3 + r: digits read, remainder r
    edges: list[list[tuple[int, int]]] = [[] for _ in range(3 + k)]
    digit_bits = {d: 1 << (0x30 + d) for d in range(10)}
    edges[0].append((1 << 0x2D, 1))
    for s in (0, 1):
        edges[s].append((digit_bits[0], 2))
        for d in range(1, 10):
            edges[s].append((digit_bits[d], 3 + d % k))
    for r in range(k):
        by_target: dict[int, int] = {}
        for d in range(10):
            t = 3 + (r * 10 + d) % k
            by_target[t] = by_target.get(t, 0) | digit_bits[d]
        edges[3 + r] = [(m, t) for t, m in by_target.items()]
    return ByteDFA(edges, {2, 3})


def integer_with_multiple(lo: int | None, hi: int | None, k: int | None) -> Node:
    node = integer_node(lo, hi)
    if k is None or k == 1 or node == NOTHING:
        return node
    d = product(dfa_from_node(node), multiple_of_dfa(k))
    return ("dfa", d) if d.accepting else NOTHING


def decimal_multiple_dfa(p: int, q: int) -> ByteDFA:
    """Decimal strings (optional '-', no exponent) whose value is a multiple of p / 10**q:
    value * 10**q must be an integer (at most q significant fraction digits) divisible by p."""
    # states: 0 start, 1 after '-', 2 int part "0", 3+r int digits (remainder r);
    # then fraction: (r, j) after j fraction digits (j <= q), and zeros-only after q digits.
    index: dict[tuple, int] = {}
    edges: list[list[tuple[int, int]]] = []
    accepting: set[int] = set()
    pow10 = [pow(10, q - j, p) for j in range(q + 1)]

    def sid(key: tuple) -> int:
        if key not in index:
            index[key] = len(edges)
            edges.append([])
        return index[key]

    dig = {d: 1 << (0x30 + d) for d in range(10)}
    start = sid(("start",))
    todo = [("start",)]
    seen = {("start",)}
    while todo:
        key = todo.pop()
        s = sid(key)
        out: dict[tuple, int] = {}
        kind = key[0]
        if kind == "start":
            out[("neg",)] = 1 << 0x2D
        if kind in ("start", "neg"):
            out[("int", 0, True)] = dig[0]
            for d in range(1, 10):
                out[("int", d % p, False)] = out.get(("int", d % p, False), 0) | dig[d]
        elif kind == "int":
            r, zero = key[1], key[2]
            if not zero:
                for d in range(10):
                    k2 = ("int", (r * 10 + d) % p, False)
                    out[k2] = out.get(k2, 0) | dig[d]
            out[("dot", r)] = 1 << 0x2E
            if (r * pow10[0]) % p == 0:
                accepting.add(s)
        elif kind in ("dot", "frac"):
            r, j = key[1], (key[2] if kind == "frac" else 0)
            if j < q:
                for d in range(10):
                    k2 = ("frac", (r * 10 + d) % p, j + 1)
                    out[k2] = out.get(k2, 0) | dig[d]
            else:
                out[("frac", r, j)] = dig[0]
            if kind == "frac" and (r * pow10[j]) % p == 0:
                accepting.add(s)
        for k2, m in out.items():
            t = sid(k2)
            edges[s].append((m, t))
            if k2 not in seen:
                seen.add(k2)
                todo.append(k2)
    return ByteDFA(edges, accepting, start)


def as_decimal_ratio(m: Decimal) -> tuple[int, int]:
    """m = p / 10**q with integers p, q >= 0."""
    sign, digits, exp = m.normalize().as_tuple()
    p = int("".join(map(str, digits)))
    if exp >= 0:
        return p * 10 ** exp, 0
    return p, -exp
