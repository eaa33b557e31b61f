"""The JSON Schema 2020-12 string formats, each as the exact language of its RFC's grammar
(a regex over the decoded string, full match), or the largest part of it a regular language
holds where the RFC's set is not regular or not practical as an automaton.

Every format the 2020-12 vocabulary defines is here (KNOWN_FORMATS); a format outside it is
refused by the compiler like any unsupported keyword (lenient: dropped with a warning).
Where a format is narrowed, only valid strings are accepted (sound), and docs/constrained-
decoding.md says what is left out:
- regex (ECMA-262): balanced parentheses are not regular, so groups nest at most REGEX_DEPTH
  deep; see regex_format_node for the rest.
- idn-hostname / idn-email's U-labels (RFC 5890-5893): see idn_label_node.
"""

from __future__ import annotations

from functools import lru_cache

from sgrun.constrain.byte_dfa import dfa_from_node, minimize, product
from sgrun.constrain.regex_ast import NOTHING, Node, alt, chars, lit, normalize_ranges, opt, rep, seq
from sgrun.constrain.regex_parser import parse_regex

_DEC_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"{_DEC_OCTET}(\.{_DEC_OCTET}){{3}}"
_H16 = r"[0-9A-Fa-f]{1,4}"
_LS32 = rf"({_H16}:{_H16}|{_IPV4})"
_IPV6 = "|".join([
    rf"({_H16}:){{6}}{_LS32}",
    rf"::({_H16}:){{5}}{_LS32}",
    rf"({_H16})?::({_H16}:){{4}}{_LS32}",
    rf"(({_H16}:){{0,1}}{_H16})?::({_H16}:){{3}}{_LS32}",
    rf"(({_H16}:){{0,2}}{_H16})?::({_H16}:){{2}}{_LS32}",
    rf"(({_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
    rf"(({_H16}:){{0,4}}{_H16})?::{_LS32}",
    rf"(({_H16}:){{0,5}}{_H16})?::{_H16}",
    rf"(({_H16}:){{0,6}}{_H16})?::",
])
_YEAR = r"([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
_LEAP_YEAR = r"([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)"
# Real calendar dates (month lengths, Feb 29 only in leap years; year 0000 does not exist).
_DATE = (rf"({_YEAR}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)"
         rf"|02-(0[1-9]|1[0-9]|2[0-8]))|{_LEAP_YEAR}-02-29)")
# A leap second (:60) only at 23:59 UTC (RFC 3339 5.7); one written in another offset (15:59:60-08:00)
# is left out: matching the local time against the offset takes ~1,440 states.
_TIME = (r"(([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
         r"|23:59:60(\.[0-9]+)?([Zz]|[+-]00:00))")
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DUR_TIME = r"T([0-9]+H([0-9]+M([0-9]+S)?)?|[0-9]+M([0-9]+S)?|[0-9]+S)"
_DUR_DATE = r"([0-9]+D|[0-9]+M([0-9]+D)?|[0-9]+Y([0-9]+M([0-9]+D)?)?)"


def _class(ranges: tuple[tuple[int, int], ...]) -> str:
    """Code point ranges as the inside of a regex character class (raw characters)."""
    return "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}" for a, b in ranges)


# RFC 3987 2.2: ucschar and iprivate (the code points an IRI adds to a URI)
UCSCHAR = ((0xA0, 0xD7FF), (0xF900, 0xFDCF), (0xFDF0, 0xFFEF),
           *(((p << 16), (p << 16) + 0xFFFD) for p in range(1, 14)), (0xE1000, 0xEFFFD))
IPRIVATE = ((0xE000, 0xF8FF), (0xF0000, 0xFFFFD), (0x100000, 0x10FFFD))


