"""Unicode code-point ranges -> UTF-8 byte-range sequences, so character classes become byte
automata. A sequence [(lo1, hi1), (lo2, hi2)] matches b1 b2 with lo1<=b1<=hi1, lo2<=b2<=hi2."""

from __future__ import annotations

_MAX_BY_LEN = (0x7F, 0x7FF, 0xFFFF, 0x10FFFF)
_SURROGATES = (0xD800, 0xDFFF)


def _encode(cp: int) -> bytes:
    return chr(cp).encode("utf-8", "surrogatepass")


def utf8_sequences(lo: int, hi: int) -> list[list[tuple[int, int]]]:
    """Byte-range sequences covering exactly the UTF-8 encodings of code points lo..hi
    (surrogates excluded: they have no UTF-8 encoding)."""
    out: list[list[tuple[int, int]]] = []
    stack = [(lo, hi)]
    while stack:
        lo, hi = stack.pop()
        if lo > hi:
            continue
        if lo <= _SURROGATES[1] and hi >= _SURROGATES[0]:
            stack.append((lo, _SURROGATES[0] - 1))
            stack.append((_SURROGATES[1] + 1, hi))
            continue
        split = False
        for m in _MAX_BY_LEN[:-1]:
            if lo <= m < hi:
                stack.append((lo, m))
                stack.append((m + 1, hi))
                split = True
                break
        if split:
            continue
        if hi <= 0x7F:
            out.append([(lo, hi)])
            continue
        n = len(_encode(lo))
        for i in range(1, n):
            mask = (1 << (6 * i)) - 1
            if lo & ~mask != hi & ~mask:
                if lo & mask != 0:
                    stack.append((lo, lo | mask))
                    stack.append(((lo | mask) + 1, hi))
                    split = True
                    break
                if hi & mask != mask:
                    stack.append((lo, (hi & ~mask) - 1))
                    stack.append((hi & ~mask, hi))
                    split = True
                    break
        if split:
            continue
        a, b = _encode(lo), _encode(hi)
        out.append(list(zip(a, b)))
    return out