def _rfc3986(ucs: str = "", private: str = "") -> tuple[str, str]:
    """(absolute URI, relative reference) regexes of RFC 3986 section 3 / 4.2; with `ucs` the
    IRI forms of RFC 3987 section 2.2 (ucschar in iunreserved, iprivate in iquery)."""
    unreserved = rf"A-Za-z0-9\-._~{ucs}"
    sub_delims = r"!$&'()*+,;="
    pct = r"%[0-9A-Fa-f]{2}"
    pchar = rf"([{unreserved}{sub_delims}:@]|{pct})"
    segment, segment_nz = f"{pchar}*", f"{pchar}+"
    segment_nz_nc = rf"([{unreserved}{sub_delims}@]|{pct})+"
    query = rf"([{unreserved}{sub_delims}:@/?{private}]|{pct})*"
    fragment = rf"({pchar}|[/?])*"
    scheme = r"[A-Za-z][A-Za-z0-9+.\-]*"
    userinfo = rf"([{unreserved}{sub_delims}:]|{pct})*"
    # (ABNF's "v" matches "V" too; rfc3987, which jsonschema judges IRIs with, reads it as 'v' only)
    ip_future = rf"v[0-9A-Fa-f]+\.[A-Za-z0-9\-._~{sub_delims}:]+"
    ip_literal = rf"\[({_IPV6}|{ip_future})\]"
    reg_name = rf"([{unreserved}{sub_delims}]|{pct})*"  # (IPv4address is a reg-name too)
    authority = rf"({userinfo}@)?({ip_literal}|{reg_name})(:[0-9]*)?"
    path_abempty = rf"(/{segment})*"
    path_absolute = rf"/({segment_nz}(/{segment})*)?"
    path_rootless = rf"{segment_nz}(/{segment})*"
    path_noscheme = rf"{segment_nz_nc}(/{segment})*"
    tail = rf"(\?{query})?(#{fragment})?"
    absolute = rf"{scheme}:(//{authority}{path_abempty}|{path_absolute}|{path_rootless})?{tail}"
    relative = rf"(//{authority}{path_abempty}|{path_absolute}|{path_noscheme})?{tail}"
    return absolute, relative


_URI, _URI_RELATIVE = _rfc3986()
_IRI, _IRI_RELATIVE = _rfc3986(_class(UCSCHAR), _class(IPRIVATE))

# RFC 6570 section 2: literals and expressions of all four levels (op-reserve, the operators
# = , ! @ | that 2.2 reserves for future extensions, no processor can expand: not accepted)
_VARCHAR = r"([A-Za-z0-9_]|%[0-9A-Fa-f]{2})"
_VARSPEC = rf"{_VARCHAR}(\.?{_VARCHAR})*(:[1-9][0-9]{{0,3}}|\*)?"
_TEMPLATE_LITERAL = (rf"([!#$&(-;=?-\[\]_a-z~{_class(UCSCHAR)}{_class(IPRIVATE)}]|%[0-9A-Fa-f]{{2}})")
_URI_TEMPLATE = rf"({_TEMPLATE_LITERAL}|\{{[+#./;?&]?{_VARSPEC}(,{_VARSPEC})*\}})*"

# RFC 5321 section 4.1.2 Mailbox (address literals of 4.1.3; IPv6 is the one registered tag)
_ATEXT = r"A-Za-z0-9!#$%&'*+/=?^_`{|}~\-"
_QTEXT = r" !#-\[\]-~"
_ADDRESS_LITERAL = rf"\[({_IPV4}|IPv6:({_IPV6}))\]"


def _mailbox(non_ascii: str = "", u_label: str = "") -> str:
    """RFC 5321 Mailbox; with `non_ascii` and a U-label regex, RFC 6531 section 3.3's form."""
    atom = f"[{_ATEXT}{non_ascii}]+"
    local = rf"({atom}(\.{atom})*|\"([{_QTEXT}{non_ascii}]|\\[ -~])*\")"
    sub_domain = f"({_LABEL}|{u_label})" if u_label else _LABEL
    return rf"{local}@({sub_domain}(\.{sub_domain})*|{_ADDRESS_LITERAL})"


FORMAT_REGEXES: dict[str, str] = {
    "date-time": rf"{_DATE}[Tt]{_TIME}",
    "date": _DATE,
    "time": _TIME,
    "duration": rf"P({_DUR_DATE}({_DUR_TIME})?|{_DUR_TIME}|[0-9]+W)",
    "email": _mailbox(),
    "uuid": r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}",
    "uri": _URI,
    "uri-reference": f"{_URI}|{_URI_RELATIVE}",
    "iri": _IRI,
    "iri-reference": f"{_IRI}|{_IRI_RELATIVE}",
    "uri-template": _URI_TEMPLATE,
    "ipv4": _IPV4,
    "ipv6": _IPV6,
    "json-pointer": r"(/([^/~]|~[01])*)*",
    "relative-json-pointer": r"(0|[1-9][0-9]*)(#|(/([^/~]|~[01])*)*)",
}
"""The formats that are plain regexes; the hostnames, idn-email and regex are built as nodes."""

KNOWN_FORMATS = frozenset([*FORMAT_REGEXES, "hostname", "idn-hostname", "idn-email", "regex"])
"""Every format JSON Schema 2020-12 defines (section 7.3 of its validation vocabulary)."""


@lru_cache(maxsize=None)
def format_node(fmt: str) -> Node:
    """The decoded strings `fmt` accepts (full match). KeyError for a format not in KNOWN_FORMATS."""
    if fmt in FORMAT_REGEXES:
        return parse_regex(FORMAT_REGEXES[fmt]).fullmatch_node()
    if fmt == "hostname":  # RFC 1123 2.1 labels; RFC 5891's A-labels: see _ascii_label_node
        return seq(_ascii_label_node(), rep(seq(lit("."), _ascii_label_node()), 0, None))
    if fmt == "idn-hostname":
        label = alt(_ascii_label_node(), idn_label_node())
        return seq(label, rep(seq(lit("."), label), 0, None))
    if fmt == "idn-email":
        return _idn_email_node()
    if fmt == "regex":
        return regex_format_node()
    raise KeyError(fmt)


# --- idn-hostname, idn-email ---------------------------------------------------------------

IDN_LABEL_MAX_CODEPOINTS = 6
IDN_ONE_NON_ASCII_SIDE = 24
"""A U-label's A-label (xn-- plus Punycode) must fit 63 octets. Punycode spends at most 9 digits
on a character (each digit but the last divides the remaining delta, < 0x110000 * 64, by at
least 10), so 6 code points (4 + 1 + 6 * 9 = 59 octets) always fit, and so does one non-ASCII
code point among 48 ASCII ones (4 + 48 + 1 + 9 = 62); other U-labels are not accepted (their
Punycode length is not a regular property of the label)."""


@lru_cache(maxsize=None)
def _ascii_label_node() -> Node:
    """An NR-LDH label (RFC 5890 2.3.1): letters, digits, hyphens, not starting or ending with a
    hyphen, at most 63, and no '--' in the third and fourth positions. That leaves out A-labels
    (xn--...): one is valid when its Punycode decodes to a valid U-label, not a regular property."""
    d = product(dfa_from_node(parse_regex(_LABEL).fullmatch_node()), _BAD_HYPHENS(), "minus")
    return ("dfa", d)


@lru_cache(maxsize=None)
def _idn_classes() -> dict[str, tuple[tuple[int, int], ...]]:
    """The code point classes a U-label is built from, from IDNA2008's derived property table
    (the idna package, RFC 5892) and the Unicode database Python ships (NFC, bidi, marks)."""
    import unicodedata

    from idna import idnadata
    pvalid = idnadata.codepoint_classes["PVALID"]
    # NFC_Quick_Check=Maybe: code points that compose with what precedes them (the second of a
    # canonical pair that recomposes, and Hangul medial/final jamo); NFC_QC=No: not NFC alone.
    maybe = set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))
    for cp in range(0x30000):  # (canonical pairs all lie below U+30000)
        d = unicodedata.decomposition(chr(cp))
        if d and not d.startswith("<"):
            parts = d.split()
            if len(parts) == 2 and unicodedata.normalize("NFC", chr(int(parts[0], 16)) + chr(int(parts[1], 16))) \
                    == chr(cp):
                maybe.add(int(parts[1], 16))
    classes: dict[str, list[int]] = {k: [] for k in ("start", "zero", "nonzero", "R_AL", "AN", "EN", "NSM",
                                                     "rtl_other", "ltr")}
    for cp in (x for r in pvalid for x in range(max(r >> 32, 0x80), r & 0xFFFFFFFF)):
        c = chr(cp)
        if cp in maybe or unicodedata.category(c) == "Cn" or unicodedata.normalize("NFC", c) != c:
            continue
        zero = unicodedata.combining(c) == 0
        bidi = unicodedata.bidirectional(c)
        if bidi in ("R", "AL"):
            classes["R_AL"].append(cp)
        elif bidi in ("AN", "EN", "NSM"):
            classes[bidi].append(cp)
        elif bidi in ("ES", "CS", "ET", "ON", "BN"):
            classes["rtl_other"].append(cp)
        if bidi not in ("R", "AL", "AN"):
            classes["ltr"].append(cp)
        classes["zero" if zero else "nonzero"].append(cp)
        if zero and unicodedata.category(c)[0] != "M":
            classes["start"].append(cp)
    ascii_lower = [*range(0x30, 0x3A), *range(0x61, 0x7B)]
    for k in ("start", "zero", "ltr"):
        classes[k] += ascii_lower
    classes["EN"] += list(range(0x30, 0x3A))
    classes["rtl_other"].append(0x2D)  # '-' is ES; it may not start or end a label (hyphen rule below)
    classes["ltr"].append(0x2D)
    classes["zero"].append(0x2D)
    return {k: normalize_ranges((x, x) for x in v) for k, v in classes.items()}


@lru_cache(maxsize=None)
def idn_label_node() -> Node:
    """A U-label (RFC 5890 2.3.2.1) with at least one non-ASCII code point, as the idna package
    (IDNA2008, RFC 5891 5.4) validates it, narrowed to a regular, sound part:
    - code points PVALID in RFC 5892's table (lowercase ASCII letters, digits and '-' among them);
      CONTEXTJ / CONTEXTO code points (ZWJ, ZWNJ, middle dot, Greek keraia, Hebrew geresh,
      katakana middle dot, Arabic-Indic digits) are not accepted;
    - NFC (RFC 5891 5.3): NFC_Quick_Check=Yes code points, no two combining marks in a row;
    - no combining mark first (5.4), no '-' first or last, no '--' in positions 3-4;
    - the Bidi Rule (RFC 5893) where the label holds R, AL or AN characters;
    - at most IDN_LABEL_MAX_CODEPOINTS code points, or one non-ASCII code point between at most
      IDN_ONE_NON_ASCII_SIDE ASCII ones on either side (the A-label's 63 octets)."""
    c = {k: chars(*v) for k, v in _idn_classes().items()}
    # NFC: a starter first, then never two non-starters (ccc != 0) in a row
    nfc = seq(c["start"], rep(seq(opt(c["nonzero"]), c["zero"]), 0, None), opt(c["nonzero"]))
    # Bidi Rule: LTR labels hold no R/AL/AN; RTL labels start with R/AL, hold only RTL-allowed
    # classes, end (before trailing NSMs) with R, AL, EN or AN, and never mix EN with AN.
    rtl = []
    for numeric in ("EN", "AN"):
        allowed = alt(c["R_AL"], c[numeric], c["rtl_other"], c["NSM"])
        ending = alt(c["R_AL"], c[numeric])
        rtl.append(seq(c["R_AL"], opt(seq(rep(allowed, 0, None), ending)), rep(c["NSM"], 0, None)))
    bidi = alt(rep(c["ltr"], 0, None), *rtl)
    # (the second shape: one non-ASCII code point among at most 2 x 24 ASCII ones, 'münchen'; each
    # side bounded on its own, so the automaton forgets the first count once the non-ASCII starts)
    shape = minimize(dfa_from_node(alt(
        parse_regex(f"[\\x00-\\u{{10FFFF}}]{{1,{IDN_LABEL_MAX_CODEPOINTS}}}").fullmatch_node(),
        parse_regex(f"[\\x00-\\x7F]{{0,{IDN_ONE_NON_ASCII_SIDE}}}[\\u0080-\\u{{10FFFF}}]"
                    f"[\\x00-\\x7F]{{0,{IDN_ONE_NON_ASCII_SIDE}}}").fullmatch_node())))
    non_ascii = parse_regex(r".*[\u0080-\u{10FFFF}].*").fullmatch_node()
    d = dfa_from_node(nfc)
    for other in (dfa_from_node(bidi), shape, dfa_from_node(non_ascii)):
        d = product(d, other)
    d = minimize(product(d, _BAD_HYPHENS(), "minus"))
    return ("dfa", d) if d.accepting else NOTHING


@lru_cache(maxsize=None)
def _BAD_HYPHENS():
    """Labels RFC 5891 4.2.3.1 forbids: '-' first or last, or '--' in the third and fourth positions."""
    return dfa_from_node(parse_regex(r"-.*|.*-|..--.*", dot_excludes=()).fullmatch_node())


def _idn_email_node() -> Node:
    """RFC 6531 section 3.3: the Mailbox of RFC 5321 with UTF-8 in atoms and quoted strings, and
    U-labels among the domain's labels."""
    non_ascii = "\\u0080-\\u{10FFFF}"
    u = "\ufdd0"  # a placeholder code point for the U-label node, replaced below
    node = parse_regex(_mailbox(non_ascii, u)).fullmatch_node()
    return _replace(node, chars((0xFDD0, 0xFDD0)), idn_label_node())


def _replace(node: Node, old: Node, new: Node) -> Node:
    if node == old:
        return new
    if node[0] in ("seq", "alt"):
        parts = [_replace(n, old, new) for n in node[1]]
        return seq(*parts) if node[0] == "seq" else alt(*parts)
    if node[0] == "rep":
        return rep(_replace(node[1], old, new), node[2], node[3])
    if node[0] == "bytes" and old[0] == "chars" and chr(old[1][0][0]).encode() in node[1]:
        raw = node[1].split(chr(old[1][0][0]).encode())
        out: list[Node] = [lit(raw[0])]
        for r in raw[1:]:
            out += [new, lit(r)]
        return seq(*out)
    return node


# --- regex ---------------------------------------------------------------------------------

REGEX_DEPTH = 2
"""How deep the regex format's groups may nest (parentheses are balanced: not regular)."""


@lru_cache(maxsize=None)
def regex_format_node(depth: int = REGEX_DEPTH) -> Node:
    """ECMA-262 patterns (the u-flag syntax of 22.2.1, which is also valid Python `re` syntax),
    narrowed to a regular, sound part:
    - groups (capturing, (?:...), lookahead (?=...) / (?!...)) nest at most `depth` deep;
    - not accepted: backreferences, named groups, lookbehind, \\p{...}, \\cX, \\0, \\u{...};
      a class range's ends are printable ASCII characters written raw (not escapes);
    - a quantifier {n,m} with n <= m: both of at most 2 digits, or m with more digits than n
      (up to 9; a numeric comparison of two unbounded numbers is not regular).
    Literal '{', '}' and ']' must be escaped, as the u flag requires."""
    syntax = "^$\\.*+?()[]{}|"
    pattern_char = chars(*_minus((0, 0x10FFFF), syntax))
    hex2 = parse_regex("[0-9A-Fa-f]{2}").fullmatch_node()
    hex4 = parse_regex("[0-9A-Fa-f]{4}").fullmatch_node()
    char_escape = alt(seq(lit("\\"), chars(*((ord(x), ord(x)) for x in "dDwWsSnrtfv"))),
                      seq(lit("\\x"), hex2), seq(lit("\\u"), hex4))
    atom_escape = alt(char_escape, seq(lit("\\"), chars(*((ord(x), ord(x)) for x in syntax + "/"))))
    # a class: [^? -? items -? ] with at least one item or a lone '-'
    class_single = alt(chars(*_minus((0, 0x10FFFF), "\\]-")),
                       alt(char_escape, lit("\\b"), lit("\\-"),
                           seq(lit("\\"), chars(*((ord(x), ord(x)) for x in syntax + "/")))))
    ranges = alt(*(seq(lit(chr(a)), lit("-"), chars(*_minus((a, 0x7E), "\\]-")))
                   for a in range(0x20, 0x7F) if chr(a) not in "\\]-"))
    item = alt(class_single, ranges)
    # (a '^' first would negate: Python reads [^] as unterminated, so the first item of a class
    # that is not negated is no '^')
    first = ("dfa", product(dfa_from_node(item), dfa_from_node(seq(lit("^"), rep(chars((0, 0x10FFFF)), 0, None))),
                            "minus"))
    char_class = alt(seq(lit("[^"), alt(seq(opt(lit("-")), item, rep(item, 0, None), opt(lit("-"))), lit("-")),
                         lit("]")),
                     seq(lit("["), alt(seq(first, rep(item, 0, None), opt(lit("-"))),
                                       seq(lit("-"), rep(item, 0, None), opt(lit("-")))), lit("]")))
    pairs = alt(*(seq(lit(f"{{{n},"), parse_regex(_at_least_2digits(n)).fullmatch_node(), lit("}"))
                  for n in range(100)))
    longer = alt(*(seq(lit("{"), parse_regex(f"0|[1-9][0-9]{{{k - 1}}}" if k > 1 else "[0-9]").fullmatch_node(),
                       lit(","), parse_regex(f"[1-9][0-9]{{{k},8}}").fullmatch_node(), lit("}"))
                   for k in range(1, 9)))
    counted = alt(parse_regex(r"\{[0-9]{1,9},?\}").fullmatch_node(), pairs, longer)
    quantifier = seq(alt(chars((0x2A, 0x2B), (0x3F, 0x3F)), counted), opt(lit("?")))
    assertion = alt(lit("^"), lit("$"), lit("\\b"), lit("\\B"))
    quantifier = ("dfa", minimize(dfa_from_node(quantifier)))
    atom = ("dfa", minimize(dfa_from_node(alt(pattern_char, lit("."), atom_escape, char_class))))
    disjunction: Node = NOTHING  # the innermost level holds no groups
    for level in range(depth + 1):
        group = seq(lit("("), opt(lit("?:")), disjunction, lit(")"))
        look = seq(lit("(?"), chars((0x21, 0x21), (0x3D, 0x3D)), disjunction, lit(")"))  # no quantifier (u flag)
        term = alt(assertion, seq(alt(atom, group) if level else atom, opt(quantifier)), look if level else NOTHING)
        alternative = rep(term, 0, None)
        disjunction = ("dfa", minimize(dfa_from_node(seq(alternative, rep(seq(lit("|"), alternative), 0, None)))))
    return disjunction


def _minus(rng: tuple[int, int], excluded: str) -> list[tuple[int, int]]:
    out, lo = [], rng[0]
    for x in sorted(ord(c) for c in set(excluded)):
        if rng[0] <= x <= rng[1]:
            if lo <= x - 1:
                out.append((lo, x - 1))
            lo = x + 1
    if lo <= rng[1]:
        out.append((lo, rng[1]))
    return out


def _at_least_2digits(n: int) -> str:
    """The numbers m >= n written without leading zeros, n < 100: a regex."""
    if n < 10:
        return f"[{n}-9]|[1-9][0-9]"
    t, u = divmod(n, 10)
    more = f"|[{t + 1}-9][0-9]" if t < 9 else ""
    return f"{t}[{u}-9]{more}"
